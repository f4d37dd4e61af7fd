"""Why groups were skipped, and saying so before a run spends its budget on steps that train nothing.

A sampled group is skipped (not trained on) when a reward failed on one of its completions
(``rewards.on_error=skip_group``), when all its rewards are equal (dynamic sampling: the
group-relative advantage is zero everywhere; always so with ``rollout.group_size=1``), or for a
reason the step's own logic adds (a ReMax baseline that could not be scored, groups beyond the
refill target). Each step logs the counts as ``groups/skipped/<reason>``.

When every group of a step is skipped, the step makes no update and the console says why, in one
line. When more than half of the first :data:`WINDOW` steps (or of all steps, for shorter runs)
make no update, it warns once, as soon as that is certain, with what to change.

Completions cut at ``rollout.max_new_tokens`` (``finish_reason`` length) rarely hold an answer, so
they score alike and their groups are skipped: the first step where more than half of them are cut
(:data:`TRUNCATED_AT`) warns once naming the key, and the skip lines and warning name it too.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from rich.console import Console

from rlvr.trajectory import group_records

REASONS = {
    "reward_error": "with a reward error",
    "group_size_1": "of one completion (rollout.group_size=1)",
    "no_variance": "with no reward variance (all completions of the group scored alike)",
    "other": "dropped otherwise (baseline reward error or beyond the refill target)",
}
WINDOW = 10
TRUNCATED_AT = 0.5  # a step with more than this fraction of its completions cut warns
TOLERANCE = 1e-6  # as rlvr.algo.filters.informative_groups


def kept_in_seen(collection: Any) -> list[Any]:
    """The groups of ``collection.seen`` that went to the learner. A stage's source may hand the
    learner groups it made from the sampled ones (verified members only, best-vs-worst pairs, a
    demonstration in place of a member): a sampled group counts as kept when one of them came
    from its example."""
    seen_ids = {id(g) for g in collection.seen}
    if all(id(g) in seen_ids for g in collection.kept):
        return collection.kept
    examples = {g.example_index for g in collection.kept}
    return [g for g in collection.seen if g.example_index in examples]


def trajectory_rows(collection: Any, step: int) -> Iterator[dict[str, Any]]:
    """trajectories.jsonl rows of a step: every sampled trajectory, ``kept`` when the learner trained
    on it (a group may go with its scored members only, a stage may pick members: RFT's verified
    ones, DPO's pairs); then, as groups of their own (kept), the trajectories the learner got that
    were not sampled this step (replayed ones, demonstrations). Reading kept rows gives what the
    learner trained on, each sample once."""
    sampled = {id(t) for g in collection.seen for t in g.trajectories}
    flags = collection.kept_flags()
    made = []
    for g in collection.kept:
        extra = [t for t in g.trajectories if id(t) not in sampled]
        if extra:
            made.append(replace(g, trajectories=extra))
    yield from group_records([*collection.seen, *made], [*flags, *[True] * len(made)], 0, step=step)


def skip_metrics(seen: list[Any], kept: list[Any]) -> dict[str, float]:
    """``groups/skipped/<reason>`` counts for the groups of ``seen`` that are not in ``kept``."""
    kept_ids = {id(g) for g in kept}
    counts: Counter[str] = Counter()
    constant: set[float] = set()
    for group in seen:
        if id(group) in kept_ids:
            continue
        rewards = list(group.rewards)
        if None in rewards:
            counts["reward_error"] += 1
        elif len(rewards) == 1:
            counts["group_size_1"] += 1
        elif max(rewards) - min(rewards) <= TOLERANCE:
            counts["no_variance"] += 1
            constant.add(round(float(rewards[0]), 4))
        else:
            counts["other"] += 1
    metrics = {f"groups/skipped/{reason}": float(counts[reason]) for reason in REASONS}
    if len(constant) == 1:  # every uninformative group got this one reward: worth saying
        metrics["groups/skipped/constant_reward"] = constant.pop()
    return metrics


def describe_skips(metrics: dict[str, float]) -> str:
    """``"4 with a reward error, 2 with no reward variance (every completion scored 0)"``."""
    parts = []
    for reason, words in REASONS.items():
        n = int(metrics.get(f"groups/skipped/{reason}", 0))
        if n:
            constant = metrics.get("groups/skipped/constant_reward")
            if reason == "no_variance" and constant is not None:
                words = f"with no reward variance (every completion scored {constant:g})"
            parts.append(f"{n} {words}")
    return ", ".join(parts)


def _advice(totals: Counter[str], truncation: str = "") -> str:
    reason = max(totals, key=lambda r: totals[r]) if totals else "other"
    advice = {
        "reward_error": "see reward_errors/* in metrics.jsonl and the errors in samples.jsonl; "
        "a group trains on its scored members when rewards.min_scored of them remain "
        "(rewards.on_error=partial)",
        "group_size_1": "group-relative advantages need rollout.group_size >= 2",
        "no_variance": "the reward does not tell a group's completions apart: the task may be too "
        "hard or too easy for the model, or the reward constant; try a larger rollout.group_size, "
        "easier data, or a reward with partial credit",
        "other": "see groups/skipped/* in metrics.jsonl",
    }[reason]
    if truncation and reason == "no_variance":  # cut before they answer, so they score alike
        return f"{truncation}: raise it; otherwise {advice}"
    return advice


class SkipMonitor:
    """Prints a line for each step that made no update, and one early warning when most do."""

    def __init__(
        self, console: Console, steps: int, window: int = WINDOW, max_new_tokens: int | None = None
    ) -> None:
        self.console = console
        self.window = max(1, min(window, steps))
        self.seen = self.skipped = 0
        self.totals: Counter[str] = Counter()
        self.warned = False
        self.max_new_tokens = max_new_tokens
        self.warned_truncation = False
        self.skipped_truncated = 0.0  # summed truncated rate of the steps that made no update

    def _cut(self, rate: float) -> str:
        limit = f"={self.max_new_tokens}" if self.max_new_tokens is not None else ""
        return f"{rate:.0%} of completions were cut at rollout.max_new_tokens{limit} (finish_reason length)"

    def observe(self, step: int, metrics: dict[str, float]) -> None:
        self.seen += 1
        truncated = float(metrics.get("completion/truncated_rate", 0.0))
        if truncated > TRUNCATED_AT and not self.warned_truncation:
            self.warned_truncation = True
            self.console.print(
                f"[bold yellow]warning:[/bold yellow] step {step}: {self._cut(truncated)}; a cut "
                "completion rarely holds its answer and scores as wrong: raise rollout.max_new_tokens",
                highlight=False,
            )
        if not metrics.get("update/skipped"):
            return
        self.skipped += 1
        self.skipped_truncated += truncated
        for reason in REASONS:
            self.totals[reason] += int(metrics.get(f"groups/skipped/{reason}", 0))
        sampled = int(metrics.get("groups/sampled", 0))
        why = describe_skips(metrics)
        if truncated > TRUNCATED_AT:
            why += f"; {self._cut(truncated)}"
        self.console.print(f"step {step}: no update, all {sampled} groups skipped: {why}", highlight=False)
        if not self.warned and self.seen <= self.window and self.skipped * 2 > self.window:
            self.warned = True
            mean_cut = self.skipped_truncated / self.skipped
            truncation = (
                self._cut(mean_cut).removesuffix(" (finish_reason length)") if mean_cut > TRUNCATED_AT else ""
            )
            self.console.print(
                f"[bold yellow]warning:[/bold yellow] {self.skipped} of the first {self.seen} steps made "
                f"no update (of {self.window} watched); the run is spending its budget without "
                f"training: {_advice(self.totals, truncation)}",
                highlight=False,
            )
