"""Reward throughput: verifications per second, serial (in-process loop) against the reward pool.

    .venv/bin/python benchmarks/rewards.py                       # math, reasoning_gym, code
    .venv/bin/python benchmarks/rewards.py --kinds math --n 2000 --workers 2

For each verifier the same unique completions are scored twice: once by calling the reward function
in a plain loop in this process (what a trainer without a pool does), and once through a
:class:`~rlvr.rewards.RewardPool` with ``--workers`` processes (0: one per CPU), each call under the
pool's hard timeout. Both are warmed first (imports, worker start-up), so the numbers are the
steady-state rate a trainer sees step after step. The ratio is pool / serial: it shows what the
isolation costs (below 1 on one core) or gains (near the core count for CPU-bound verifiers).

Completions are half right, half wrong, and every text is different, so no cache helps. The load
average is printed with the results: on a shared machine, compare ratios from one run.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import time
from collections.abc import Callable
from fractions import Fraction

from rlvr.data.example import Example
from rlvr.rewards import RewardPool, RewardSpec, get_reward


def math_batch(n: int) -> tuple[list[str], list[Example]]:
    rng = random.Random(0)
    texts, examples = [], []
    for i in range(n):
        value = Fraction(rng.randint(-10_000, 10_000), rng.choice([1, 2, 4, 5, 8, 10, 20, 25]))
        shown = value if i % 2 == 0 else value + Fraction(1, 3)
        p, q = shown.numerator, shown.denominator
        form = [f"{p}/{q}", rf"\frac{{{p}}}{{{q}}}", f"{float(shown):.6g}"][i % 3]
        texts.append(f"Let me think step {i}.\nSo the answer is <answer>{form}</answer>")
        examples.append(Example(id=str(i), prompt=[], reference=str(float(value)) if i % 4 else f"{value}"))
    return texts, examples


def reasoning_gym_batch(n: int) -> tuple[list[str], list[Example]]:
    import reasoning_gym

    tasks = ["chain_sum", "basic_arithmetic", "leg_counting", "letter_counting"]
    texts, examples = [], []
    per_task = -(-n // len(tasks))
    for task in tasks:
        for i, entry in enumerate(reasoning_gym.create_dataset(task, size=per_task, seed=1)):
            answer = entry["answer"] if i % 2 == 0 else f"{entry['answer']}0"
            texts.append(f"thinking about {task} {i}... <answer>{answer}</answer>")
            examples.append(Example(id=f"{task}-{i}", prompt=[], metadata={"rg_entry": entry}))
    return texts[:n], examples[:n]


def code_batch(n: int) -> tuple[list[str], list[Example]]:
    from rlvr.rewards.code import humaneval_examples

    problems = humaneval_examples()
    texts, examples = [], []
    for i in range(n):
        example = problems[i % len(problems)]
        body = example.reference if i % 2 == 0 else "    return None\n"
        texts.append(f"```python\n{example.metadata['code_prefix']}{body}\n# {i}\n```")
        examples.append(example)
    return texts, examples


KINDS: dict[str, tuple[str, Callable[[int], tuple[list[str], list[Example]]], int]] = {
    "math": ("math", math_batch, 600),
    "reasoning_gym": ("reasoning_gym", reasoning_gym_batch, 2000),
    "code": ("code", code_batch, 60),
}


def bench(kind: str, n: int, workers: int, timeout_s: float) -> dict[str, float]:
    name, make, _ = KINDS[kind]
    texts, examples = make(n)
    warm_texts, warm_examples = make(4)
    reward = get_reward(name)
    for text, example in zip(warm_texts, warm_examples):
        reward(text, example)
    start = time.perf_counter()
    serial = [reward(text, example) for text, example in zip(texts, examples)]
    serial_s = time.perf_counter() - start
    with RewardPool([RewardSpec(name=name)], workers=workers, timeout_s=timeout_s) as pool:
        pool.score(warm_texts, warm_examples)
        start = time.perf_counter()
        results = pool.score(texts, examples)
        pool_s = time.perf_counter() - start
        workers_used = pool.num_workers
    pooled = [r.total for r in results]
    mismatches = sum(a != b for a, b in zip(serial, pooled))
    return {
        "n": n,
        "workers": workers_used,
        "serial_per_s": n / serial_s,
        "pool_per_s": n / pool_s,
        "ratio": serial_s / pool_s,
        "mean_reward": sum(serial) / n,
        "mismatches": mismatches,
        "errors": sum(not r.ok for r in results),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kinds", default=",".join(KINDS), help=f"comma-separated, of {', '.join(KINDS)}")
    parser.add_argument("--n", type=int, default=0, help="completions per kind (0: each kind's default)")
    parser.add_argument("--workers", type=int, default=0, help="pool workers (0: one per CPU)")
    parser.add_argument("--timeout-s", type=float, default=10.0)
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args()
    load_before = os.getloadavg()[0]
    results = {}
    for kind in [k.strip() for k in args.kinds.split(",") if k.strip()]:
        results[kind] = bench(kind, args.n or KINDS[kind][2], args.workers, args.timeout_s)
    meta = {"cpus": os.cpu_count(), "load_before": load_before, "load_after": os.getloadavg()[0]}
    if args.json:
        print(json.dumps({"results": results, **meta}, indent=2))
        return
    print(f"cpus {meta['cpus']}, load average {load_before:.2f} -> {meta['load_after']:.2f}")
    print("| verifier | n | serial /s | pool /s (workers) | pool / serial | errors | mismatches |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for kind, r in results.items():
        print(
            f"| {kind} | {r['n']} | {r['serial_per_s']:.0f} | {r['pool_per_s']:.0f} ({r['workers']}) "
            f"| {r['ratio']:.2f}× | {r['errors']} | {r['mismatches']} |"
        )


if __name__ == "__main__":
    main()
