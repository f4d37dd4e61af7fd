"""The same short GRPO run with the HF engine and with the vLLM engine (``rollout.engine=vllm``).

    .venv/bin/python benchmarks/vllm_vs_hf.py                  # needs `make vllm`
    .venv/bin/python benchmarks/vllm_vs_hf.py --steps 3 --eval 8

Each run is ``rlvr train`` in its own process on the default job (chain_sum, the bundled
SmolLM2-135M), same seed and settings; only the engine differs. The two do not sample the same
tokens (different samplers and random streams), so the comparison is qualitative: rewards and
losses in the same range, the gap between the engine's sampling logprobs and the trainer's
(``update/sampler_logprob_diff``), and time per step (on CPU vLLM is not expected to be faster:
its CPU kernels and the weight push cost more than the in-process fused decode). The vLLM run also
reports its weight push from the server's log. Run it on an idle machine.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run(args: argparse.Namespace, engine: str, out: Path) -> tuple[list[dict], float]:
    overrides = [
        f"output_dir={out}",
        f"name={engine}",
        f"train.steps={args.steps}",
        "train.time_limit_s=null",
        "train.time_budget_s=null",
        "train.final_checkpoint=none",
        f"data.eval_size={args.eval}",
        f"rollout.prompts_per_step={args.prompts}",
        f"rollout.group_size={args.group}",
        f"rollout.max_new_tokens={args.tokens}",
        f"rollout.engine={engine}",
    ]
    command = [sys.executable, "-m", "rlvr.cli", "train", *overrides, "--quiet"]
    subprocess.run(command, check=True, cwd=ROOT)
    rows = [json.loads(line) for line in (out / engine / "metrics.jsonl").read_text().splitlines()]
    return rows, 0.0


def summary(rows: list[dict]) -> dict[str, float]:
    train = [r for r in rows if r["phase"] == "train"]
    evals = {r["phase"]: r["eval/accuracy"] for r in rows if r["phase"] in ("before", "after")}
    later = [r["time/step_s"] for r in train[1:]] or [train[0]["time/step_s"]]
    return {
        "reward/mean": statistics.mean(r["reward/mean"] for r in train),
        "update/loss": statistics.mean(r["update/loss"] for r in train if "update/loss" in r),
        "sampler_logprob_diff": max(r.get("update/sampler_logprob_diff", 0.0) for r in train),
        "step_s (median, after the first)": statistics.median(later),
        "collect_s (median)": statistics.median(r["time/collect_s"] for r in train),
        "eval before": evals.get("before", float("nan")),
        "eval after": evals.get("after", float("nan")),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--prompts", type=int, default=2)
    p.add_argument("--group", type=int, default=8)
    p.add_argument("--tokens", type=int, default=24)
    p.add_argument("--eval", type=int, default=20)
    args = p.parse_args()
    (ROOT / "runs").mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="vllm-vs-hf-", dir=ROOT / "runs") as tmp:
        results = {engine: summary(run(args, engine, Path(tmp))[0]) for engine in ("hf", "vllm")}
        log = (Path(tmp) / "vllm" / "vllm_server.log").read_text(errors="replace")
    print(f"\n{args.steps} steps, {args.prompts} prompts x {args.group} completions, <= {args.tokens} tokens")
    print(f"{'':36s} {'hf':>10s} {'vllm':>10s}")
    for key in results["hf"]:
        print(f"{key:36s} {results['hf'][key]:10.4g} {results['vllm'][key]:10.4g}")
    pushes = re.findall(r"weight update .* took ([0-9.]+) s", log)
    if pushes:
        median = statistics.median(map(float, pushes))
        print(f"vLLM server: {len(pushes)} weight updates, {median:.2f} s median (server side)")


if __name__ == "__main__":
    main()
