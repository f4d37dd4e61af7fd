"""Config of how the KL reference model moves during a run (fixed, periodic reset, or EMA)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from rlvr.config.section import Section


class ReferenceConfig(Section):
    update: Literal["fixed", "reset", "ema"] = Field(
        "fixed",
        description="How the KL reference moves: fixed (the starting policy for the whole run); "
        "reset (ProRL: every `every` training steps it becomes a copy of the current policy); ema (a "
        "slowly-evolving reference: after each step ref ← decay·ref + (1 − decay)·policy). "
        "Needs algo.kl_coef > 0.",
    )
    every: int = Field(
        50, ge=1, description="update=reset: training steps (updates) between two resets of the reference."
    )
    reset_optimizer: bool = Field(
        True,
        description="update=reset: also clear AdamW's moment estimates at each reset (ProRL restarts "
        "its optimizer state with the reference).",
    )
    decay: float = Field(
        0.99, gt=0, lt=1, description="update=ema: the weight of the old reference in each EMA step."
    )
    critical_kl: float = Field(
        0.0,
        ge=0,
        description="α of the critical-token KL: each token's KL term is multiplied by exp(−α·H_ref), H_ref "
        "the reference's entropy at that position, so the KL holds the policy less where the reference "
        "itself is unsure (critical tokens); 0: every token weighs the same.",
    )
