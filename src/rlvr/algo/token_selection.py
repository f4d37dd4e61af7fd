"""Losses that decide *which tokens* get a policy gradient: forking tokens, Clip-Cov, KL-Cov.

Both papers start from the same observation: a few tokens carry the learning signal and the
entropy dynamics. "Beyond the 80/20 rule" (seeds 000:20) trains only the high-entropy "forking"
tokens; "The Entropy Mechanism of RL for Reasoning LMs" (seeds 004:23) shows entropy falls in
proportion to the covariance of a token's log-probability and its advantage, and restrains the few
tokens with the largest covariance. Selection happens over the tokens the loss sees at once
(one micro-batch; the whole minibatch when ``algo.micro_batch_size`` covers it).
"""

from __future__ import annotations

import math
from typing import Any

import torch

from rlvr.algo.losses import (
    POLICY_LOSSES,
    inner_loss,
    log_ratio,
    masked_fraction,
    per_token,
    ppo_clip_loss,
    ratio_stats,
)


def top_fraction(scores: torch.Tensor, mask: torch.Tensor, fraction: float) -> torch.Tensor:
    """Bool [B, T]: valid tokens whose score is among the top ``fraction`` (at least one; ties kept)."""
    valid = mask > 0
    picked = scores[valid]
    if picked.numel() == 0:
        return torch.zeros_like(valid)
    k = min(max(1, math.ceil(fraction * picked.numel())), picked.numel())
    threshold = torch.topk(picked, k).values.min()
    return valid & (scores >= threshold)


def token_covariance(logprobs: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Per-token ``(log π − mean log π) · (A − mean A)`` over the valid tokens (detached; 0 elsewhere).

    Its batch mean is the covariance that drives the entropy change under policy gradient
    (seeds 004:23); tokens with a large positive term are confident *and* rewarded, the ones that
    collapse entropy.
    """
    valid = mask > 0
    lp = logprobs.detach()
    adv = per_token(advantages).expand_as(lp).detach()
    n = valid.sum().clamp(min=1)
    lp_mean = torch.where(valid, lp, 0.0).sum() / n
    adv_mean = torch.where(valid, adv, 0.0).sum() / n
    return torch.where(valid, (lp - lp_mean) * (adv - adv_mean), torch.zeros_like(lp))


@POLICY_LOSSES.register("forking_tokens")
def forking_tokens_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    entropy: torch.Tensor,
    top_q: float = 0.2,
    inner: str = "ppo_clip",
    inner_params: dict[str, Any] | None = None,
    clip_low: float | None = None,
    clip_high: float | None = None,
    sampling_logprobs: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """80/20 (Wang et al., 2025; seeds 000:20): gradient only through the top-``top_q`` entropy tokens.

    The ``inner`` loss (PPO by default) is kept on tokens whose entropy is in the top ``top_q``
    fraction of the batch's valid tokens and zeroed elsewhere; the aggregation still divides by all
    tokens, as in the paper's objective. Training on the other 80% alone hurts, per the paper.
    """
    if not 0.0 < top_q <= 1.0:
        raise ValueError(f"forking_tokens: top_q must be in (0, 1], got {top_q}")
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
    selected = top_fraction(entropy.detach(), mask, top_q)
    stats = {**stats, "forking_frac": masked_fraction(selected, mask)}
    return torch.where(selected, loss, torch.zeros_like(loss)), stats


@POLICY_LOSSES.register("clip_cov")
def clip_cov_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    clip_cov_ratio: float = 2e-4,
    cov_low: float = 1.0,
    cov_high: float = 5.0,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Clip-Cov (seeds 004:23): PPO, with a few high-covariance tokens *detached*.

    Among valid tokens that PPO did not already clip and whose covariance term lies in
    (``cov_low``, ``cov_high``), ``max(1, clip_cov_ratio · #tokens)`` are drawn at random and their
    loss is detached (value kept, gradient 0), so the updates that would shrink entropy most are
    skipped. Paper defaults: ratio 2e-4, bounds 1 and 5.
    """
    loss, stats = ppo_clip_loss(logprobs, old_logprobs, advantages, mask, clip_low, clip_high)
    with torch.no_grad():
        adv = per_token(advantages).expand_as(loss)
        ratio = torch.exp(log_ratio(logprobs, old_logprobs))
        ppo_clipped = ratio.clamp(1.0 - clip_low, 1.0 + clip_high) * adv < ratio * adv
        cov = token_covariance(logprobs, advantages, mask)
        candidates = (mask > 0) & ~ppo_clipped & (cov > cov_low) & (cov < cov_high)
        count = max(1, int(clip_cov_ratio * float((mask > 0).sum())))
        index = candidates.flatten().nonzero().flatten()
        order = torch.randperm(index.numel(), generator=generator).to(index.device)
        selected = torch.zeros_like(candidates).flatten()
        selected[index[order[:count]]] = True
        selected = selected.view_as(candidates)
    stats = {**stats, "cov_detached_frac": masked_fraction(selected, mask)}
    return torch.where(selected, loss.detach(), loss), stats


@POLICY_LOSSES.register("kl_cov")
def kl_cov_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    kl_cov_ratio: float = 2e-3,
    kl_coef: float = 1.0,
) -> tuple[torch.Tensor, dict[str, float]]:
    """KL-Cov (seeds 004:23): unclipped surrogate ``−r·A``, plus ``kl_coef·|log π − log π_old|`` on the
    top ``kl_cov_ratio`` tokens by covariance.

    Instead of cutting gradients, the tokens most responsible for entropy collapse are held near
    the sampling policy. Paper defaults: ratio 2e-3 (0.2% of tokens; 2e-4 for 32B), coefficient 1.
    The penalty is 0 with zero gradient when π = π_old, i.e. it acts from the second optimizer step
    on a batch (``algo.minibatches`` or ``algo.epochs`` > 1).
    """
    diff = log_ratio(logprobs, old_logprobs)
    ratio = torch.exp(diff)
    surrogate = -ratio * per_token(advantages)
    with torch.no_grad():
        valid = mask > 0
        count = min(max(1, int(kl_cov_ratio * float(valid.sum()))), int(valid.sum()))
        cov = torch.where(valid, token_covariance(logprobs, advantages, mask), -torch.inf).flatten()
        selected = torch.zeros_like(cov, dtype=torch.bool)
        selected[torch.topk(cov, count).indices] = True
        selected = selected.view_as(valid) & valid
    loss = surrogate + torch.where(selected, kl_coef * diff.abs(), torch.zeros_like(diff))
    stats = {"kl_cov_frac": masked_fraction(selected, mask), **ratio_stats(ratio, mask)}
    return loss, stats
