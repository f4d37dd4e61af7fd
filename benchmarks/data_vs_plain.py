"""What the data plan buys on the bundled SmolLM2-135M (docs/data.md, "Results"): each comparison a
pair of arms run *side by side*, one thread each, pinned to core 0 and core 1 (``taskset``), equal
training wall time, every arm evaluated on the same held-out problems before and after.

    .venv/bin/python benchmarks/data_vs_plain.py [--out runs/data-vs-plain] [--seeds 0 1] [--train-s 300]
    .venv/bin/python benchmarks/data_vs_plain.py --pairs plain:greso        # one comparison
    .venv/bin/python benchmarks/data_vs_plain.py --table                    # the table of what ran

1. ``greso`` (selection before rollout, data.selection.kind=greso; ``greso_reward`` with streaks of
   equal total rewards, data.selection.signal=reward) vs ``plain`` (dynamic sampling with refill,
   DAPO-style), on the default job: rollouts saved, steps per minute, accuracy.
2. ``curriculum`` (schedule over chain_sum's terms and digits, easy → hard) vs ``uniform`` on a wider
   chain_sum range, evaluated on harder problems than the curriculum starts from.
3. ``replay`` (best past correct sample into groups with none, data.replay.kind=best_correct) vs
   ``no_replay`` on harder chain_sum, where the base model rarely succeeds.

Each arm is a normal run directory under ``--out`` (``rlvr report`` reads it); results go to
``--out/results.jsonl``, the table to stdout.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import time
from pathlib import Path

from side_by_side import start_arm

ROOT = Path(__file__).resolve().parents[1]

COMMON = [
    "model.threads=1",
    "train.time_budget_s=null",
    "train.steps=1000",
    "train.final_checkpoint=model",
    "eval.before=true",
    "log.every_steps=5",
]
# the default job's rewards with DAPO's refill: the base both arms of comparison 1 share
PLAIN = ["grpo", "algo.dynamic_sampling=true", "algo.refill=true", "algo.max_refills=2", "data.train_size=32"]
# comparison 2: four cells of chain_sum for training (2-3 terms, 1-2 digits; the base model gets 70% of
# 2 terms of 1 digit, 3-17% of the others); held out: 2-digit operands only, where it gets about 10%
WIDE = {"min_terms": 2, "max_terms": 3, "min_digits": 1, "max_digits": 2}
HARD_EVAL = {"min_terms": 2, "max_terms": 3, "min_digits": 2, "max_digits": 2}
# comparison 3: problems the base model rarely solves (greedy 2/20 on a 20-problem check), from a
# small pool so that prompts come back (about every 8 steps) and replay has samples to give
HARDER = {"min_terms": 2, "max_terms": 2, "min_digits": 2, "max_digits": 2}


TERMS, DIGITS = "metadata.rg_entry.metadata.num_terms", "metadata.rg_entry.metadata.num_digits"


def _yaml(d: dict) -> str:
    return "{" + ", ".join(f"{k}: {v}" for k, v in d.items()) + "}"


def arms(train_s: int) -> dict[str, list[str]]:
    """Each arm's ``rlvr train`` arguments (the seed is added per run)."""
    limit = f"train.time_limit_s={train_s}"
    wide = [f"data.task_config={_yaml(WIDE)}", f"data.eval_task_config={_yaml(HARD_EVAL)}"]
    harder = [f"data.task_config={_yaml(HARDER)}", "data.train_size=32"]
    return {
        "plain": [*PLAIN, limit],
        "greso": [*PLAIN, limit, "data.selection.kind=greso"],
        "greso_reward": [*PLAIN, limit, "data.selection.kind=greso", "data.selection.signal=reward"],
        "plain_again": [*PLAIN, limit],  # plain once more, beside greso_reward
        "uniform": ["grpo", limit, *wide],
        "curriculum": [
            "grpo",
            limit,
            *wide,
            "data.curriculum.kind=schedule",
            f"data.curriculum.key=[{TERMS}, {DIGITS}]",
            "data.curriculum.params={start: 0.25, steps: 20, shape: root}",
        ],
        "no_replay": ["grpo", limit, *harder],
        "replay": ["grpo", limit, *harder, "data.replay.kind=best_correct"],
    }


PAIRS = [("plain", "greso"), ("uniform", "curriculum"), ("no_replay", "replay")]
SUMMED = (
    "selection/rollouts_saved",
    "groups/sampled",
    "groups/kept",
    "replay/replayed",
    "replay/groups_rescued",
    "groups/partial",
)


def summary(run: Path) -> dict[str, float]:
    """Held-out accuracy before and after, steps, training seconds and the counters summed over steps."""
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if x.strip()]
    evals = [r for r in rows if r.get("phase") in ("before", "after")]
    train = [r for r in rows if r.get("phase") == "train"]
    train_s = sum(r.get("time/step_s", 0.0) for r in train)
    out = {
        "before": evals[0]["eval/accuracy"],
        "after": evals[-1]["eval/accuracy"],
        "steps": float(len(train)),
        "train_s": round(train_s, 1),
        "steps_per_min": round(60 * len(train) / max(train_s, 1e-9), 2),
    }
    for key in SUMMED:
        if any(key in r for r in train):
            out[key] = sum(r.get(key, 0.0) for r in train)
    return out


def start(arm: str, args_: list[str], seed: int, out: Path, core: int) -> tuple[subprocess.Popen, Path]:
    return start_arm(arm, args_, COMMON, seed, out, core)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=ROOT / "runs" / "data-vs-plain")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    p.add_argument("--train-s", type=int, default=300, help="training wall time per arm")
    p.add_argument("--pairs", default="", help="arms run side by side, e.g. plain:greso,uniform:curriculum")
    p.add_argument("--table", action="store_true", help="print the table of results.jsonl and stop")
    a = p.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    results = a.out / "results.jsonl"
    if not a.table:
        table = arms(a.train_s)
        pairs = [tuple(p.split(":")) for p in a.pairs.split(",")] if a.pairs else PAIRS
        for seed in a.seeds:
            for pair in pairs:
                todo = [arm for arm in pair if not (a.out / f"{arm}-s{seed}").exists()]
                began = time.time()
                procs = [start(arm, table[arm], seed, a.out, core) for core, arm in enumerate(todo)]
                for arm, (proc, run) in zip(todo, procs):
                    rc = proc.wait()
                    row = {"arm": arm, "seed": seed, "rc": rc, "wall_s": round(time.time() - began)}
                    if rc in (0, 3):
                        row.update(summary(run))
                    with results.open("a") as f:
                        f.write(json.dumps(row) + "\n")
                    print(json.dumps(row), flush=True)
    rows = [json.loads(x) for x in results.read_text().splitlines() if x.strip()] if results.exists() else []
    print(
        "| arm | seed | steps | steps/min | before | after | change | rollouts saved | replayed |\n"
        "|---|---|---|---|---|---|---|---|---|"
    )
    for r in sorted(rows, key=lambda r: (r["arm"], r["seed"])):
        if "after" not in r:
            print(f"| {r['arm']} | {r['seed']} | failed (rc {r['rc']}) | | | | | | |")
            continue
        saved = r.get("selection/rollouts_saved", "")
        replayed = r.get("replay/replayed", "")
        print(
            f"| {r['arm']} | {r['seed']} | {r['steps']:.0f} | {r['steps_per_min']} | {r['before']:.1%} | "
            f"{r['after']:.1%} | {r['after'] - r['before']:+.1%} | {saved} | {replayed} |"
        )


if __name__ == "__main__":
    main()
