"""Train every algorithm preset for the same wall-clock budget and compare them.

    .venv/bin/python benchmarks/algorithms.py                      # all presets, 300 s each, bundled model
    .venv/bin/python benchmarks/algorithms.py --recipes grpo,dr_grpo,gspo --budget-s 600
    .venv/bin/python benchmarks/algorithms.py --model tiny-random --budget-s 5 --eval-size 4 \\
        --set "rewards.functions=[{name: 'reward_fixtures:scaled_len', params: {scale: 0.01}}]"   # smoke

Each preset in ``recipes/`` runs on its own default task (the chain-sum arithmetic of
``recipes/grpo.yaml``) with ``train.time_limit_s`` = the budget and an unbounded step count, so methods
that make slower steps (more minibatches, a reference model) get fewer of them: the comparison is per
unit of compute, not per step. Before and after training, the held-out set is evaluated greedily and
with ``--eval-samples`` samples per prompt (pass@1 and pass@k).

Writes, under ``--out`` (default ``runs/bench-algorithms``):
- ``algorithms.md``: one row per preset: steps done, held-out accuracy before → after, pass@k, mean
  completion length, policy entropy at the end, training reward at the end;
- ``reward_curves.png``: training reward (moving average) against training time, one line per preset;
- ``results.json``: the raw numbers; ``runs/<preset>/``: each run's directory (metrics, samples).

A preset that cannot run (e.g. its method needs context the trainer does not provide yet) is listed
with its error instead of numbers.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # so that smoke runs can use tests/reward_fixtures.py rewards


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--recipes", default="", help="comma-separated preset names (default: all)")
    parser.add_argument("--model", default=None, help="model.name override (default: each preset's own)")
    parser.add_argument("--budget-s", type=float, default=300.0, help="training seconds per preset")
    parser.add_argument("--eval-size", type=int, default=200, help="held-out prompts")
    parser.add_argument("--eval-samples", type=int, default=8, help="samples per prompt for pass@k")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--seeds", default="", help="comma-separated seeds; each preset runs once per seed (overrides --seed)"
    )
    parser.add_argument("--tag", default="", help="suffix for the preset names in this run (e.g. a variant)")
    parser.add_argument("--out", default=str(ROOT / "runs" / "bench-algorithms"))
    parser.add_argument("--set", action="append", default=[], help="extra key=value override (repeatable)")
    return parser.parse_args(argv)


def preset_paths(names: str) -> list[Path]:
    available = {p.stem: p for p in sorted((ROOT / "recipes").glob("*.yaml"))}
    if not names:
        return list(available.values())
    wanted = [n.strip() for n in names.split(",") if n.strip()]
    unknown = [n for n in wanted if n not in available]
    if unknown:
        raise SystemExit(f"unknown preset(s) {', '.join(unknown)}; available: {', '.join(available)}")
    return [available[n] for n in wanted]


def run_preset(path: Path, args: argparse.Namespace, runs_dir: Path, seed: int | None = None) -> dict:
    """Train one preset for the budget at one seed; return its numbers (or its error)."""
    from rlvr import api
    from rlvr.config import load_config
    from rlvr.log import read_jsonl

    seed = args.seed if seed is None else seed
    label = path.stem + (f"-{args.tag}" if args.tag else "")
    run_name = f"{label}-s{seed}" if args.seeds else label
    overrides = [
        f"train.time_limit_s={args.budget_s}",
        "eval.before=false",  # the same starting model for every preset: evaluated once, not per preset
        "train.steps=1000000",
        f"data.eval_size={args.eval_size}",
        f"eval.samples={args.eval_samples}",
        *([f"eval.pass_k={sorted({1, args.eval_samples})}"] if args.eval_samples else []),
        f"seed={seed}",
        f"output_dir={runs_dir}",
        f"name={run_name}",
        *([f"model.name={args.model}"] if args.model else []),
        *args.set,
    ]
    shutil.rmtree(runs_dir / run_name, ignore_errors=True)
    started = time.perf_counter()
    try:
        cfg = load_config(path, overrides)
        results = api.train(cfg, quiet=True)
    except Exception as err:  # one broken preset must not end the comparison
        return {
            "preset": label,
            "seed": seed,
            "error": f"{type(err).__name__}: {err}".splitlines()[0],
            "traceback": traceback.format_exc(),
        }
    rows = [r for r in read_jsonl(runs_dir / run_name / "metrics.jsonl") if r["phase"] == "train"]
    updated = [r for r in rows if "update/entropy" in r]
    elapsed, curve = 0.0, []
    for r in rows:
        elapsed += r.get("time/step_s", 0.0)
        curve.append((elapsed, r.get("reward/mean", 0.0)))
    tail = rows[-max(1, len(rows) // 5) :]  # last fifth of training, less noisy than the last step
    return {
        "preset": label,
        "seed": seed,
        "run": run_name,
        "advantage": cfg.algo.advantage,
        "loss": cfg.algo.loss,
        "steps": len(rows),
        "updates": len(updated),
        "wall_s": time.perf_counter() - started,
        "before": results.get("before", {}),
        "after": results.get("after", {}),
        "entropy_end": updated[-1]["update/entropy"] if updated else None,
        "reward_end": sum(r.get("reward/mean", 0.0) for r in tail) / len(tail) if tail else None,
        "curve": curve,
        "entropy_curve": [
            (sum(x.get("time/step_s", 0.0) for x in rows[: i + 1]), r["update/entropy"])
            for i, r in enumerate(rows)
            if "update/entropy" in r
        ],
    }


def _fmt(value, digits: int = 3) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def _seed(result: dict, args: argparse.Namespace) -> str:
    return f" (seed {result['seed']})" if args.seeds else ""


def markdown_table(results: list[dict], args: argparse.Namespace) -> str:
    k = args.eval_samples
    lines = [
        f"# Algorithm presets, {args.budget_s:g} s of training each",
        "",
        f"Model: {args.model or 'each preset’s own'}; held-out prompts: {args.eval_size}; "
        f"pass@k from {k} samples per prompt; seed(s) {args.seeds or args.seed}. "
        "Produced by `benchmarks/algorithms.py`.",
        "",
        f"| preset | advantage | loss | steps | held-out acc (before → after) | pass@{k} after | "
        "mean length after | entropy at end | train reward at end |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        if "error" in r:
            lines.append(f"| {r['preset']}{_seed(r, args)} | – | – | – | failed: {r['error'][:80]} | | | | |")
            continue
        before, after = r["before"], r["after"]
        acc = f"{_fmt(before.get('eval/accuracy'))} → {_fmt(after.get('eval/accuracy'))}"
        lines.append(
            f"| {r['preset']}{_seed(r, args)} | {r['advantage']} | {r['loss']} | {r['steps']} | {acc} | "
            f"{_fmt(after.get(f'eval/pass@{k}'))} | {_fmt(after.get('eval/mean_length'), 1)} | "
            f"{_fmt(r['entropy_end'])} | {_fmt(r['reward_end'])} |"
        )
    return "\n".join(lines) + "\n"


def plot_curves(results: list[dict], path: Path, window: int = 5) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(10, 6))
    for r in results:
        if "error" in r or not r["curve"]:
            continue
        times = [t for t, _ in r["curve"]]
        rewards = [v for _, v in r["curve"]]
        smooth = [
            sum(rewards[max(0, i - window + 1) : i + 1]) / len(rewards[max(0, i - window + 1) : i + 1])
            for i in range(len(rewards))
        ]
        label = r["preset"] + (
            f" s{r['seed']}" if "seed" in r and len(results) > len({x["preset"] for x in results}) else ""
        )
        ax.plot(times, smooth, label=label, linewidth=1.2)
    ax.set_xlabel("training time (s)")
    ax.set_ylabel(f"train reward (moving average of {window} steps)")
    ax.set_title("Training reward per algorithm preset, same wall-clock budget")
    ax.grid(alpha=0.3)
    if ax.lines:
        ax.legend(fontsize=7, ncol=2, loc="best")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    out = Path(args.out)
    runs_dir = out / "runs"
    runs_dir.mkdir(parents=True, exist_ok=True)
    results = []
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()] or [args.seed]
    for seed in seeds:  # seed-major: an interrupted run still has every preset at the first seeds
        for path in preset_paths(args.recipes):
            print(f"[{path.stem} seed {seed}] training for {args.budget_s:g} s ...", flush=True)
            result = run_preset(path, args, runs_dir, seed)
            results.append(result)
            if "error" in result:
                print(f"[{path.stem} seed {seed}] failed: {result['error']}", flush=True)
            else:
                print(
                    f"[{path.stem} seed {seed}] {result['steps']} steps, after: {result['after']}", flush=True
                )
            # written after every run, so that a long comparison can be read (and aggregated) while it goes
            (out / "results.json").write_text(json.dumps(results, indent=1, default=str))
    (out / "algorithms.md").write_text(markdown_table(results, args))
    plot_curves(results, out / "reward_curves.png")
    print(f"wrote {out / 'algorithms.md'} and {out / 'reward_curves.png'}")


if __name__ == "__main__":
    main()
