"""Agents on every seed: each agent recipe trained at three seeds (search also on two corpora), then
one table of held-out before / after, turns, tool calls and minutes, and the curves of one run each.

    python benchmarks/agent_seeds.py run [--only search] [--parallel 2]   # train (runs/agents/<run>)
    python benchmarks/agent_seeds.py summarize                            # table + docs/img plot

Each run is ``rlvr train recipes/<recipe>.yaml seed=S`` with ``model.threads=1`` (PLAN: the held-out
set of a search corpus, and of a game, is the same for the three seeds, so one run of each evaluates
before training and the others share its number), pinned
to one core (``taskset``), ``--parallel`` of them at once (the machine has 2 cores). A run's minutes
are its wall time from launch to the last write of its run directory (model loading, evals and
training included). ``summarize`` prints the markdown table that docs/agents.md holds, writes
``runs/agents/summary.json`` and draws ``docs/img/agent_curves.png``.
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

import yaml

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "runs" / "agents"
SEEDS = (0, 1, 2)


def _search(seed: int, corpus: int, recipe: str = "search_agent") -> tuple[str, str, list[str]]:
    """Corpus ``corpus``'s held-out set is drawn by data.seed = corpus for every training seed, so
    only the run at seed == corpus evaluates before training (greedy: the same number for all)."""
    config = f"data.task_config={{corpus_size: 200, corpus_seed: {corpus}, hops: [1]}}"
    before = [] if seed == corpus else ["eval.before=false"]
    prefix = "search" if recipe == "search_agent" else recipe.replace("_agent", "").replace("_", "-")
    return (
        f"{prefix}-s{seed}-c{corpus}",
        recipe,
        [f"seed={seed}", f"data.seed={corpus}", config, *before],
    )


def _game(recipe: str, seed: int) -> tuple[str, str, list[str]]:
    """One held-out set (data.seed=0) for the three training seeds; seed 0 evaluates before."""
    before = [] if seed == 0 else ["eval.before=false"]
    return f"{recipe.replace('_', '-')}-s{seed}", recipe, [f"seed={seed}", "data.seed=0", *before]


PLAN: dict[str, list[tuple[str, str, list[str]]]] = {
    "search": [_search(s, c) for c in (0, 1) for s in SEEDS],
    # SFT on the search oracle's episodes, then GRPO (runs/agents/search-sft-rl-s*-c*/{sft,rl})
    "search_agent_sft_rl": [_search(s, c, "search_agent_sft_rl") for c in (0, 1) for s in SEEDS],
    "python_tool": [(f"python-tool-s{s}", "python_tool", [f"seed={s}", f"data.seed={s}"]) for s in SEEDS],
    **{recipe: [_game(recipe, s) for s in SEEDS] for recipe in ("guess_number", "frozenlake", "wordle")},
    # the games as SFT on the expert's games, then GRPO (pipelines: runs/agents/<run>/{sft,rl})
    **{
        f"{game}_sft_rl": [_game(f"{game}_sft_rl", s) for s in SEEDS]
        for game in ("guess_number", "frozenlake", "wordle", "wordle_hints")
    },
    # FrozenLake's SFT stage alone, 48 steps instead of 20 (384 of the 400 training boards once)
    "frozenlake_sft48": [
        (
            f"frozenlake-sft48-s{s}",
            "frozenlake_sft_rl",
            [f"seed={s}", "data.seed=0", "eval.before=false", "stages=[]", "stage=sft", "sft.player=optimal"]
            + ["sft.batch_size=8", "train.steps=48", "optim.warmup_steps=2"],
        )
        for s in SEEDS
    ],
    # number guessing again with 20 minutes of training (the recipes' 6 minutes are 2-3 steps here)
    **{
        f"{recipe}_long": [
            (
                f"{recipe.replace('_', '-')}-long-s0",
                recipe,
                [
                    "seed=0",
                    "data.seed=0",
                    "eval.before=false",
                    "train.time_limit_s=1200",
                    "train.time_budget_s=null",
                ],
            )
        ]
        for recipe in ("guess_number",)
    },
}
# the run whose before-training eval a run without one shares (same held-out set, same base model)
BEFORE_FROM = {
    **{
        f"{p}-s{s}-c{c}": f"{p}-s{c}-c{c}" for p in ("search", "search-sft-rl") for s in SEEDS for c in (0, 1)
    },
    **{
        f"{g}{kind}-s{s}": f"{g}{kind}-s0"
        for g in ("guess-number", "frozenlake", "wordle", "wordle-hints")
        for kind in ("", "-sft-rl")
        for s in SEEDS
    },
    "guess-number-long-s0": "guess-number-s0",
    **{f"frozenlake-sft48-s{s}": "frozenlake-sft-rl-s0" for s in SEEDS},
}
# the per-episode action count each recipe's table shows beside turns
ACTIONS = {
    "search": ("searches", "eval/env/searches"),
    "search_agent_sft_rl": ("searches", "eval/env/searches"),
    "python_tool": ("tool calls", "eval/tool_calls"),
    "guess_number": ("valid guesses", "eval/env/moves"),
    "frozenlake": ("valid moves", "eval/env/moves"),
    "wordle": ("valid guesses", "eval/env/moves"),
    "guess_number_long": ("valid guesses", "eval/env/moves"),
    "frozenlake_sft48": ("valid moves", "eval/env/moves"),
    "guess_number_sft_rl": ("valid guesses", "eval/env/moves"),
    "frozenlake_sft_rl": ("valid moves", "eval/env/moves"),
    "wordle_sft_rl": ("valid guesses", "eval/env/moves"),
    "wordle_hints_sft_rl": ("valid guesses", "eval/env/moves"),
}


def run(names: list[tuple[str, str, list[str]]], parallel: int, first_core: int = 0) -> None:
    """Train every run not started yet, ``parallel`` at once, each on its own core (from
    ``first_core`` on: two invocations with different recipes can share the machine)."""
    OUT.mkdir(parents=True, exist_ok=True)
    todo = [n for n in names if not (OUT / n[0] / "config.yaml").exists()]  # not started
    live: dict[int, subprocess.Popen] = {}
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT / "src")}
    while todo or live:
        for core, proc in list(live.items()):
            if proc.poll() is not None:
                del live[core]
        free = [c for c in range(first_core, first_core + parallel) if c not in live]
        while todo and free:
            name, recipe, overrides = todo.pop(0)
            core = free.pop(0)
            cmd = [
                "taskset", "-c", str(core), sys.executable, "-m", "rlvr.cli", "train",
                str(ROOT / "recipes" / f"{recipe}.yaml"), *overrides, "model.threads=1",
                f"output_dir={OUT}", f"name={name}", "--quiet",
            ]  # fmt: skip
            print(f"{time.strftime('%H:%M:%S')} start {name} on core {core}", flush=True)
            (OUT / f"{name}.started").write_text(f"{time.time()}\n")
            live[core] = subprocess.Popen(
                cmd, stdout=(OUT / f"{name}.log").open("w"), stderr=subprocess.STDOUT, env=env
            )
        time.sleep(5)


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _started(name: str) -> float:
    """When the run was launched (written by :func:`run`; else its config's first write)."""
    mark = OUT / f"{name}.started"
    return float(mark.read_text()) if mark.exists() else (OUT / name / "config.yaml").stat().st_mtime


def _stage_dirs(run_dir: Path) -> list[Path]:
    """A run's directories: the run itself, or a pipeline's stages in order (pipeline.json)."""
    manifest = run_dir / "pipeline.json"
    if not manifest.exists():
        return [run_dir]
    return [run_dir / s["dir"] for s in json.loads(manifest.read_text())["stages"]]


def _finished(stage_dir: Path) -> bool:
    """Whether a stage evaluated after training (its last act)."""
    metrics = stage_dir / "metrics.jsonl"
    return metrics.exists() and any(r.get("phase") == "after" for r in _rows(metrics))


def _minutes(name: str, stage_dirs: list[Path]) -> float:
    """Launch to the last write; a pipeline's: the sum of its stages' (each from its config's write
    to its metrics' last), so a stage run again with other settings (--resume) counts once."""
    if len(stage_dirs) == 1:
        return ((stage_dirs[0] / "metrics.jsonl").stat().st_mtime - _started(name)) / 60
    return (
        sum((d / "metrics.jsonl").stat().st_mtime - (d / "config.yaml").stat().st_mtime for d in stage_dirs)
        / 60
    )


def _after_correct(stage_dir: Path) -> dict[str, bool]:
    """Held-out example id -> solved, from the stage's evaluation after training."""
    path = stage_dir / "eval_samples.jsonl"
    if not path.exists():
        return {}
    return {r["id"]: bool(r["correct"]) for r in _rows(path) if r.get("phase") == "after"}


def mcnemar_p(b: int, c: int) -> float:
    """Exact two-sided McNemar p-value of ``b`` examples solved only by one side, ``c`` only by the other."""
    n = b + c
    tail = sum(math.comb(n, i) for i in range(min(b, c) + 1)) / 2**n if n else 0.5
    return min(1.0, 2 * tail)


def summarize_run(name: str, recipe_key: str) -> dict | None:
    """Before / after / steps / minutes of one finished run (None if it has not finished)."""
    run_dir = OUT / name
    planned = _stage_dirs(run_dir)
    # a pipeline stopped inside a stage: what its finished stages measured (the table says so)
    stage_dirs = [d for d in planned if _finished(d)] or planned[:1] if len(planned) > 1 else planned
    metrics = stage_dirs[-1] / "metrics.jsonl"
    if not metrics.exists():
        return None
    rows = [r for d in stage_dirs if (d / "metrics.jsonl").exists() for r in _rows(d / "metrics.jsonl")]
    before = next((r for r in rows if r.get("phase") == "before"), None)
    for sibling in (BEFORE_FROM.get(name, name), name.split("-s")[0].removesuffix("-long") + "-before"):
        for shared in (d / "metrics.jsonl" for d in _stage_dirs(OUT / sibling)[:1]):
            if before is None and shared.exists():  # eval.before=false: a sibling's (same set and model)
                before = next((r for r in _rows(shared) if r.get("phase") == "before"), None)
    after = next((r for r in _rows(metrics) if r.get("phase") == "after"), None)
    if after is None:  # a missing before (its sibling's run is not on this disk) prints as "–"
        return None
    # a pipeline: held-out after its first stage (SFT), and the last stage's (RL) training steps
    first_after = None
    if len(stage_dirs) > 1:
        first_after = next(
            (r for r in _rows(stage_dirs[0] / "metrics.jsonl") if r.get("phase") == "after"), None
        )
        rows = _rows(metrics)
    # a pipeline: the held-out examples its last stage solved that its first had not, and the reverse
    paired = None
    if first_after is not None:
        first, last = _after_correct(stage_dirs[0]), _after_correct(stage_dirs[-1])
        shared = first.keys() & last.keys()
        gained = sum(last[k] and not first[k] for k in shared)
        lost = sum(first[k] and not last[k] for k in shared)
        paired = {"gained": gained, "lost": lost, "p": mcnemar_p(gained, lost)} if shared else None
    train = [r for r in rows if r.get("phase") == "train"]
    action_key = ACTIONS[recipe_key][1]
    rollout = yaml.safe_load((run_dir / "config.yaml").read_text())["rollout"]
    episodes = rollout["prompts_per_step"] * rollout["group_size"]
    reevaluated = OUT / f"eval-{name}.json"  # the final checkpoint evaluated again (see the docs)
    again = json.loads(reevaluated.read_text()) if reevaluated.exists() else None
    return {
        "run": name,
        "recipe": recipe_key,
        "size": int(after.get("eval/size", 0)),
        "before": None if before is None else before["eval/accuracy"],
        "after": after["eval/accuracy"],
        "after_first_stage": None if first_after is None else first_after["eval/accuracy"],
        "last_stage_paired": paired,
        "stages_missing": [d.name for d in planned[len(stage_dirs) :]],
        "after_errors": after.get("eval/reward_errors", 0.0),
        "reevaluated": None if again is None else again["eval/accuracy"],
        "reevaluated_errors": None if again is None else again.get("eval/reward_errors", 0.0),
        "turns_before": (before or {}).get("eval/turns", 0.0),
        "turns_after": after.get("eval/turns", 0.0),
        "actions_before": (before or {}).get(action_key, 0.0),
        "actions_after": after.get(action_key, 0.0),
        "unanswered_farming_after": after.get("eval/env/process_unanswered"),
        "steps": len(train),
        "minutes": _minutes(name, stage_dirs),
        "train": [
            {
                "step": r["step"],
                "accuracy": r.get("train/accuracy", 0.0),
                "turns": r.get("env/turns", 0.0) / episodes,
                "process_unanswered": r.get("reward/env/process_unanswered"),
            }
            for r in train
        ],
    }


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{value:.1%}"


def table(results: list[dict]) -> str:
    lines = [
        "| recipe | run | held-out before → after (n) | turns / episode | actions / episode | steps | min |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in results:
        label = ACTIONS[r["recipe"]][0]
        after = f"**{r['after']:.1%}**"
        if r.get("after_first_stage") is not None:
            after = f"{r['after_first_stage']:.1%} (SFT) → {after} (RL)"
            if r.get("last_stage_paired"):
                pair = r["last_stage_paired"]
                after += f" [RL +{pair['gained']} −{pair['lost']}, p = {pair['p']:.2g}]"
        if r.get("stages_missing"):
            after = f"{after} (SFT; stopped before {', '.join(r['stages_missing'])})"
        if r["after_errors"]:
            after += f" ({r['after_errors']:.0f} env errors)"
        if r["reevaluated"] is not None:
            after = f"{after}; again: **{r['reevaluated']:.1%}** ({r['reevaluated_errors']:.0f} errors)"
        lines.append(
            f"| {r['recipe']} | {r['run']} | {_pct(r['before'])} → {after} ({r['size']}) | "
            f"{r['turns_before']:.2f} → {r['turns_after']:.2f} | {label}: {r['actions_before']:.2f} → "
            f"{r['actions_after']:.2f} | {r['steps']} | {r['minutes']:.0f} |"
        )
    lines.append("")
    lines.append("| recipe | runs | after: mean ± sd (min – max) | gain over before: mean |")
    lines.append("|---|---|---|---|")
    for recipe in PLAN:
        got = [r for r in results if r["recipe"] == recipe]
        if not got:
            continue
        after = [r["after"] if r["reevaluated"] is None else r["reevaluated"] for r in got]
        mean = sum(after) / len(after)
        sd = math.sqrt(sum((a - mean) ** 2 for a in after) / (len(after) - 1)) if len(after) > 1 else 0.0
        known = [a - r["before"] for a, r in zip(after, got, strict=True) if r["before"] is not None]
        gain = f"{sum(known) / len(known):+.1%}" if known else "–"
        spread = f"{mean:.1%} ± {sd:.1%} ({min(after):.1%} – {max(after):.1%})"
        lines.append(f"| {recipe} | {len(got)} | {spread} | {gain} |")
    return "\n".join(lines)


def plot(results: list[dict], path: Path) -> bool:
    """Training accuracy per step (and turns per episode) of the first finished run of each recipe."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    firsts = [
        next(r for r in results if r["recipe"] == k) for k in PLAN if any(r["recipe"] == k for r in results)
    ]
    if not firsts:
        return False
    fig, axes = plt.subplots(1, len(firsts), figsize=(3.2 * len(firsts), 3.2), squeeze=False)
    for ax, r in zip(axes[0], firsts, strict=True):
        steps = [t["step"] for t in r["train"]]
        ax.plot(steps, [t["accuracy"] for t in r["train"]], marker=".", label="train accuracy")
        ax.scatter([0, steps[-1] if steps else 1], [r["before"] or 0.0, r["after"]], color="black", zorder=3,
                   label="held-out (greedy)")  # fmt: skip
        ax.set_ylim(-0.02, 1.02)
        ax.set_xlabel("step")
        ax.set_title(r["run"], fontsize=9)
        turns = ax.twinx()
        turns.plot(
            steps, [t["turns"] for t in r["train"]], color="grey", linestyle=":", label="turns / episode"
        )
        turns.set_ylim(0, max([t["turns"] for t in r["train"]] + [1]) * 1.1)
        if ax is axes[0][0]:
            ax.set_ylabel("accuracy")
            ax.legend(fontsize=7, loc="upper left")
            turns.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mode", choices=("run", "summarize"))
    parser.add_argument("--only", action="append", default=[], help=f"recipes to run: {', '.join(PLAN)}")
    parser.add_argument("--parallel", type=int, default=2, help="runs at once, one core each")
    parser.add_argument("--seeds", type=int, nargs="*", help="run only these training seeds (default: all)")
    parser.add_argument("--first-core", type=int, default=0, help="pin the runs from this core on")
    parser.add_argument("--plot", default=str(ROOT / "docs" / "img" / "agent_curves.png"))
    args = parser.parse_args()
    chosen = [k for k in PLAN if not args.only or k in args.only]
    if args.mode == "run":
        entries = [e for k in chosen for e in PLAN[k]]
        if args.seeds is not None:
            entries = [e for e in entries if any(o in (f"seed={s}" for s in args.seeds) for o in e[2])]
        run(entries, args.parallel, args.first_core)
    # the summary and the plot always cover every run on disk (a `run --only X` must not shrink them)
    results = [s for k in PLAN for name, _, _ in PLAN[k] if (s := summarize_run(name, k)) is not None]
    print(table([r for r in results if r["recipe"] in chosen]))
    (OUT / "summary.json").write_text(json.dumps(results, indent=1) + "\n")
    if plot(results, Path(args.plot)):
        print(f"wrote {args.plot}")


if __name__ == "__main__":
    main()
