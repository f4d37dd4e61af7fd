"""The bookkeeping of one scoring call: work units, collected values, and the per-completion result.

Kept apart from the scheduler in :mod:`rlvr.rewards.pool` so that what a result *means* (weighted
total, dict components, gates, errors never read as zero) is in one short file.

A *unit* is what a worker receives: item ``i < n`` is completion ``i`` (for per-completion rewards);
unit ``n + g`` is group ``g`` (for group rewards, called once with the group's completions).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from rlvr.data.example import Example
from rlvr.rewards.spec import RewardSpec
from rlvr.rewards.worker import STEPS


@dataclass
class RewardResult:
    """The rewards of one completion.

    ``components`` maps each spec's label to its (unweighted) value; a reward returning a dict
    contributes ``"label/key"`` for each key instead. ``errors`` maps the label of every reward that
    could not be scored (timeout, crash, exception, bad value, batch deadline) to a one-line reason,
    and its component is absent. ``total`` is the weighted sum over specs — for a dict reward, its
    ``"score"`` key if present, else the sum of its values — or ``None`` when any reward errored,
    so that a missing reward is never mistaken for a zero. A gated component whose gate failed is
    0.0 (see :class:`RewardSpec`).
    """

    total: float | None
    components: dict[str, float] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    # label -> the per-step rewards a dict reward returned under ``steps`` (unweighted; their
    # weighted sum is in ``total`` and ``label/steps`` in ``components``)
    steps: dict[str, list[float]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """True when every reward was scored."""
        return not self.errors


@dataclass
class ScoreBatch:
    """The state of one :meth:`RewardPool.score` call."""

    completions: list[str]
    examples: list[Example]
    extras: dict[str, list[Any]]  # pool-supplied kwargs the caller gave, one entry per completion
    groups: list[tuple[int, int]]  # [start, end) of each group; empty without group_sizes
    values: list[dict[int, Any]] = field(default_factory=list)
    errors: list[dict[int, str]] = field(default_factory=list)
    queue: deque[tuple[int, tuple[int, ...]]] = field(default_factory=deque)
    remaining: int = 0

    @classmethod
    def build(
        cls,
        completions: list[str],
        examples: list[Example],
        extras: dict[str, list[Any]],
        groups: list[tuple[int, int]],
        item_specs: tuple[int, ...],
        group_specs: tuple[int, ...],
    ) -> ScoreBatch:
        n = len(completions)
        batch = cls(list(completions), list(examples), extras, groups)
        batch.values = [{} for _ in range(n)]
        batch.errors = [{} for _ in range(n)]
        if item_specs:
            batch.queue.extend((item, item_specs) for item in range(n))
        if group_specs:
            batch.queue.extend((n + g, group_specs) for g in range(len(groups)))
        batch.remaining = n * len(item_specs) + len(groups) * len(group_specs)
        return batch

    def items(self, unit: int) -> range:
        """The completions a unit covers."""
        n = len(self.completions)
        return range(unit, unit + 1) if unit < n else range(*self.groups[unit - n])

    def payload(self, units: list[tuple[int, tuple[int, ...]]]) -> list[tuple[Any, ...]]:
        n = len(self.completions)
        out = []
        for unit, specs in units:
            if unit < n:
                extras = {k: v[unit] for k, v in self.extras.items()}
                out.append((unit, self.completions[unit], self.examples[unit], extras, specs))
            else:
                start, end = self.groups[unit - n]
                extras = {k: v[start:end] for k, v in self.extras.items()}
                out.append((unit, self.completions[start:end], self.examples[start], extras, specs))
        return out

    def record(self, unit: int, spec: int, value: Any, error: str | None) -> None:
        """Store one call's outcome; a group call's values (or error) go to each of its items."""
        for offset, item in enumerate(self.items(unit)):
            if error is not None:
                self.errors[item][spec] = error
            else:
                self.values[item][spec] = value if unit < len(self.completions) else value[offset]
        self.remaining -= 1

    def requeue(self, calls: Iterable[tuple[int, int]]) -> None:
        """Put calls back at the front of the queue, regrouped by unit, keeping their order."""
        units: list[tuple[int, list[int]]] = []
        for unit, spec in calls:
            if units and units[-1][0] == unit:
                units[-1][1].append(spec)
            else:
                units.append((unit, [spec]))
        for unit, specs in reversed(units):
            self.queue.appendleft((unit, tuple(specs)))


def scalar(value: float | dict[str, Any]) -> float:
    """What a component adds to the total (before its weight), its step rewards aside: a dict's
    ``score``, or else the sum of its numbers."""
    if isinstance(value, dict):
        numbers = {k: v for k, v in value.items() if k != STEPS}
        return numbers["score"] if "score" in numbers else sum(numbers.values())
    return value


def _zeroed(value: float | dict[str, Any]) -> float | dict[str, Any]:
    """A gated-off value: every number 0, every step reward 0."""
    if isinstance(value, dict):
        return {k: [0.0] * len(v) if k == STEPS else 0.0 for k, v in value.items()}
    return 0.0


def assemble(batch: ScoreBatch, item: int, specs: Sequence[RewardSpec]) -> RewardResult:
    """The :class:`RewardResult` of one completion: gates applied, weighted total, errors."""
    labels = {spec.key: index for index, spec in enumerate(specs)}
    values = batch.values[item]
    effective: dict[int, float | dict[str, float]] = {}

    def value_of(index: int) -> float | dict[str, float] | None:
        if index in effective:
            return effective[index]
        value = values.get(index)
        gate = specs[index].gate
        if value is not None and gate is not None:
            gate_value = value_of(labels[gate])
            if gate_value is not None and scalar(gate_value) < specs[index].gate_min:
                value = _zeroed(value)
        if value is not None:
            effective[index] = value
        return value

    components: dict[str, float] = {}
    steps: dict[str, list[float]] = {}
    total = 0.0
    for index, spec in enumerate(specs):
        value = value_of(index)
        if value is None:
            continue
        if isinstance(value, dict):
            components.update({f"{spec.key}/{key}": v for key, v in value.items() if key != STEPS})
            if STEPS in value:
                steps[spec.key] = list(value[STEPS])
                components[f"{spec.key}/{STEPS}"] = sum(value[STEPS])
                total += spec.weight * sum(value[STEPS])
        else:
            components[spec.key] = value
        total += spec.weight * scalar(value)
    errors = {specs[index].key: message for index, message in sorted(batch.errors[item].items())}
    return RewardResult(total=None if errors else total, components=components, errors=errors, steps=steps)
