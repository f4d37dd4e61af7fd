"""Policy update and generation with glibc's default malloc vs rlvr's keep_freed_memory, alternating.

    .venv/bin/python benchmarks/host_memory.py                      # 2x8x32, 4x8x64, 1x16x128
    .venv/bin/python benchmarks/host_memory.py --configs 2x8x32 --reps 1

The setting is process-wide and taken at model load (``rlvr/runtime.py``), so every measurement is
its own subprocess, with ``RLVR_KEEP_FREED_MEMORY`` 0 or 1; the two alternate, and their order flips
every repetition. Each child loads the bundled model, builds P zero-shot chain_sum prompts, and
times ``steps`` rounds of one generate call (G completions of exactly T tokens) and one policy update
(rlvr's GRPO loss, fused AdamW); the first round is warm-up. It prints the median seconds of each and
the child's peak RSS. Run it on an idle machine.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

MARK = "HOST_MEMORY_RESULT "


def child(shape: str, steps: int, threads: int) -> None:
    import torch
    from bench_setup import grpo_step

    from rlvr.runtime import keep_freed_memory
    from rlvr.train.learn.batch import build_batch
    from rlvr.train.learn.update import policy_update

    torch.set_num_threads(threads)
    p, g, t = (int(x) for x in shape.split("x"))
    bench = grpo_step(p, g, t)
    engine = bench.engine
    generate_s, update_s = [], []
    for _ in range(steps + 1):
        start = time.perf_counter()
        groups = engine.generate(bench.prompts, bench.params)
        generate_s.append(time.perf_counter() - start)
        batch = build_batch(groups, bench.advantages, engine.pad_id)
        start = time.perf_counter()
        policy_update(bench.model, bench.optimizer, bench.scheduler, batch, bench.cfg.algo, 1.0, 1.0, t)
        update_s.append(time.perf_counter() - start)
    result = {
        "applied": keep_freed_memory(),
        "generate_s": statistics.median(generate_s[1:]),
        "update_s": statistics.median(update_s[1:]),
        "peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
    }
    print(MARK + json.dumps(result), flush=True)


def run_child(shape: str, keep: bool, args: argparse.Namespace) -> dict:
    env = dict(os.environ, RLVR_KEEP_FREED_MEMORY="1" if keep else "0")
    cmd = [
        sys.executable,
        __file__,
        "--child",
        shape,
        "--steps",
        str(args.steps),
        "--threads",
        str(args.threads),
    ]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    lines = [line for line in proc.stdout.splitlines() if line.startswith(MARK)]
    if proc.returncode or not lines:
        raise SystemExit(f"child {shape} keep={keep} failed:\n{proc.stderr[-3000:]}")
    result = json.loads(lines[-1][len(MARK) :])
    if result["applied"] != keep:
        raise SystemExit(f"child {shape}: keep_freed_memory() returned {result['applied']}, expected {keep}")
    return result


def report_row(shape: str, runs: dict[bool, list[dict]]) -> str:
    def med(keep: bool, key: str) -> float:
        return statistics.median(r[key] for r in runs[keep])

    def peak(keep: bool) -> float:
        return max(r["peak_rss_gib"] for r in runs[keep])

    label = shape.replace("x", " × ", 1).replace("x", ", ")
    return (
        f"| {label} | {med(False, 'update_s'):.2f} | {med(True, 'update_s'):.2f} "
        f"| {med(False, 'update_s') / med(True, 'update_s'):.2f}× "
        f"| {med(False, 'generate_s'):.2f} / {med(True, 'generate_s'):.2f} "
        f"| {peak(False):.1f} / {peak(True):.1f} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", default="2x8x32,4x8x64,1x16x128", help="comma-separated PxGxT")
    parser.add_argument("--reps", type=int, default=2, help="subprocesses per setting and config")
    parser.add_argument("--steps", type=int, default=3, help="timed rounds per subprocess (after 1 warm-up)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.steps, args.threads)
        return
    print(
        "| P × G, T | update s: glibc default | update s: keep freed | ratio | generate s: default / keep "
        "| peak RSS GiB: default / keep |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    for shape in args.configs.split(","):
        runs: dict[bool, list[dict]] = {False: [], True: []}
        for rep in range(args.reps):
            for keep in (False, True) if rep % 2 == 0 else (True, False):
                runs[keep].append(run_child(shape, keep, args))
        print(report_row(shape, runs), flush=True)


if __name__ == "__main__":
    main()
