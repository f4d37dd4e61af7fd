"""What a stage is made of: a source of trajectory groups and an objective over them.

The loop (:class:`rlvr.train.loop.orchestrator.Orchestrator`) is the same for every stage:
``source.collect()`` → ``learner.update(groups)`` → publish the weights → log, evaluate,
checkpoint. A stage changes only these two parts (docs/stages.md):

- a :class:`Source` yields groups of trajectories: the collector's sampled and scored groups (RL,
  and what rejection sampling and on-policy DPO filter or pair), demonstrations from chat data
  (SFT, offline distillation: trajectories whose trained tokens are *given*), chosen/rejected
  pairs from a file (DPO);
- an :class:`Objective` turns a batch of them into one update of the learner's policy
  (cross-entropy, a preference loss, a distillation divergence). The RL objective is the learner's
  own (advantages + a registered policy loss) and needs no object here.

A source's :meth:`Source.state` is saved in checkpoints, so ``--resume`` continues from the same
position in the data.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from rlvr.collect.collector import Collection
    from rlvr.train.learn.learner import Learner
    from rlvr.trajectory import TrajectoryGroup


class Source(Protocol):
    """Where a stage's groups come from. The collector is one (RL)."""

    def collect(self, count: int | None = None, greedy_baseline: bool = False) -> Collection:
        """The next step's groups: ``kept`` go to the learner, ``seen`` are logged. ``metrics``
        should hold ``groups/sampled`` and ``completion/mean_length`` (the step line and the
        throughput read them); a stage that samples also reports rewards and accuracy."""
        ...

    def state(self) -> dict[str, Any]: ...

    def load_state(self, state: dict[str, Any]) -> None: ...


class Objective(Protocol):
    """What the learner minimises on a stage's groups (RL's objective is the learner's own)."""

    def update(self, learner: Learner, groups: list[TrajectoryGroup]) -> dict[str, float]:
        """One optimizer update (or a stage's several: epochs, minibatches) of ``learner.model``
        on ``groups``; returns metrics named ``update/...`` and the objective's own."""
        ...

    def evaluate(self, learner: Learner) -> dict[str, float]:
        """Held-out metrics of the objective itself (e.g. the SFT loss on held-out chat data),
        computed without gradient; ``{}`` when the stage has none."""
        ...
