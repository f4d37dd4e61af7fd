"""Stages around RL: each is a source of trajectory groups and an objective (:mod:`.base`).

:func:`build_source` and :func:`build_objective` pick them from ``cfg.stage``; for ``rl`` the
source is the collector and the objective the learner's own (a registered policy loss), so an RL
run is unchanged by the existence of stages. Modules: :mod:`.sft` (demonstrations, cross-entropy),
:mod:`.rft` (verified samples), :mod:`.preference` (DPO family), :mod:`.distill` (teachers),
:mod:`.mix` (SFT + RL in one update), :mod:`.pipeline` (stages in order).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rlvr.collect.collector import Collector
    from rlvr.config import RunConfig
    from rlvr.train.learn.learner import Learner
    from rlvr.train.stages.base import Objective, Source


def build_source(cfg: RunConfig, collector: Collector, tokenizer: Any) -> Source:
    """The stage's source of groups; the collector itself for ``rl``."""
    if cfg.stage == "sft" or (cfg.stage == "distill" and cfg.distill.mode == "offline"):
        from rlvr.train.stages.sft import DemonstrationSource

        return DemonstrationSource(cfg, tokenizer)
    if cfg.stage == "rft":
        from rlvr.train.stages.rft import VerifiedSource

        return VerifiedSource(cfg, collector)
    if cfg.stage == "dpo":
        from rlvr.train.stages.preference import build_pair_source

        return build_pair_source(cfg, collector, tokenizer)
    if cfg.stage == "distill":  # on_policy: the collector; self: it, with the teacher's prompts
        from rlvr.train.stages.distill import distill_source

        return distill_source(cfg, collector, tokenizer)
    if cfg.mix.demos == "luffy":
        from rlvr.train.stages.mix import DemonstrationMembers

        return DemonstrationMembers(cfg, collector, tokenizer)
    return collector  # rl


def build_objective(cfg: RunConfig, learner: Learner) -> Objective | None:
    """The stage's objective; ``None`` for ``rl`` and on-policy distillation (a policy loss)."""
    if cfg.stage in ("sft", "rft"):
        from rlvr.train.stages.sft import CrossEntropy

        return CrossEntropy(cfg, learner)
    if cfg.stage == "dpo":
        from rlvr.train.stages.preference import PreferenceObjective

        return PreferenceObjective(cfg, learner)
    if cfg.stage == "distill" and cfg.distill.mode == "offline":
        from rlvr.train.stages.distill import OfflineDistillation

        return OfflineDistillation(cfg, learner)
    return None
