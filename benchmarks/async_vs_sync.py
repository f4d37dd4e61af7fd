"""Synchronous loop vs asynchronous collection (``train.max_staleness``) with a slow verifier.

    .venv/bin/python benchmarks/async_vs_sync.py                     # SmolLM2, 0.1 s per completion
    .venv/bin/python benchmarks/async_vs_sync.py --model tiny-random --steps 4 --reps 1   # smoke

Each run is ``rlvr train`` in its own process: the bundled model on zero-shot chain_sum, P prompts
× G completions of at most T tokens per step, rewarded by a verifier that takes ``--reward-s``
seconds per completion (a stand-in for a sandboxed test run or a judge call: it sleeps, in the
reward worker process, so it does not compete for the cores). Sync and async alternate, their order
flipping every repetition; the table gives the median wall time per step after the first, the mean
staleness of the async batches, and the ratio. Run it on an idle machine.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run(args: argparse.Namespace, staleness: int | None, out: Path, name: str) -> list[dict]:
    overrides = [
        f"model.name={args.model}",
        f"output_dir={out}",
        f"name={name}",
        f"train.steps={args.steps}",
        "train.time_limit_s=null",
        "train.time_budget_s=null",
        "train.final_checkpoint=none",
        "eval.before=false",
        "data.eval_size=0",
        "data.few_shot=[]",
        f"rollout.prompts_per_step={args.prompts}",
        f"rollout.group_size={args.group}",
        f"rollout.max_new_tokens={args.tokens}",
        "algo.dynamic_sampling=false",
        "rewards.workers=1",
        "rewards.functions=[{name: 'benchmarks.slow_reward:slow_length', "
        f"params: {{seconds: {args.reward_s}}}}}]",
    ]
    if staleness is not None:
        overrides.append(f"train.max_staleness={staleness}")
    cmd = [sys.executable, "-m", "rlvr.cli", "train", *overrides, "--quiet"]
    env = {"PYTHONPATH": f"{ROOT}:{ROOT / 'src'}", "HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"}
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env)
    if proc.returncode:
        raise SystemExit(f"{name} failed:\n{proc.stderr[-3000:]}")
    rows = [json.loads(line) for line in (out / name / "metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if r.get("phase") == "train"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--reward-s", type=float, default=0.1, help="seconds per completion")
    parser.add_argument("--staleness", type=int, default=1)
    args = parser.parse_args()
    step_s: dict[str, list[float]] = {"sync": [], "async": []}
    staleness: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(args.reps):
            for mode in ("sync", "async") if rep % 2 == 0 else ("async", "sync"):
                rows = run(args, args.staleness if mode == "async" else None, Path(tmp), f"{mode}-{rep}")
                step_s[mode] += [r["time/step_s"] for r in rows[1:]]
                staleness += [r["async/staleness"] for r in rows if mode == "async"]
    sync, asynchronous = statistics.median(step_s["sync"]), statistics.median(step_s["async"])
    print(
        f"| model | P × G, T | reward s/completion | sync s/step | async (staleness ≤ {args.staleness}) "
        "s/step | mean staleness | speed-up |"
    )
    print("|---|---|---:|---:|---:|---:|---:|")
    print(
        f"| {args.model} | {args.prompts} × {args.group}, {args.tokens} | {args.reward_s:g} | {sync:.2f} "
        f"| {asynchronous:.2f} | {statistics.mean(staleness):.2f} | {sync / asynchronous:.2f}× |"
    )


if __name__ == "__main__":
    main()
