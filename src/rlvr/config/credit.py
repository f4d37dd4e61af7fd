"""Config of credit inside a response that needs its own trainable state: PRIME's implicit PRM."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from rlvr.config.section import Section


class PrimeConfig(Section):
    coef: float = Field(
        0.0,
        ge=0,
        description="PRIME (docs/credit.md): β of the implicit process reward β·(log π_prm − log π_ref) "
        "per sampled token, from a copy of the policy trained online on the outcomes; 0 = off.",
    )
    lr: float = Field(1e-6, gt=0, description="Learning rate of the implicit PRM (AdamW, constant).")
    update: Literal["before", "after"] = Field(
        "before",
        description="Whether the PRM learns from a batch's outcomes before its process rewards are read "
        "(before: the paper's order) or after.",
    )
    grad_clip: float = Field(1.0, gt=0, description="Gradient-norm clip of the PRM's update.")
    granularity: Literal["token", "step"] = Field(
        "token",
        description="token: every token's implicit reward on that token; step: each step's tokens "
        "summed onto the step's last token (steps split at rewards.step_separator).",
    )
