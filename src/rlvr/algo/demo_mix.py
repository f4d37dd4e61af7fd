"""SFT and RL in one loss: learning from demonstrations (expert traces) while exploring.

Two-stage SFT → RL is the default pipeline; the methods here mix expert tokens into the RL update
itself instead:

- CHORD (seeds 003:355) trains ``(1 − μ)·GRPO + μ·SFT`` on expert data, with μ warmed up and then
  decayed (:func:`chord_mu`) and each expert token's SFT term weighted by ``p·(1 − p)``
  (:func:`chord_token_weights`), so tokens the policy already predicts (p ≈ 1) or finds
  implausible (p ≈ 0) move it little and on-policy exploration is not overwritten.
- LUFFY (Yan et al., 2025, "Learning to Reason under Off-Policy Guidance"; no seed abstract of its
  own: the closest are CHORD and ExPO, seeds 001:441, which finds raw expert demonstrations often
  ineffective in RL) puts an expert trajectory into the GRPO group and trains its tokens with a
  shaped ratio ``π/(π + γ)`` (the ``luffy`` policy loss).
- :func:`sft_token_loss` is the plain cross-entropy both build on.

All are per-token [B, T] values for :mod:`rlvr.algo.aggregate`, like the policy losses.
"""

from __future__ import annotations

import math

import torch

from rlvr.algo.losses import POLICY_LOSSES, masked_fraction, per_token, ppo_clip_loss

Tensor = torch.Tensor


def sft_token_loss(logprobs: Tensor, mask: Tensor) -> Tensor:
    """Cross-entropy on the trained tokens: ``−log π(token)·mask`` ([B, T]; 0 off the mask, even at −inf)."""
    return -torch.where(mask > 0, logprobs, torch.zeros_like(logprobs)) * mask


def chord_token_weights(logprobs: Tensor) -> Tensor:
    """CHORD's per-token SFT weight ``p·(1 − p)``, p = π(token), detached ([B, T]).

    It peaks at p = 0.5 and vanishes at both ends: an expert token the policy already emits gives
    no update (nothing to learn), and one it finds very unlikely gives little (imitating it would
    pull the policy far from its own distribution, the disruption CHORD sets out to avoid). The
    weight is a coefficient, not part of the objective, so no gradient flows through it.
    """
    p = torch.exp(logprobs.detach())
    return p * (1.0 - p)


def chord_mu(step: int, total_steps: int, mu_peak: float, warmup_steps: int, mu_end: float) -> float:
    """CHORD's global SFT coefficient μ at ``step``: the loss is ``(1 − μ)·GRPO + μ·SFT``.

    μ rises linearly from 0 to ``mu_peak`` over the first ``warmup_steps`` steps, then follows a
    cosine from ``mu_peak`` down to ``mu_end`` at ``total_steps`` (and stays there): imitation
    first, then a gradual hand-over to on-policy exploration.
    """
    if not 0 <= warmup_steps <= total_steps:
        raise ValueError(
            f"chord_mu: need 0 <= warmup_steps <= total_steps, got {warmup_steps}, {total_steps}"
        )
    if not (0.0 <= mu_peak <= 1.0 and 0.0 <= mu_end <= 1.0):
        raise ValueError(f"chord_mu: mu_peak and mu_end must be in [0, 1], got {mu_peak}, {mu_end}")
    if step < warmup_steps:
        return mu_peak * max(step, 0) / warmup_steps
    decay = total_steps - warmup_steps
    progress = min(1.0, (step - warmup_steps) / decay) if decay > 0 else 1.0
    return mu_end + (mu_peak - mu_end) * 0.5 * (1.0 + math.cos(math.pi * progress))


@POLICY_LOSSES.register("luffy")
def luffy_loss(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    given_mask: Tensor | None = None,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    gamma: float = 0.1,
) -> tuple[Tensor, dict[str, float]]:
    """LUFFY: PPO on sampled tokens; ``−A·π/(π + γ)`` on given (demonstration) tokens.

    ``given_mask`` ([B, T], nonzero = the token was given, not sampled by the policy) marks the
    expert trajectory LUFFY puts in the group. Its tokens have no old log-prob (nothing sampled
    them), so there is no importance ratio to clip; LUFFY takes the ratio against a behaviour policy
    of 1 and *shapes* it: ``f(π) = π/(π + γ)``, whose gradient ``γ·π/(π + γ)²`` (per unit log π)
    is largest at π ≈ γ, lifting the low-probability expert tokens that plain importance weighting
    (gradient ∝ π) would ignore, while f stays bounded by 1. With no ``given_mask`` this is
    ``ppo_clip``. Advantages are [B] or [B, T]; the clip/ratio stats cover sampled tokens only.
    """
    if gamma <= 0:
        raise ValueError(f"luffy: gamma must be > 0, got {gamma}")
    if given_mask is None:
        given = torch.zeros_like(mask, dtype=torch.bool)
    else:
        given = given_mask > 0
    sampled_mask = torch.where(given, torch.zeros_like(mask), mask)
    # the PPO branch is computed on given tokens too (then discarded): whatever old log-prob the
    # caller left there (0, −inf, NaN) stays out of the gradient, as log_ratio clamps it
    ppo, stats = ppo_clip_loss(logprobs, old_logprobs, advantages, sampled_mask, clip_low, clip_high)
    pi = torch.exp(torch.where(given, logprobs, torch.zeros_like(logprobs)))
    shaped = -(pi / (pi + gamma)) * per_token(advantages)
    loss = torch.where(given, shaped, ppo)
    stats["luffy/given_share"] = masked_fraction(given, mask)
    return loss, stats
