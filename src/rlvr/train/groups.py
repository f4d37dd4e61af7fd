"""Scored groups, the unit a training step collects: one prompt's completions with their rewards,
plus what a step reports about them (reward metrics, samples.jsonl records)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from rlvr.data import Example
from rlvr.eval.evaluate import CORRECT_AT
from rlvr.rollout import Completion


@dataclass
class Scored:
    """One group of completions of one prompt, with rewards and advantages."""

    example_index: int
    completions: list[Completion]
    results: list = field(default_factory=list)
    advantages: list[float] = field(default_factory=list)


def reward_metrics(groups: list[Scored], correctness: str) -> dict[str, float]:
    """Mean reward, reward errors, accuracy (the ``correctness`` component), lengths, component means."""
    results = [r for g in groups for r in g.results]
    completions = [c for g in groups for c in g.completions]
    totals = [r.total for r in results if r.total is not None]
    metrics = {
        "reward/mean": sum(totals) / max(len(totals), 1),
        "reward/errors": float(sum(bool(r.errors) for r in results)),
        "train/accuracy": sum(r.components.get(correctness, 0.0) >= CORRECT_AT for r in results)
        / max(len(results), 1),
        "completion/mean_length": sum(len(c) for c in completions) / max(len(completions), 1),
        "completion/truncated_rate": sum(c.finish_reason == "length" for c in completions)
        / max(len(completions), 1),
    }
    for name in {k for r in results for k in r.components}:
        values = [r.components[name] for r in results if name in r.components]
        metrics[f"reward/{name}"] = sum(values) / max(len(values), 1)
    return metrics


def sample_records(
    groups: list[Scored], examples: Sequence[Example], step: int, limit: int
) -> Iterator[dict[str, Any]]:
    """samples.jsonl rows of the first ``limit`` completions (all for -1); a group dropped before the
    update has advantage None."""
    written = 0
    for g in groups:
        advantages = g.advantages or [None] * len(g.completions)
        for c, r, adv in zip(g.completions, g.results, advantages):
            if 0 <= limit <= written:
                return
            example = examples[g.example_index]
            yield {
                "step": step,
                "example_id": example.id,
                "prompt": example.question,
                "reference": example.reference,
                "completion": c.text,
                "finish_reason": c.finish_reason,
                "tokens": len(c),
                "reward": r.total,
                "rewards": r.components,
                "errors": r.errors,
                "advantage": adv,
            }
            written += 1
