"""Test-time scaling on a checkpoint: accuracy against N samples per problem (docs/data.md,
"Test-time scaling").

    .venv/bin/python benchmarks/test_time_scaling.py runs/NAME [--n 1,4,16] [--problems 200] \\
        [--out runs/tts-NAME] [--set model.threads=2 ...]

``runs/NAME`` is a run directory (its newest checkpoint and its own config.yaml: data, rewards,
prompt format), a checkpoint directory, or a model name (then the default job: chain_sum). One
held-out evaluation (the run's data seed, so the same problems it was evaluated on, ``--problems``
of them) with ``max(N)`` samples per problem at eval.temperature reports, for each N:

- ``pass@N`` (unbiased, over all samples) and best-of-N by the verifier (the reward: an oracle),
- ``maj@N``: majority vote of the first N samples (``vote_N/none``),
- best-of-N by the policy's mean token logprob and the vote weighted by exp(mean logprob),
- and, once: greedy accuracy and self-verification (the policy checks its greedy answer and may
  revise it: accuracy, revised, fixed, broken).

The table goes to stdout; ``--out`` gets ``results.json`` (every metric, the binomial standard
error of each accuracy, the command), ``eval_samples.jsonl`` (each problem's samples, choices and
verification reply) and ``accuracy_vs_n.png``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

ROWS = [  # (label, metric template; {n} is N)
    ("pass@N", "eval/pass@{n}"),
    ("best-of-N, verifier (oracle)", "eval/best_of_{n}/verifier"),
    ("maj@N (vote, weight 1)", "eval/vote_{n}/none"),
    ("vote, weight exp(logprob)", "eval/vote_{n}/logprob"),
    ("best-of-N, mean logprob", "eval/best_of_{n}/logprob"),
]
ONCE = [
    ("greedy", "eval/accuracy"),
    ("self-verify", "eval/self_verify/accuracy"),
    ("  revised", "eval/self_verify/revised"),
    ("  fixed", "eval/self_verify/fixed"),
    ("  broken", "eval/self_verify/broken"),
]


def evaluate(checkpoint: str, ns: list[int], problems: int, extra: list[str]) -> tuple[dict, list[dict], str]:
    """The metrics and per-problem records of one scaled evaluation of ``checkpoint``, and its name."""
    import torch

    from rlvr import api
    from rlvr.collect import Collector
    from rlvr.data.from_config import build_datasets
    from rlvr.models import load_model, load_tokenizer
    from rlvr.rollout.from_config import build_engine

    model_dir, run_config = api.resolve_run(checkpoint)
    top = max(ns)
    cfg = api.load_config(
        run_config,
        [
            f"model.name={model_dir}",
            f"data.eval_size={problems}",
            f"eval.samples={top}",
            f"eval.pass_k=[{','.join(map(str, ns))}]",
            f"eval.best_of=[{','.join(map(str, ns))}]",
            "eval.select_by=[verifier, logprob]",
            "eval.vote_weight=[none, logprob]",
            "eval.self_verify=true",
            *extra,
        ],
    )
    if cfg.model.threads:
        torch.set_num_threads(cfg.model.threads)
    _, examples = build_datasets(cfg.data)
    tokenizer = load_tokenizer(cfg.model.name)
    engine = build_engine(cfg, load_model(cfg.model.name, cfg.model.dtype, cfg.model.device), tokenizer)
    collector = Collector(cfg, engine, tokenizer, examples, examples)
    try:
        metrics, records = collector.evaluate("scaling")
    finally:
        collector.close()
    return metrics, records, model_dir


def standard_error(p: float, n: int) -> float:
    """Binomial standard error of an accuracy ``p`` over ``n`` problems."""
    return math.sqrt(max(p * (1 - p), 0.0) / max(n, 1))


def table(metrics: dict, ns: list[int]) -> str:
    size = int(metrics["eval/size"])
    width = max(len(label) for label, _ in ROWS + ONCE) + 2
    lines = [f"{'':{width}}" + "".join(f"{f'N={n}':>9}" for n in ns)]
    for label, key in ROWS:
        lines.append(f"{label:{width}}" + "".join(f"{metrics[key.format(n=n)]:>9.1%}" for n in ns))
    for label, key in ONCE:
        lines.append(f"{label:{width}}{metrics[key]:>9.1%}")
    half = 1.96 * standard_error(0.5, size)
    lines.append(f"({size} problems: a 95% binomial interval is at most ±{half:.1%} around an accuracy)")
    return "\n".join(lines)


def plot(metrics: dict, ns: list[int], path: Path, title: str) -> bool:
    """accuracy against N, one line per method, greedy and self-verify as horizontal lines."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for label, key in ROWS:
        style = "--" if "oracle" in label or label == "pass@N" else "-"
        ax.plot(ns, [metrics[key.format(n=n)] for n in ns], style, marker="o", label=label)
    ax.axhline(metrics["eval/accuracy"], color="grey", linestyle=":", label="greedy")
    ax.axhline(metrics["eval/self_verify/accuracy"], color="black", linestyle="-.", label="self-verify")
    ax.set_ylim(0, 1)
    ax.set_xscale("log", base=2)
    ax.set_xticks(ns, [str(n) for n in ns])
    ax.set_xlabel("N (samples per problem)")
    ax.set_ylabel(f"accuracy ({int(metrics['eval/size'])} held-out problems)")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkpoint", nargs="?", default="smollm2-135m-instruct")
    parser.add_argument("--n", default="1,4,16", help="comma-separated N values")
    parser.add_argument("--problems", type=int, default=200, help="held-out problems (data.eval_size)")
    parser.add_argument("--out", default=None, help="results directory (default runs/tts-<name>)")
    parser.add_argument("--set", action="append", default=[], help="extra key=value config overrides")
    args = parser.parse_args()
    ns = sorted({int(n) for n in args.n.split(",")})
    out = Path(args.out or f"runs/tts-{Path(args.checkpoint).name}")
    out.mkdir(parents=True, exist_ok=True)
    began = time.perf_counter()
    metrics, records, model_dir = evaluate(args.checkpoint, ns, args.problems, args.set)
    wall = time.perf_counter() - began
    size = int(metrics["eval/size"])
    print(table(metrics, ns))
    print(f"{model_dir}: {wall:.0f} s")
    accuracies = [key.format(n=n) for _, key in ROWS for n in ns] + [key for _, key in ONCE[:2]]
    results = {
        "checkpoint": args.checkpoint,
        "model": model_dir,
        "ns": ns,
        "problems": size,
        "wall_s": round(wall, 1),
        "metrics": metrics,
        "standard_error": {k: standard_error(metrics[k], size) for k in accuracies},
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
    }
    (out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    with open(out / "eval_samples.jsonl", "w") as f:
        for record in records:
            f.write(json.dumps(record) + "\n")
    drawn = plot(metrics, ns, out / "accuracy_vs_n.png", f"{args.checkpoint}: test-time scaling")
    print(
        f"wrote {out / 'results.json'}, {out / 'eval_samples.jsonl'}"
        + (", accuracy_vs_n.png" if drawn else "")
    )


if __name__ == "__main__":
    main()
