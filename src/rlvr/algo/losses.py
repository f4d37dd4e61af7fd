"""Policy losses: per-token loss values from new/old logprobs and advantages.

A loss returns a [B, T] tensor of per-token losses (to be weighted by :mod:`rlvr.algo.aggregate`)
and a dict of scalar diagnostics. Masked positions may hold any value; aggregation zeroes them.
"""

from __future__ import annotations

import torch

from rlvr.registry import Registry

POLICY_LOSSES: Registry = Registry("policy loss")


@POLICY_LOSSES.register("ppo_clip")
def ppo_clip_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
) -> tuple[torch.Tensor, dict[str, float]]:
    """PPO's clipped surrogate with separate lower/upper bounds (DAPO's clip-higher when high > low).

    ``advantages`` is [B] (one per sequence) or [B, T] (per token).
    """
    adv = advantages[:, None] if advantages.dim() == 1 else advantages
    ratio = torch.exp((logprobs - old_logprobs).clamp(-20.0, 20.0))
    unclipped = ratio * adv
    clipped = ratio.clamp(1.0 - clip_low, 1.0 + clip_high) * adv
    loss = -torch.minimum(unclipped, clipped)
    with torch.no_grad():
        m = mask.bool()
        was_clipped = (clipped < unclipped) & m
        n = m.sum().clamp(min=1)
        stats = {
            "clip_frac": float(was_clipped.sum() / n),
            "ratio_mean": float((ratio * m).sum() / n),
            "ratio_max": float(ratio[m].max()) if m.any() else 1.0,
        }
    return loss, stats
