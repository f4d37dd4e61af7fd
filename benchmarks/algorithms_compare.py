"""Aggregate `benchmarks/algorithms.py` runs over seeds: a table and plots that say what is noise.

    .venv/bin/python benchmarks/algorithms_compare.py \\
        --task "default=runs/cmp/default,runs/cmp/default-b" --task "harder=runs/cmp/hard" \\
        --baseline grpo --base-acc default=0.55 --base-acc harder=0.17 --out runs/cmp/summary

Each ``--task NAME=DIR[,DIR...]`` names the output directories of `benchmarks/algorithms.py` runs of
one task (their ``results.json`` are merged; a preset's runs are told apart by their seed). For
every preset the table gives, over its seeds: the steps made in the budget, held-out greedy accuracy
(mean, standard deviation and each seed's value), the paired difference to ``--baseline`` at the
same seed, a McNemar test of the held-out problems pooled over the seeds the two share (exact,
two-sided: the discordant problems of each seed pair summed), pass@k, the policy's entropy at the
end and the mean completion length. The binomial noise of one accuracy at the held-out size is
stated beside the table. Writes ``comparison.md``, ``accuracy.png`` (each task: every seed as a
dot, the mean as a bar, the starting model as a line) and ``entropy.png`` (policy entropy against
training time, mean over seeds).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from collections import defaultdict
from pathlib import Path


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", action="append", required=True, help="NAME=DIR[,DIR...] (repeatable)")
    parser.add_argument("--baseline", default="grpo", help="preset the others are compared with")
    parser.add_argument("--base-acc", action="append", default=[], help="NAME=ACC: the starting model's")
    parser.add_argument("--out", required=True)
    return parser.parse_args(argv)


def load_task(dirs: list[Path]) -> dict[str, dict[int, dict]]:
    """``{preset: {seed: result}}`` from the ``results.json`` of ``dirs``; a later directory's run of
    the same preset and seed replaces an earlier one (a rerun)."""
    runs: dict[str, dict[int, dict]] = defaultdict(dict)
    for d in dirs:
        for result in json.loads((d / "results.json").read_text()):
            if "error" in result:
                continue
            result["dir"] = d / "runs" / result.get("run", result["preset"])
            runs[result["preset"]][int(result.get("seed", 0))] = result
    return runs


def greedy_correct(run_dir: Path) -> dict[str, bool]:
    """``{problem id: correct}`` of the final greedy evaluation (``eval_samples.jsonl``, phase after)."""
    rows = [json.loads(line) for line in (run_dir / "eval_samples.jsonl").read_text().splitlines() if line]
    return {r["id"]: bool(r["correct"]) for r in rows if r.get("phase") == "after"}


def mcnemar_p(b: int, c: int) -> float:
    """Exact two-sided McNemar p-value: ``b`` problems only the first got right, ``c`` only the second."""
    n = b + c
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(0, min(b, c) + 1)) / 2**n
    return min(1.0, 2 * tail)


def summarize(runs: dict[str, dict[int, dict]], baseline: str) -> list[dict]:
    rows = []
    base_runs = runs.get(baseline, {})
    for preset in sorted(runs, key=lambda p: (p != baseline, p)):
        by_seed = runs[preset]
        seeds = sorted(by_seed)
        acc = [by_seed[s]["after"]["eval/accuracy"] for s in seeds]
        passk_key = next(
            (k for k in by_seed[seeds[0]]["after"] if k.startswith("eval/pass@") and k != "eval/pass@1"), None
        )
        row = {
            "preset": preset,
            "seeds": seeds,
            "steps": [by_seed[s]["steps"] for s in seeds],
            "acc": acc,
            "passk_key": passk_key,
            "passk": [by_seed[s]["after"].get(passk_key) for s in seeds] if passk_key else [],
            "entropy": [by_seed[s]["entropy_end"] for s in seeds if by_seed[s]["entropy_end"] is not None],
            "length": [by_seed[s]["after"].get("eval/mean_length") for s in seeds],
            "n": int(by_seed[seeds[0]]["after"].get("eval/size", 0)),
        }
        shared = [s for s in seeds if s in base_runs]
        if preset != baseline and shared:
            row["delta"] = [
                by_seed[s]["after"]["eval/accuracy"] - base_runs[s]["after"]["eval/accuracy"] for s in shared
            ]
            b = c = 0
            for s in shared:
                mine, theirs = greedy_correct(by_seed[s]["dir"]), greedy_correct(base_runs[s]["dir"])
                for key in mine.keys() & theirs.keys():
                    b += mine[key] and not theirs[key]
                    c += theirs[key] and not mine[key]
            row["mcnemar"] = (b, c, mcnemar_p(b, c))
        rows.append(row)
    return rows


def _mean_sd(values: list[float]) -> str:
    if not values:
        return "–"
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.mean(values):.3f} ± {sd:.3f}"


def markdown(task: str, rows: list[dict], baseline: str, base_acc: float | None) -> str:
    n = rows[0]["n"] if rows else 0
    p = base_acc if base_acc is not None else statistics.mean(rows[0]["acc"]) if rows else 0.5
    noise = math.sqrt(p * (1 - p) / n) if n else float("nan")
    k = (rows[0]["passk_key"] or "eval/pass@k").split("@")[-1] if rows else "k"
    lines = [
        f"### {task}",
        "",
        f"Held-out problems: {n}; one accuracy's binomial standard error near p={p:.2f} is ±{noise:.3f} "
        f"(a 95% interval of ±{1.96 * noise:.3f})."
        + (f" The starting model scores {base_acc:.3f}." if base_acc is not None else ""),
        "",
        f"| preset | seeds | steps | held-out acc (mean ± sd) | per seed | Δ vs {baseline} (paired) | "
        f"McNemar vs {baseline}: only it / only {baseline}, p | pass@{k} | entropy at end | mean length |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        delta = f"{statistics.mean(r['delta']):+.3f}" if r.get("delta") else "–"
        test = f"{r['mcnemar'][0]} / {r['mcnemar'][1]}, p={r['mcnemar'][2]:.2f}" if r.get("mcnemar") else "–"
        steps = (
            f"{min(r['steps'])}–{max(r['steps'])}"
            if min(r["steps"]) != max(r["steps"])
            else str(r["steps"][0])
        )
        per_seed = " / ".join(f"{a:.2f}" for a in r["acc"])
        lines.append(
            f"| {r['preset']} | {len(r['seeds'])} | {steps} | {_mean_sd(r['acc'])} | {per_seed} | {delta} | "
            f"{test} | {_mean_sd([v for v in r['passk'] if v is not None])} | "
            f"{_mean_sd(r['entropy'])} | "
            f"{statistics.mean(x for x in r['length'] if x is not None):.1f} |"
        )
    return "\n".join(lines) + "\n"


def plot_accuracy(tasks: dict[str, list[dict]], base: dict[str, float], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(tasks), figsize=(6 * len(tasks), 4.5), squeeze=False)
    for ax, (task, rows) in zip(axes[0], tasks.items()):
        names = [r["preset"] for r in rows]
        means = [statistics.mean(r["acc"]) for r in rows]
        ax.bar(range(len(rows)), means, color="#9ecae1")
        for i, r in enumerate(rows):
            ax.scatter([i] * len(r["acc"]), r["acc"], color="#08519c", s=14, zorder=3)
        if task in base:
            ax.axhline(base[task], color="grey", linestyle="--", linewidth=1, label="starting model")
            ax.legend(fontsize=8)
        ax.set_xticks(range(len(rows)), names, rotation=45, ha="right", fontsize=8)
        ax.set_ylabel("held-out greedy accuracy")
        ax.set_title(f"{task}: mean (bar) and each seed (dot), equal wall time")
        ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_entropy(task_runs: dict[str, dict[str, dict[int, dict]]], path: Path, bins: int = 12) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(task_runs), figsize=(6 * len(task_runs), 4.5), squeeze=False)
    for ax, (task, runs) in zip(axes[0], task_runs.items()):
        for preset, by_seed in sorted(runs.items()):
            curves = [r.get("entropy_curve") or [] for r in by_seed.values()]
            end = max((c[-1][0] for c in curves if c), default=0.0)
            if not end:
                continue
            edges = [end * i / bins for i in range(bins + 1)]
            xs, ys = [], []
            for lo, hi in zip(edges, edges[1:]):
                vals = [v for c in curves for t, v in c if lo < t <= hi]
                if vals:
                    xs.append((lo + hi) / 2)
                    ys.append(statistics.mean(vals))
            ax.plot(xs, ys, marker=".", linewidth=1.2, label=preset)
        ax.set_xlabel("training time (s)")
        ax.set_ylabel("policy entropy of the update (mean over seeds)")
        ax.set_title(task)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    base = {k: float(v) for k, v in (item.split("=", 1) for item in args.base_acc)}
    task_runs, tables, text = {}, {}, []
    for item in args.task:
        name, dirs = item.split("=", 1)
        task_runs[name] = load_task([Path(d) for d in dirs.split(",")])
        tables[name] = summarize(task_runs[name], args.baseline)
        text.append(markdown(name, tables[name], args.baseline, base.get(name)))
    (out / "comparison.md").write_text("\n".join(text))
    plot_accuracy(tables, base, out / "accuracy.png")
    plot_entropy(task_runs, out / "entropy.png")
    print("\n".join(text))
    print(f"wrote {out / 'comparison.md'}, {out / 'accuracy.png'}, {out / 'entropy.png'}")


if __name__ == "__main__":
    main()
