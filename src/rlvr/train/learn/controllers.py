"""Coefficients that follow a controller from step to step: adaptive KL and adaptive entropy.

Their state is one number each, kept by the trainer, offered to the update, logged as
``algo/kl_coef`` and ``algo/entropy_coef`` (the values the step's update used) and checkpointed,
so that ``--resume`` continues with the same coefficients.

- KL (Ziegler et al. 2019, :func:`rlvr.algo.adaptive_kl_coef`): with ``algo.kl_target`` the KL
  coefficient starts at ``algo.kl_coef`` and, after each step, moves towards holding the observed
  KL at the target. The observed KL is the step's KL aggregated like the loss (``algo.loss_agg``;
  per token for token-mean): ``update/kl`` when KL is a loss term, ``reward/kl`` when it is in the
  reward. ``n_steps`` is the number of completions of the step, so ``algo.kl_horizon`` counts
  completions.
- Entropy (Skywork-OR1, :func:`rlvr.algo.adaptive_entropy_coef`): with ``algo.entropy_target`` the
  coefficient starts at ``algo.entropy_coef_init`` and steps by ``algo.entropy_coef_step`` towards
  holding the update's mean token entropy (``update/entropy``) at the target, within
  [``entropy_coef_min``, ``entropy_coef_max``]. Losses that take ``entropy_coef`` receive it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from rlvr.algo import adaptive_entropy_coef, adaptive_kl_coef
from rlvr.config.schema import AlgoConfig


@dataclass
class Coefficients:
    kl: float
    entropy: float | None  # None: no adaptive entropy coefficient

    @classmethod
    def from_config(cls, cfg: AlgoConfig) -> Coefficients:
        return cls(kl=cfg.kl_coef, entropy=cfg.entropy_coef_init if cfg.entropy_target is not None else None)

    def loss_context(self) -> dict[str, float]:
        """What the loss is offered (only when the controller runs: a fixed coef stays the loss's own)."""
        return {} if self.entropy is None else {"entropy_coef": self.entropy}

    def metrics(self, cfg: AlgoConfig) -> dict[str, float]:
        out = {"algo/kl_coef": self.kl} if cfg.kl_coef > 0 else {}
        if self.entropy is not None:
            out["algo/entropy_coef"] = self.entropy
        return out

    def update(self, cfg: AlgoConfig, metrics: dict[str, float], samples: int) -> None:
        """Move the coefficients after a step from its ``metrics``; a skipped update leaves them."""
        observed_kl = metrics.get("reward/kl" if cfg.kl_in_reward else "update/kl")
        if cfg.kl_target is not None and observed_kl is not None:
            self.kl = adaptive_kl_coef(self.kl, observed_kl, cfg.kl_target, cfg.kl_horizon, samples)
        entropy = metrics.get("update/entropy")
        if self.entropy is not None and cfg.entropy_target is not None and entropy is not None:
            self.entropy = adaptive_entropy_coef(
                self.entropy,
                entropy,
                cfg.entropy_target,
                cfg.entropy_coef_step,
                cfg.entropy_coef_min,
                cfg.entropy_coef_max,
            )

    def state(self) -> dict[str, Any]:
        return asdict(self)
