"""Policy losses: per-token loss values from new/old logprobs and advantages.

A loss returns a [B, T] tensor of per-token losses (to be weighted by :mod:`rlvr.algo.aggregate`)
and a dict of scalar diagnostics. Masked positions may hold any finite value; aggregation zeroes them.
``advantages`` is [B] (one per sequence) or [B, T] (per token). The losses here differ in how they
use the importance ratio ``π/π_old`` of the tokens: clipped (PPO, dual-clip), ignored (REINFORCE),
clipped but *detached* (CISPO), or taken per sequence (GSPO). Losses that modify another loss
(token selection, importance correction, ...) call it through :func:`inner_loss`.
"""

from __future__ import annotations

from typing import Any

import torch

from rlvr.registry import Registry, accepted_context

POLICY_LOSSES: Registry = Registry("policy loss")


def per_token(advantages: torch.Tensor) -> torch.Tensor:
    """[B] or [B, T] advantages as something that broadcasts against [B, T]."""
    return advantages[:, None] if advantages.dim() == 1 else advantages


def log_ratio(logprobs: torch.Tensor, old_logprobs: torch.Tensor) -> torch.Tensor:
    """log π/π_old, clamped so that exp() stays finite on padding or wildly off-policy tokens."""
    return (logprobs - old_logprobs).clamp(-20.0, 20.0)


def masked_fraction(flags: torch.Tensor, mask: torch.Tensor) -> float:
    """Fraction of valid tokens where ``flags`` holds."""
    m = mask > 0
    return float((flags & m).sum() / m.sum().clamp(min=1))


def ratio_stats(ratio: torch.Tensor, mask: torch.Tensor) -> dict[str, float]:
    """Mean and max importance ratio over the valid tokens (diagnostics)."""
    ratio, m = ratio.detach(), mask > 0
    n = m.sum().clamp(min=1)
    return {
        "ratio_mean": float(torch.where(m, ratio, 0.0).sum() / n),
        "ratio_max": float(ratio[m].max()) if m.any() else 1.0,
    }


def inner_loss(
    inner: str,
    inner_params: dict[str, Any] | None,
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    **context: Any,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Call the registered loss ``inner`` for a loss that modifies it.

    ``context`` is what the wrapping loss itself received from the trainer (None: not offered);
    it is forwarded under the same rule as the trainer's (:func:`accepted_context`), and a typo in
    ``inner_params`` is an error naming ``algo.loss_params.inner_params``. Wrappers name and forward
    the trainer's base context (``clip_low``, ``clip_high``, ``entropy``, ``sampling_logprobs``);
    a keyword only one wrapper needs (``truncated``, ``entropy_with_grad``) is not passed further in.
    """
    fn = POLICY_LOSSES.get(inner)
    offered = {key: value for key, value in context.items() if value is not None}
    kwargs = accepted_context(fn, offered, dict(inner_params or {}), "algo.loss_params.inner_params")
    return fn(logprobs, old_logprobs, advantages, mask, **kwargs)


@POLICY_LOSSES.register("ppo_clip")
def ppo_clip_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
) -> tuple[torch.Tensor, dict[str, float]]:
    """PPO's clipped surrogate with separate lower/upper bounds (DAPO's clip-higher when high > low)."""
    adv = per_token(advantages)
    ratio = torch.exp(log_ratio(logprobs, old_logprobs))
    unclipped = ratio * adv
    clipped = ratio.clamp(1.0 - clip_low, 1.0 + clip_high) * adv
    loss = -torch.minimum(unclipped, clipped)
    with torch.no_grad():
        stats = {"clip_frac": masked_fraction(clipped < unclipped, mask), **ratio_stats(ratio, mask)}
    return loss, stats


@POLICY_LOSSES.register("dual_clip")
def dual_clip_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    clip_c: float = 3.0,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Dual-clip PPO (Ye et al., 2020): PPO, plus a cap of ``clip_c·|A|`` on negative-advantage tokens.

    For A < 0 PPO's loss ``−min(r·A, clip(r)·A)`` grows without bound in the ratio r: one token
    that became much *more* likely since sampling can dominate the batch. Capping it at ``r = clip_c``
    bounds that (such tokens then get no gradient). Only matters off-policy (epochs/minibatches > 1).
    """
    if clip_c <= 1.0:
        raise ValueError(f"dual_clip: clip_c must be > 1, got {clip_c}")
    base, stats = ppo_clip_loss(logprobs, old_logprobs, advantages, mask, clip_low, clip_high)
    adv = per_token(advantages).expand_as(base)
    cap = -clip_c * adv
    capped = (adv < 0) & (base > cap)
    loss = torch.where(capped, cap.expand_as(base), base)
    stats["dual_clip_frac"] = masked_fraction(capped, mask)
    return loss, stats


@POLICY_LOSSES.register("reinforce")
def reinforce_loss(
    logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor
) -> tuple[torch.Tensor, dict[str, float]]:
    """Plain policy gradient ``−A · log π``: no ratio, no clip (RLOO, PSR/NSR and W-REINFORCE use it).

    On-policy its gradient equals PPO's (there r = 1 and ∇r = ∇log π); off-policy it has no
    correction at all, which is the point of comparing against it.
    """
    return -per_token(advantages) * logprobs, {}


@POLICY_LOSSES.register("importance_sampling")
def importance_sampling_loss(
    logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor
) -> tuple[torch.Tensor, dict[str, float]]:
    """Unclipped importance-weighted policy gradient ``−(π/π_old) · A``.

    Its gradient is ``−(π/π_old) · A · ∇log π``: REINFORCE reweighted by the ratio to the policy
    that ``old_logprobs`` came from, with no trust region. Tinker's ``importance_sampling`` loss is
    this with the *sampler's* logprobs as ``π_old`` (``rlvr serve`` passes them); in rlvr's own
    trainer, on-policy, ``π_old`` is the trainer's policy before the update and the gradient is
    REINFORCE's.
    """
    ratio = torch.exp(log_ratio(logprobs, old_logprobs))
    with torch.no_grad():
        stats = ratio_stats(ratio, mask)
    return -ratio * per_token(advantages), stats


@POLICY_LOSSES.register("cispo")
def cispo_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_low: float = 1.0,
    clip_high: float = 0.28,
) -> tuple[torch.Tensor, dict[str, float]]:
    """CISPO (MiniMax-M1, 2025; compared in seeds 001:427): ``−sg(clip(r, 1−ε_low, 1+ε_high)) · A · log π``.

    PPO's clip removes the *gradient* of tokens whose ratio left the trust region; in long
    reasoning those are often the rare "fork" tokens (e.g. "wait") that matter most. CISPO clips the
    importance *weight* instead and stops its gradient, so every token keeps a (bounded) gradient.
    ``clip_low``/``clip_high`` bound the weight to [max(0, 1 − clip_low), 1 + clip_high]; MiniMax-M1
    sets no lower bound (``clip_low`` ≥ 1) and tunes only the upper one.
    """
    ratio = torch.exp(log_ratio(logprobs, old_logprobs))
    weight = ratio.clamp(max(0.0, 1.0 - clip_low), 1.0 + clip_high).detach()
    loss = -weight * per_token(advantages) * logprobs
    with torch.no_grad():
        stats = {"clip_frac": masked_fraction(weight != ratio, mask), **ratio_stats(ratio, mask)}
    return loss, stats


@POLICY_LOSSES.register("gspo")
def gspo_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_low: float = 3e-4,
    clip_high: float = 4e-4,
) -> tuple[torch.Tensor, dict[str, float]]:
    """GSPO (Zheng et al., 2025, "Group Sequence Policy Optimization"; seeds 003:40 builds on it).

    The reward is given per sequence, so the importance ratio is taken per sequence too: the
    length-normalised (geometric-mean) ratio ``s = exp(mean_t log π/π_old)``, clipped to
    [1 − clip_low, 1 + clip_high] (the paper's ranges are tiny, 3e-4/4e-4, because s is a mean).
    Written in the paper's GSPO-token form ``s_t = sg(s) · π_t / sg(π_t)``: its value is s at every
    token and, with ``loss_agg: seq-mean-token-mean``, its gradient equals sequence-level GSPO's,
    while still accepting per-token advantages.
    """
    valid = mask > 0
    token_log_ratio = torch.where(valid, log_ratio(logprobs, old_logprobs), torch.zeros_like(logprobs))
    seq_log_ratio = token_log_ratio.sum(dim=1) / valid.sum(dim=1).clamp(min=1)
    seq_ratio = torch.exp(seq_log_ratio.clamp(-20.0, 20.0)).detach()
    ratio = seq_ratio[:, None] * torch.exp(logprobs - logprobs.detach())
    adv = per_token(advantages)
    unclipped = ratio * adv
    clipped = ratio.clamp(1.0 - clip_low, 1.0 + clip_high) * adv
    loss = -torch.minimum(unclipped, clipped)
    with torch.no_grad():
        rows = valid.any(dim=1)
        stats = {
            "clip_frac": masked_fraction(clipped < unclipped, mask),
            "seq_ratio_mean": float(seq_ratio[rows].mean()) if rows.any() else 1.0,
        }
    return loss, stats
