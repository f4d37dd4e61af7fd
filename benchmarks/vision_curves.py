"""Learning curves and held-out results of vision runs, and what each final policy answers.

    python benchmarks/vision_curves.py runs/vision/vc-trained-s0 runs/vision/vc-trained-s1 ...

Prints a markdown table (held-out accuracy before and after, steps, updates, the share of held-out
answers that are the policy's single most common answer, and the accuracy of always giving the most
common reference: the best an image-blind policy can do) and draws the training reward of every run
(moving mean over 10 steps) into ``docs/img/vision_curves.png``. The runs come from
``rlvr train vision_count`` / ``vision_colour`` with the overrides docs/vision.md lists.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "docs" / "img" / "vision_curves.png"


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def summarize(run: Path) -> dict:
    metrics = _rows(run / "metrics.jsonl")
    train = [r for r in metrics if r["phase"] == "train"]
    evals = {r["phase"]: r for r in metrics if r["phase"] in ("before", "after")}
    final = [r for r in _rows(run / "eval_samples.jsonl") if r.get("phase") == "after"]
    answers = Counter(r["completion"] for r in final)
    references = Counter(r["reference"] for r in final)
    return {
        "run": run.name,
        "before": evals.get("before", {}).get("eval/accuracy"),
        "after": evals.get("after", {}).get("eval/accuracy"),
        "steps": len(train),
        "updates": sum("update/loss" in r for r in train),
        "top_answer_share": answers.most_common(1)[0][1] / len(final) if final else None,
        "blind_best": references.most_common(1)[0][1] / len(final) if final else None,
        "reward": [r.get("reward/mean", 0.0) for r in train],
    }


def main(paths: list[str]) -> None:
    runs = [summarize(Path(p)) for p in paths]
    pct = lambda v: "–" if v is None else f"{100 * v:.1f}%"  # noqa: E731
    print(
        "| run | held-out before → after | steps (updates) | most common answer's share | image-blind best |"
    )
    print("|---|---|---|---:|---:|")
    for r in runs:
        print(
            f"| {r['run']} | {pct(r['before'])} → {pct(r['after'])} | {r['steps']} ({r['updates']}) "
            f"| {pct(r['top_answer_share'])} | {pct(r['blind_best'])} |"
        )
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.6))
    for r in runs:
        values = r["reward"]
        smooth = [
            sum(values[max(0, i - 9) : i + 1]) / len(values[max(0, i - 9) : i + 1])
            for i in range(len(values))
        ]
        ax.plot(range(1, len(values) + 1), smooth, label=r["run"])
    ax.set_xlabel("step")
    ax.set_ylabel("training reward (mean of 10 steps)")
    ax.set_title("GRPO with a random-init vision side (tiny-smolvlm), 600 s a run")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(OUT, dpi=110)
    print(f"\nplot: {OUT}")


if __name__ == "__main__":
    main(sys.argv[1:])
