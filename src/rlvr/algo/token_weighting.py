"""Token weighting: scale each token's advantage by how much it is worth learning from.

Two modifiers, each wrapping another loss (``inner``, PPO by default) and scaling the advantages it
sees, like ``lowprob_downweight``:

``tea_rl`` — token-wise entropy-adaptive RL (TEA-RL, Light-IF; seeds 003:364). The abstract names
it only as the RL half of an entropy-preserving recipe ("entropy-preserving supervised fine-tuning
(Entropy-SFT) strategy coupled with token-wise entropy-adaptive (TEA-RL) reinforcement learning")
and gives no formula. Chosen here: each token's advantage is scaled by its (detached) entropy
relative to the batch's mean, ``w_t = clamp(((H_t + ε)/(H̄ + ε))^α, max=max_weight)``, so the
update concentrates on high-entropy (forking) tokens and low-entropy ones, whose further sharpening
is what collapses entropy, move less; ``α = 0`` is the inner loss unchanged. The mean is over the
valid tokens of the call (a micro-batch).

``token_reweight`` — perplexity- and position-based reweighting (seeds 001:283, "Decomposing the
Entropy-Performance Exchange"). In the plateau stage "learning efficiency strongly correlates with
high-entropy tokens present in low-perplexity samples and those located at the end of sequences",
and the paper proposes "two methods that dynamically adjust the reward signal using perplexity and
positional information". The abstract gives no formulas; the simplest faithful ones, chosen here:

- ``mode: perplexity``: a completion's log-perplexity is ``λ = −mean_t log π_old(y_t)``; with ``z``
  its standardised value among the call's completions, its advantage is scaled by
  ``max(0, 1 − α·z)``: low-perplexity completions up, high-perplexity ones down.
- ``mode: position``: token t of a completion with L valid tokens (counted over the valid tokens
  only) is scaled by ``1 + α·(2·(t + ½)/L − 1)``, rising linearly from ``1 − α`` towards ``1 + α``
  at the end; the weights of every completion average exactly 1, and a single token gets 1.

Both apply to positive and negative advantages alike (the abstract does not split them). The
abstract's other finding, that the *high-entropy* tokens of those samples matter, is ``tea_rl``:
the two nest (``inner: tea_rl``).
"""

from __future__ import annotations

from typing import Any

import torch

from rlvr.algo.losses import POLICY_LOSSES, inner_loss, per_token

REWEIGHT_MODES = ("perplexity", "position")


def _masked_mean(values: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    return torch.where(valid, values, torch.zeros_like(values)).sum() / valid.sum().clamp(min=1)


def entropy_weights(
    entropy: torch.Tensor, mask: torch.Tensor, alpha: float, max_weight: float, eps: float = 1e-6
) -> torch.Tensor:
    """[B, T] ``min(((H + eps)/(H̄ + eps))^alpha, max_weight)``, H̄ the mean over valid tokens (detached)."""
    entropy = entropy.detach().clamp(min=0.0)
    mean = _masked_mean(entropy, mask > 0)
    return (((entropy + eps) / (mean + eps)) ** alpha).clamp(max=max_weight)


def perplexity_weights(old_logprobs: torch.Tensor, mask: torch.Tensor, alpha: float) -> torch.Tensor:
    """[B, 1] ``max(0, 1 − alpha·z)``, z the standardised log-perplexity among rows with a valid token.

    Rows without one, and every row when fewer than two have one or all are equal, get 1.
    """
    valid = mask > 0
    rows = valid.any(dim=1)
    lp = old_logprobs.detach()
    log_ppl = -torch.where(valid, lp, torch.zeros_like(lp)).sum(dim=1) / valid.sum(dim=1).clamp(min=1)
    weights = torch.ones_like(log_ppl)
    if int(rows.sum()) >= 2:
        kept = log_ppl[rows]
        std = kept.std(unbiased=False)
        if std > 0:
            z = (kept - kept.mean()) / std
            weights[rows] = (1.0 - alpha * z).clamp(min=0.0)
    return weights[:, None]


def position_weights(mask: torch.Tensor, alpha: float) -> torch.Tensor:
    """[B, T] ``1 + alpha·(2·(t + ½)/L − 1)``, t the index among the row's L valid tokens (1 elsewhere)."""
    valid = mask > 0
    index = valid.long().cumsum(dim=1) - 1  # 0, 1, ... over the valid tokens
    length = valid.sum(dim=1, keepdim=True).clamp(min=1)
    relative = (index.float() + 0.5) / length
    weights = 1.0 + alpha * (2.0 * relative - 1.0)
    return torch.where(valid, weights, torch.ones_like(weights))


def _weighted_inner(
    weight: torch.Tensor,
    name: str,
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    inner: str,
    inner_params: dict[str, Any] | None,
    **context: Any,
) -> tuple[torch.Tensor, dict[str, float]]:
    """The ``inner`` loss on advantages ``A · weight``, with the weight's mean over valid tokens."""
    weighted = per_token(advantages) * weight
    loss, stats = inner_loss(inner, inner_params, logprobs, old_logprobs, weighted, mask, **context)
    full = weight.expand_as(logprobs)
    stats = {**stats, f"{name}_weight_mean": float(_masked_mean(full, mask > 0))}
    return loss, stats


@POLICY_LOSSES.register("tea_rl")
def tea_rl_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    entropy: torch.Tensor,
    alpha: float = 0.5,
    max_weight: float = 3.0,
    inner: str = "ppo_clip",
    inner_params: dict[str, Any] | None = None,
    clip_low: float | None = None,
    clip_high: float | None = None,
    sampling_logprobs: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """TEA-RL (seeds 003:364): the ``inner`` loss with advantages ``A · w``, ``w`` from
    :func:`entropy_weights` (``alpha`` ≥ 0 its exponent, ``max_weight`` ≥ 1 its cap)."""
    if not alpha >= 0.0:
        raise ValueError(f"tea_rl: alpha must be >= 0, got {alpha}")
    if not max_weight >= 1.0:
        raise ValueError(f"tea_rl: max_weight must be >= 1, got {max_weight}")
    weight = entropy_weights(entropy, mask, alpha, max_weight)
    return _weighted_inner(
        weight, "tea", logprobs, old_logprobs, advantages, mask, inner, inner_params,
        clip_low=clip_low, clip_high=clip_high, entropy=entropy, sampling_logprobs=sampling_logprobs,
    )  # fmt: skip


@POLICY_LOSSES.register("token_reweight")
def token_reweight_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    mode: str = "perplexity",
    alpha: float = 0.2,
    inner: str = "ppo_clip",
    inner_params: dict[str, Any] | None = None,
    clip_low: float | None = None,
    clip_high: float | None = None,
    entropy: torch.Tensor | None = None,
    sampling_logprobs: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Perplexity/position reweighting (seeds 001:283): the ``inner`` loss with advantages ``A · w``.

    ``mode: perplexity`` takes ``w`` from :func:`perplexity_weights` (``alpha`` ≥ 0),
    ``mode: position`` from :func:`position_weights` (``alpha`` in [0, 1], so no weight is negative).
    """
    if mode not in REWEIGHT_MODES:
        raise ValueError(f"token_reweight: mode must be one of {', '.join(REWEIGHT_MODES)}, got {mode!r}")
    if not alpha >= 0.0 or (mode == "position" and alpha > 1.0):
        bound = "[0, 1]" if mode == "position" else ">= 0"
        raise ValueError(f"token_reweight: alpha must be {bound} for mode {mode}, got {alpha}")
    if mode == "perplexity":
        weight = perplexity_weights(old_logprobs, mask, alpha)
    else:
        weight = position_weights(mask, alpha)
    return _weighted_inner(
        weight, "reweight", logprobs, old_logprobs, advantages, mask, inner, inner_params,
        clip_low=clip_low, clip_high=clip_high, entropy=entropy, sampling_logprobs=sampling_logprobs,
    )  # fmt: skip
