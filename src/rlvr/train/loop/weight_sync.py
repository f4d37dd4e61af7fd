"""WeightSync: how the learner's new weights reach the collector's engine, tagged with a version.

The seam between learner and collector (docs/design.md, "The shape"). A sync publishes the
learner's current weights under the learner's version; the engine samples from them from then on
and stamps every trajectory with that version, so a trajectory always says which policy made it
(what an asynchronous loop's staleness bound and off-policy corrections read).

Implementations:

- :class:`InProcessSync` — the engine runs in the learner's process on the same module (the HF
  engine): nothing is copied; the engine drops what it derived from the old weights (packed
  copies) and takes the new version.

- :class:`~rlvr.train.loop.async_collect.CopySync` — the engine samples from its own copy in this process.
- :class:`~rlvr.rollout.vllm_engine.VLLMWeightSync` — the engine is a vLLM server process; the
  weights go through vLLM's weight-transfer API (a /dev/shm file on CPU, NCCL on GPU).

All implement the same two-method protocol; the orchestrator does not change.
"""

from __future__ import annotations

from typing import Protocol

import torch


class WeightSync(Protocol):
    def push(self, model: torch.nn.Module, version: int) -> None:
        """Make the engine sample from ``model``'s current weights, as policy ``version``."""
        ...

    @property
    def version(self) -> int:
        """The version the engine samples from now."""
        ...


class InProcessSync:
    """The engine and the learner share one process (and, for the HF engine, one module)."""

    def __init__(self, engine, version: int = 0) -> None:
        self.engine = engine
        self._set_version(version)

    def push(self, model: torch.nn.Module, version: int) -> None:
        self.engine.sync_weights(model)
        self._set_version(version)

    def _set_version(self, version: int) -> None:
        self.engine.policy_version = version

    @property
    def version(self) -> int:
        return self.engine.policy_version
