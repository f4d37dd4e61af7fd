"""What a step reports about its sampled groups: reward metrics and samples.jsonl rows."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from rlvr.data import Example
from rlvr.eval.evaluate import CORRECT_AT
from rlvr.trajectory import TrajectoryGroup


def reward_metrics(groups: list[TrajectoryGroup], correctness: str) -> dict[str, float]:
    """Mean reward (over trajectories scored without error), reward errors, accuracy (the
    ``correctness`` component), lengths, and the mean of every reward component."""
    trajectories = [t for g in groups for t in g.trajectories]
    n = max(len(trajectories), 1)
    totals = [t.reward for t in trajectories if not t.errors and t.reward is not None]
    metrics = {
        "reward/mean": sum(totals) / max(len(totals), 1),
        "reward/errors": float(sum(bool(t.errors) for t in trajectories)),
        "train/accuracy": sum(t.rewards.get(correctness, 0.0) >= CORRECT_AT for t in trajectories) / n,
        "completion/mean_length": sum(len(t) for t in trajectories) / n,
        "completion/truncated_rate": sum(t.finish_reason == "length" for t in trajectories) / n,
    }
    for name in dict.fromkeys(k for t in trajectories for k in t.rewards):  # first-seen order
        values = [t.rewards[name] for t in trajectories if name in t.rewards]
        metrics[f"reward/{name}"] = sum(values) / max(len(values), 1)
    return metrics


def sample_records(
    groups: list[TrajectoryGroup], examples: Sequence[Example], step: int, limit: int
) -> Iterator[dict[str, Any]]:
    """samples.jsonl rows of the first ``limit`` trajectories (all for -1); a group dropped before
    the update has advantage None, and an errored one reward None."""
    written = 0
    for g in groups:
        for t in g.trajectories:
            if 0 <= limit <= written:
                return
            example = examples[g.example_index]
            yield {
                "step": step,
                "example_id": example.id,
                "prompt": example.question,
                "reference": example.reference,
                "completion": t.text,
                "finish_reason": t.finish_reason,
                "tokens": len(t),
                "reward": None if t.errors else t.reward,
                "rewards": t.rewards,
                "errors": t.errors,
                "advantage": t.advantage,
            }
            written += 1
