"""Step-level credit (GiGPO) against episode-level GRPO on a game, from the same SFT weights.

    python benchmarks/credit_vs_grpo.py run --game frozenlake --seeds 0 1 2 [--lr 2e-5] [--parallel 2]
    python benchmarks/credit_vs_grpo.py summarize --game frozenlake [--lr 2e-5]   # table + docs/img plot

Per seed: the game's SFT stage (``<game>_sft_rl.yaml``'s first stage: the expert's games, 20 steps)
trained once, or taken from ``--sft-from`` (a directory pattern with ``{seed}``, e.g. the SFT stage
of ``benchmarks/agent_seeds.py``'s pipelines); then two RL runs from those weights with the same
learning rate, seed and wall-clock limit (``--minutes``): ``<game>_sft_rl.yaml``'s RL stage (GRPO)
and ``<game>_gigpo.yaml``'s (GiGPO). Each run has a core of its own (``taskset``, one thread); both
evaluate the same held-out games (data.seed=0) after training, greedy. Runs land in
runs/credit/lr<lr>/ (an SFT stage trained here: in runs/credit/).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SFT_OUT = ROOT / "runs" / "credit"
OUT = SFT_OUT  # the RL runs of one learning rate: set by main() to runs/credit/lr<lr>
METHODS = {"grpo": "{game}_sft_rl", "gigpo": "{game}_gigpo"}
SFT_SET = ["stage=sft", "sft.player=optimal", "sft.batch_size=8", "train.steps=20", "optim.warmup_steps=2"]


def _sft_model(game: str, seed: int, sft_from: str | None) -> Path:
    base = Path(sft_from.format(seed=seed)) if sft_from else SFT_OUT / f"{game}-sft-s{seed}"
    found = sorted((base / "checkpoints").glob("step-*/model"))
    return found[-1] if found else base / "checkpoints" / "step-000020" / "model"


def plan(game: str, seeds: list[int], sft_from: str | None, minutes: float, lr: float) -> list[tuple]:
    """``(name, recipe, overrides, needs)`` for every run; ``needs`` is a model path that must exist
    first. An SFT run's name starts with ``../`` (it lands in runs/credit/, shared by every lr)."""
    runs = []
    for seed in seeds:
        sft = _sft_model(game, seed, sft_from)
        if not sft_from:
            if not (SFT_OUT / f"{game}-sft-s{seed}" / "config.yaml").exists():
                sft_run = ["stages=[]", *SFT_SET, f"seed={seed}", f"output_dir={SFT_OUT}"]
                runs.append((f"{game}-sft-s{seed}", f"{game}_sft_rl", sft_run, None))
        for method, recipe in METHODS.items():
            overrides = [
                "stages=[]", f"model.name={sft}", f"seed={seed}", "eval.before=false", f"optim.lr={lr}",
                f"train.time_limit_s={minutes * 60:g}", "train.time_budget_s=null", "train.steps=1000",
            ]  # fmt: skip
            runs.append((f"{game}-{method}-s{seed}", recipe.format(game=game), overrides, sft))
    return runs


def run(runs: list[tuple], parallel: int, first_core: int) -> None:
    """Train every run not started yet, ``parallel`` at once, each on its own core."""
    OUT.mkdir(parents=True, exist_ok=True)
    todo = [r for r in runs if not (OUT / r[0] / "config.yaml").exists()]
    live: dict[int, subprocess.Popen] = {}
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT / "src")}
    while todo or live:
        for core, proc in list(live.items()):
            if proc.poll() is not None:
                del live[core]
        free = [c for c in range(first_core, first_core + parallel) if c not in live]
        ready = [r for r in todo if r[3] is None or Path(r[3]).exists()]
        if todo and not ready and not live:
            sys.exit(f"cannot start {todo[0][0]}: {todo[0][3]} does not exist")
        while ready and free:
            name, recipe, overrides, _ = ready.pop(0)
            todo.remove((name, recipe, overrides, _))
            core = free.pop(0)
            cmd = [
                "taskset", "-c", str(core), sys.executable, "-m", "rlvr.cli", "train",
                str(ROOT / "recipes" / f"{recipe}.yaml"), "data.seed=0", "model.threads=1",
                f"output_dir={OUT}", *overrides, f"name={name}", "--quiet",
            ]  # fmt: skip
            print(f"{time.strftime('%H:%M:%S')} start {name} on core {core}", flush=True)
            live[core] = subprocess.Popen(
                cmd, stdout=(OUT / f"{name}.log").open("w"), stderr=subprocess.STDOUT, env=env
            )
        time.sleep(5)


def _rows(path: Path) -> list[dict]:
    return (
        [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []
    )


def _after(rows: list[dict]) -> dict | None:
    return next((r for r in rows if r.get("phase") == "after"), None)


def summarize(game: str, sft_from: str | None) -> None:
    """One row per seed: held-out success after SFT, after GRPO and after GiGPO (same SFT weights),
    the moves per episode, the RL steps each made in its time; means ± sd; a plot."""
    table, curves = [], {}
    for run_dir in sorted(d for d in OUT.glob(f"{game}-gigpo-s*") if d.is_dir()):
        seed = int(run_dir.name.rsplit("-s", 1)[1])
        sft_dir = _sft_model(game, seed, sft_from).parents[2]
        row: dict = {"seed": seed, "sft": _after(_rows(sft_dir / "metrics.jsonl"))}
        for method in METHODS:
            rows = _rows(OUT / f"{game}-{method}-s{seed}" / "metrics.jsonl")
            train = [r for r in rows if r.get("phase") == "train"]
            row[method] = _after(rows)
            row[f"{method}_steps"] = len(train)
            curves[(method, seed)] = [(r["step"], r.get("train/accuracy", 0.0)) for r in train]
        if all(row[k] for k in ("sft", *METHODS)):
            table.append(row)
    if not table:
        sys.exit(f"no finished {game} seed in {OUT}")

    def cell(r: dict | None, key: str = "eval/accuracy") -> str:
        return f"{100 * r[key]:.0f}%" if key == "eval/accuracy" else f"{r.get(key, float('nan')):.2f}"

    print("| seed | after SFT | + GRPO | + GiGPO | moves SFT / GRPO / GiGPO | RL steps GRPO / GiGPO |")
    print("|---|---|---|---|---|---|")
    for r in table:
        moves = " / ".join(cell(r[k], "eval/env/moves") for k in ("sft", *METHODS))
        print(
            f"| {r['seed']} | {cell(r['sft'])} | {cell(r['grpo'])} | {cell(r['gigpo'])} | {moves} "
            f"| {r['grpo_steps']} / {r['gigpo_steps']} |"
        )
    for key in ("sft", *METHODS):
        values = [100 * r[key]["eval/accuracy"] for r in table]
        mean = sum(values) / len(values)
        sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1)) if len(values) > 1 else 0.0
        print(f"{key}: {mean:.1f}% ± {sd:.1f}% over {len(values)} seed(s)")
    n = int(table[0]["gigpo"].get("eval/size", 100))
    p = sum(r["sft"]["eval/accuracy"] for r in table) / len(table)  # at the SFT mean
    sd = 100 * math.sqrt(p * (1 - p) / n)
    print(f"binomial sd of one held-out number at {100 * p:.0f}% and n={n}: ±{sd:.1f} points")
    _plot(game, table, curves)


def _plot(game: str, table: list[dict], curves: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.6))
    colors = {"grpo": "tab:blue", "gigpo": "tab:orange"}
    for (method, seed), points in sorted(curves.items()):
        if points:
            steps, acc = zip(*points, strict=True)
            left.plot(steps, acc, color=colors[method], alpha=0.7, label=f"{method} s{seed}")
    left.set(xlabel="RL step", ylabel="training episodes won", title=f"{game}: training")
    left.legend(fontsize=7)
    for r in table:
        values = [100 * r[k]["eval/accuracy"] for k in ("sft", "grpo", "gigpo")]
        right.plot(["after SFT", "+ GRPO", "+ GiGPO"], values, marker="o", label=f"seed {r['seed']}")
    right.set(ylabel="held-out won (%)", title=f"{game}: held-out, equal wall time")
    right.legend(fontsize=7)
    fig.tight_layout()
    out = ROOT / "docs" / "img" / f"credit_{game}.png"
    fig.savefig(out, dpi=110)
    print(f"plot: {out.relative_to(ROOT)}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("command", choices=("run", "summarize"))
    parser.add_argument("--game", default="frozenlake", choices=("frozenlake", "guess_number"))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--sft-from", default=None, help="SFT run directory with {seed}")
    parser.add_argument("--minutes", type=float, default=15.0, help="each RL run's wall-clock limit")
    parser.add_argument("--lr", type=float, default=5e-6)
    parser.add_argument("--parallel", type=int, default=2)
    parser.add_argument("--first-core", type=int, default=0)
    args = parser.parse_args()
    global OUT
    OUT = SFT_OUT / f"lr{args.lr:g}"
    if args.command == "run":
        run(plan(args.game, args.seeds, args.sft_from, args.minutes, args.lr), args.parallel, args.first_core)
    else:
        summarize(args.game, args.sft_from)


if __name__ == "__main__":
    main()
