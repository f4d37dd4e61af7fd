"""Corrections for the gap between the rollout engine's policy and the trainer's.

The engine that samples (vLLM, a quantised or differently-batched copy) does not compute exactly
the trainer's probabilities; the samples are then slightly off-policy even for an "on-policy" update,
and the mismatch can destabilise training (docs/design.md, "known traps"; off-policy RL in seeds 003:43).
Both losses here wrap another loss and reweight or mask its tokens by the sampler ratio
``ρ = π_old / π_sampler`` computed from the engine's own ``sampling_logprobs``.
"""

from __future__ import annotations

from typing import Any

import torch

from rlvr.algo.losses import POLICY_LOSSES, inner_loss, masked_fraction


def sampler_log_ratio(old_logprobs: torch.Tensor, sampling_logprobs: torch.Tensor) -> torch.Tensor:
    """log π_old/π_sampler per token (detached, clamped finite)."""
    return (old_logprobs.detach() - sampling_logprobs.detach()).clamp(-20.0, 20.0)


@POLICY_LOSSES.register("tis")
def tis_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    sampling_logprobs: torch.Tensor,
    cap: float = 2.0,
    inner: str = "ppo_clip",
    inner_params: dict[str, Any] | None = None,
    clip_low: float | None = None,
    clip_high: float | None = None,
    entropy: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Truncated importance sampling (Yao et al., 2025, "Your efficient RL framework secretly brings
    you off-policy RL training"): the ``inner`` loss times ``min(π_old/π_sampler, cap)``.

    The weight corrects the expectation for having sampled from the engine's distribution; the cap
    bounds its variance (a token the engine found unlikely but the trainer does not would otherwise
    get a huge weight). The weight is a constant (no gradient).
    """
    weight = sampler_log_ratio(old_logprobs, sampling_logprobs).exp().clamp(max=cap)
    loss, stats = inner_loss(
        inner,
        inner_params,
        logprobs,
        old_logprobs,
        advantages,
        mask,
        clip_low=clip_low,
        clip_high=clip_high,
        entropy=entropy,
        sampling_logprobs=sampling_logprobs,
    )
    m = mask > 0
    stats = {
        **stats,
        "tis_weight_mean": float(torch.where(m, weight, 0.0).sum() / m.sum().clamp(min=1)),
        "tis_capped_frac": masked_fraction(weight >= cap, mask),
    }
    return weight * loss, stats


@POLICY_LOSSES.register("masked_is")
def masked_is_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    sampling_logprobs: torch.Tensor,
    low: float = 0.5,
    high: float = 2.0,
    level: str = "token",
    inner: str = "ppo_clip",
    inner_params: dict[str, Any] | None = None,
    clip_low: float | None = None,
    clip_high: float | None = None,
    entropy: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Masked importance sampling: drop tokens whose sampler ratio π_old/π_sampler is outside [low, high].

    Where the engine and the trainer disagree that much, the sample says little about the trainer's
    policy; rather than reweighting it (``tis``), it is left out. ``level="sequence"`` tests the
    geometric-mean ratio of the whole completion and drops all its tokens together.
    """
    if level not in ("token", "sequence"):
        raise ValueError(f"masked_is: level must be 'token' or 'sequence', got {level!r}")
    valid = mask > 0
    log_rho = torch.where(valid, sampler_log_ratio(old_logprobs, sampling_logprobs), 0.0)
    if level == "sequence":
        log_rho = (log_rho.sum(dim=1, keepdim=True) / valid.sum(dim=1, keepdim=True).clamp(min=1)).expand_as(
            log_rho
        )
    rho = log_rho.exp()
    keep = (rho >= low) & (rho <= high)
    loss, stats = inner_loss(
        inner,
        inner_params,
        logprobs,
        old_logprobs,
        advantages,
        mask,
        clip_low=clip_low,
        clip_high=clip_high,
        entropy=entropy,
        sampling_logprobs=sampling_logprobs,
    )
    stats = {**stats, "is_masked_frac": masked_fraction(~keep, mask)}
    return torch.where(keep, loss, torch.zeros_like(loss)), stats
