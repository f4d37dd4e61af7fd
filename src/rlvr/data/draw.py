"""How a step's prompts are drawn: an *order* (a seeded shuffle, a curriculum or a weighted mixture
of sources), optionally behind a *selection* that skips prompts before rollout (GRESO).

Each piece is a :class:`Draw`: ``take(count)`` gives example indices to roll out, ``observe(groups)``
sees them scored (after :class:`~rlvr.data.history.PromptHistory` recorded them), ``state()`` /
``load_state()`` make resume exact, ``metrics()`` reports since the previous call. The collector
holds one, built here from ``data.sources``, ``data.curriculum`` and ``data.selection``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from rlvr.config import RunConfig
from rlvr.data.example import Example
from rlvr.data.history import PromptHistory
from rlvr.data.sampler import PromptSampler
from rlvr.trajectory import TrajectoryGroup


class Draw(Protocol):
    def take(self, count: int) -> list[int]: ...

    def observe(self, groups: list[TrajectoryGroup]) -> None: ...

    def state(self) -> dict[str, Any]: ...

    def load_state(self, state: dict[str, Any]) -> None: ...

    def metrics(self) -> dict[str, float]: ...


class UniformOrder:
    """Every example once per epoch, each epoch a fresh seeded shuffle (:class:`PromptSampler`)."""

    def __init__(self, size: int, seed: int) -> None:
        self.size, self.seed = size, seed
        self.sampler = PromptSampler(size, seed)

    def take(self, count: int) -> list[int]:
        return self.sampler.take(count)

    def observe(self, groups: list[TrajectoryGroup]) -> None:
        pass

    def state(self) -> dict[str, Any]:
        return self.sampler.state()

    def load_state(self, state: dict[str, Any]) -> None:
        self.sampler = PromptSampler(self.size, self.seed, **state)

    def metrics(self) -> dict[str, float]:
        return {}


def build_draw(cfg: RunConfig, examples: Sequence[Example], history: PromptHistory) -> Draw:
    """The draw ``cfg.data`` asks for over ``examples`` (indices into it)."""
    d = cfg.data
    order: Draw
    if d.curriculum.kind != "none":
        from rlvr.data.curriculum import build_curriculum

        order = build_curriculum(d.curriculum, examples, history, cfg.seed)
    elif d.sources:
        from rlvr.data.mixture import MixtureOrder

        order = MixtureOrder(d.sources, examples, cfg.seed)
    else:
        order = UniformOrder(len(examples), cfg.seed)
    if d.selection.kind == "greso":
        from rlvr.data.selection import GresoSelection

        order = GresoSelection(d.selection, order, history, cfg.seed, cfg.rollout.group_size)
    return order
