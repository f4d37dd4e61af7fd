"""Stages against GRPO alone on the default job (bundled SmolLM2-135M, chain_sum, 200 held-out).

    .venv/bin/python benchmarks/stages_vs_grpo.py [--out runs/stages-vs-grpo] [--seeds 0 1] [--train-s 300]
    .venv/bin/python benchmarks/stages_vs_grpo.py --only rft_then_grpo,grpo   # some arms
    .venv/bin/python benchmarks/stages_vs_grpo.py --table                     # the table of what ran

The comparisons of docs/stages.md, each a pair of arms run *side by side*, one thread each, pinned
to core 0 and core 1 (``taskset``), so that whatever else the machine does slows both alike:

1. ``rft_then_grpo`` (a pipeline: rejection-sampling fine-tuning on the policy's own verified
   samples for 30% of the budget, then GRPO) vs ``grpo``: equal training wall time.
2. ``opd`` (on-policy distillation of the ``grpo`` arm's seed-0 checkpoint into the base model) vs
   ``grpo`` from scratch: equal training wall time; "recovered" = the student's gain over the base
   model as a share of the teacher's.
3. ``dpo`` (pairs built on-policy from verifier-scored groups, best vs worst) vs ``grpo_steps``
   (GRPO with the same number of steps of the same prompts × completions): equal samples.
4. ``self_distill`` (the live policy with the reference answer in its prompt as teacher) vs
   ``grpo``: equal training wall time.
5. ``prime`` (PRIME's implicit process rewards with step_returns) or ``vine`` (VinePPO's
   Monte-Carlo step values) vs ``grpo``: equal training wall time (``--pairs grpo:prime``;
   docs/credit.md).
6. ``vine_sparse`` vs ``grpo_sparse``: the same pair on a multi-step task rewarded for the final
   answer alone (``recipes/vine_chain_sum.yaml``: three- and four-term sums worked line by line),
   equal training wall time (``--pairs grpo_sparse:vine_sparse``; docs/credit.md); ``tree_sparse``
   (tree rollouts, ``recipes/treerl.yaml``'s tree on that task) likewise; ``grpo_sparse_steps`` is
   GRPO given the Monte-Carlo arms' number of updates (``--steps``) instead of their time.

Every arm evaluates greedy accuracy on the same 200 held-out problems before and after
(``data.seed`` fixed), writes a model-only checkpoint, and is a normal run directory under
``--out`` (``rlvr report`` reads it). Results go to ``--out/results.jsonl`` and the table to stdout.
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
    "train.final_checkpoint=model",
    "eval.before=true",
    "log.every_steps=5",
]


def arms(train_s: int, out: Path, steps: int) -> dict[str, list[str]]:
    """Each arm's ``rlvr train`` arguments (the seed is added per run)."""
    limit = f"train.time_limit_s={train_s}"
    rft_s, rl_s = round(train_s * 0.3), train_s - round(train_s * 0.3)
    pipeline = (
        f"stages=[{{name: rft, stage: rft, set: {{train.time_limit_s: {rft_s}, train.steps: 1000}}}},"
        f" {{name: grpo, stage: rl, set: {{train.time_limit_s: {rl_s}, train.steps: 1000, optim.lr: 1.0e-5,"
        f" optim.warmup_steps: 5, eval.before: false, rollout.prompts_per_step: 4, rollout.group_size: 8,"
        f" rewards.functions: {_DEFAULT_REWARDS}}}}}]"
    )
    teacher = out / "grpo-s0"
    return {
        "grpo": ["grpo", limit, "train.steps=1000"],
        "grpo_steps": ["grpo", "train.time_limit_s=null", f"train.steps={steps}"],
        "rft_then_grpo": ["rft", pipeline],
        "opd": ["opd", limit, "train.steps=1000", f"distill.teacher={teacher}"],
        "dpo": ["dpo", "train.time_limit_s=null", f"train.steps={steps}", "rollout.prompts_per_step=4"],
        "self_distill": ["self_distill", limit, "train.steps=1000"],
        # dense credit (docs/credit.md): --pairs grpo:prime or grpo:vine
        "prime": ["prime", limit, "train.steps=1000"],
        "vine": ["vine", limit, "train.steps=1000"],
        # a multi-step task whose reward is the final answer alone: --pairs grpo_sparse:vine_sparse
        "vine_sparse": ["vine_chain_sum", limit, "train.steps=1000"],
        "tree_sparse": [
            "vine_chain_sum",
            limit,
            "train.steps=1000",
            "rollout.group_size=4",
            "algo.advantage_params={tree: true, depth: 2, samples: 2, max_steps: 2, split: uncertain}",
        ],
        "grpo_sparse_steps": [
            "vine_chain_sum",
            "train.time_limit_s=null",
            f"train.steps={steps}",
            "algo.advantage=grpo",
            "algo.advantage_params={}",
            "algo.dynamic_sampling=true",
        ],
        "grpo_sparse": [
            "vine_chain_sum",
            limit,
            "train.steps=1000",
            "algo.advantage=grpo",
            "algo.advantage_params={}",
            "algo.dynamic_sampling=true",
        ],
    }


# the default job's reward (recipes/grpo.yaml), for the GRPO stage after RFT (whose recipe scores
# only the tagged answer)
_DEFAULT_REWARDS = (
    "[{name: reasoning_gym, weight: 0.5, params: {extract: auto}},"
    " {name: reasoning_gym, label: tagged, weight: 0.5, params: {extract: answer_tag}},"
    " {name: numeric_closeness, label: closeness, weight: 0.25, params: {extract: answer_tag}}]"
)

PAIRS = [("grpo", "rft_then_grpo"), ("self_distill", "opd"), ("dpo", "grpo_steps")]


def _accuracy(run: Path) -> dict[str, float]:
    """Held-out accuracy before and after (a pipeline: its first stage's before, last stage's after)."""
    dirs = [run]
    manifest = run / "pipeline.json"
    if manifest.exists():
        dirs = [run / s["dir"] for s in json.loads(manifest.read_text())["stages"]]
    evals = []
    for d in dirs:
        rows = [json.loads(x) for x in (d / "metrics.jsonl").read_text().splitlines() if x.strip()]
        evals += [r for r in rows if r.get("phase") in ("before", "after")]
        train_rows = [r for r in rows if r.get("phase") == "train"]
    return {
        "before": evals[0]["eval/accuracy"],
        "after": evals[-1]["eval/accuracy"],
        "steps": float(len(train_rows)),
    }


def start(arm: str, args_: list[str], seed: int, out: Path, core: int) -> tuple[subprocess.Popen, Path]:
    return start_arm(arm, args_, COMMON, seed, out, core)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=ROOT / "runs" / "stages-vs-grpo")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    p.add_argument("--train-s", type=int, default=300, help="training wall time per arm (equal-time arms)")
    p.add_argument("--steps", type=int, default=30, help="steps of the equal-samples arms (dpo, grpo_steps)")
    p.add_argument("--only", default="", help="comma-separated arms to run (default: all pairs)")
    p.add_argument("--pairs", default="", help="which arms run side by side, e.g. opd:dpo,grpo:rft_then_grpo")
    p.add_argument("--table", action="store_true", help="print the table of results.jsonl and stop")
    p.add_argument("--plot", type=Path, help="also draw held-out accuracy per arm and seed to this PNG")
    a = p.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    results = a.out / "results.jsonl"
    if not a.table:
        table = arms(a.train_s, a.out, a.steps)
        pairs = [tuple(p.split(":")) for p in a.pairs.split(",")] if a.pairs else PAIRS
        wanted = set(filter(None, a.only.split(","))) or {x for pair in pairs for x in pair}
        for seed in a.seeds:
            for pair in pairs:
                todo = [arm for arm in pair if arm in wanted and not (a.out / f"{arm}-s{seed}").exists()]
                began = time.time()
                procs = [start(arm, table[arm], seed, a.out, core) for core, arm in enumerate(todo)]
                for arm, (proc, run) in zip(todo, procs):
                    rc = proc.wait()
                    row = {"arm": arm, "seed": seed, "rc": rc, "wall_s": round(time.time() - began)}
                    if rc in (0, 3):
                        row.update(_accuracy(run))
                    with results.open("a") as f:
                        f.write(json.dumps(row) + "\n")
                    print(json.dumps(row), flush=True)
    rows = [json.loads(x) for x in results.read_text().splitlines() if x.strip()]
    if a.plot:
        plot(rows, a.plot)
    print("| arm | seed | steps | before | after | change | wall s |\n|---|---|---|---|---|---|---|")
    for r in sorted(rows, key=lambda r: (r["arm"], r["seed"])):
        if "after" in r:
            print(
                f"| {r['arm']} | {r['seed']} | {r['steps']:.0f} | {r['before']:.1%} | {r['after']:.1%} | "
                f"{r['after'] - r['before']:+.1%} | {r['wall_s']} |"
            )
        else:
            print(f"| {r['arm']} | {r['seed']} | failed (rc {r['rc']}) | | | | {r['wall_s']} |")


def plot(rows: list[dict], path: Path) -> None:
    """Held-out accuracy after each arm (one dot per seed, a bar at their mean), the base model's line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    done = [r for r in rows if "after" in r]
    present = list(dict.fromkeys(r["arm"] for r in done))
    order = [a for pair in PAIRS for a in pair if a in present]
    order += [a for a in present if a not in order]
    fig, ax = plt.subplots(figsize=(7, 3.2))
    for i, arm in enumerate(order):
        values = [100 * r["after"] for r in done if r["arm"] == arm]
        ax.bar(i, sum(values) / len(values), color="#9ab" if arm.startswith("grpo") else "#d96", width=0.6)
        ax.plot([i] * len(values), values, "k.", markersize=8)
    ax.axhline(100 * done[0]["before"], color="gray", linestyle="--", linewidth=1, label="base model")
    ax.set_xticks(range(len(order)), order, rotation=20, ha="right")
    ax.set_ylabel("held-out accuracy after, %")
    ax.set_title("Held-out accuracy per arm, SmolLM2-135M (n=200; dots: seeds)", fontsize=10)
    ax.legend(loc="lower left", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
