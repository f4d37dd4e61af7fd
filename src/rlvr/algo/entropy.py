"""Entropy regularisation: a bonus for keeping the policy's token distribution spread out.

RL on verifiable rewards tends to collapse entropy early, after which exploration and gains stall
(seeds 004:23; 001:283 studies the entropy-performance exchange; 003:26 adapts the temperature to
hold it up). The oldest remedy is a bonus ``−coef · H`` in the loss. A fixed coefficient is fragile
(too small does nothing, too large explodes entropy), so :func:`adaptive_entropy_coef` adjusts it
towards a target entropy, as Skywork-OR1 (He et al., 2025) does.

The bonus needs the entropy *with* its gradient (the trainer's ``entropy`` context is detached).
"""

from __future__ import annotations

from typing import Any

import torch

from rlvr.algo.losses import POLICY_LOSSES, inner_loss, masked_fraction, per_token


def entropy_bonus_loss(entropy: torch.Tensor, coef: float) -> torch.Tensor:
    """Per-token ``−coef · H`` [B, T], to be added to the policy loss before aggregation.

    Minimising it raises the entropy of the distribution at every trained position.
    """
    return -coef * entropy


def _with_bonus(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    entropy_with_grad: torch.Tensor,
    coef: float,
    entropy_coef: float | None,
    inner: str,
    inner_params: dict[str, Any] | None,
    positive_only: bool,
    **context: Any,
) -> tuple[torch.Tensor, dict[str, float]]:
    """The ``inner`` loss plus ``−coef · H`` on every token, or (``positive_only``) on the tokens
    whose advantage is > 0; ``entropy_coef`` (an adaptive controller's) overrides ``coef``."""
    loss, stats = inner_loss(inner, inner_params, logprobs, old_logprobs, advantages, mask, **context)
    used = coef if entropy_coef is None else entropy_coef
    bonus = entropy_bonus_loss(entropy_with_grad, used)
    stats = {**stats, "entropy_coef": float(used)}
    if positive_only:
        positive = (per_token(advantages) > 0).expand_as(loss)
        bonus = torch.where(positive, bonus, torch.zeros_like(loss))
        stats["positive_entropy_frac"] = masked_fraction(positive, mask)
    return loss + bonus, stats


@POLICY_LOSSES.register("entropy_bonus")
def entropy_bonus_policy_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    entropy_with_grad: torch.Tensor,
    coef: float = 1e-3,
    entropy_coef: float | None = None,
    inner: str = "ppo_clip",
    inner_params: dict[str, Any] | None = None,
    clip_low: float | None = None,
    clip_high: float | None = None,
    entropy: torch.Tensor | None = None,
    sampling_logprobs: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """The ``inner`` loss plus an entropy bonus ``−coef · H`` per token.

    ``entropy_with_grad`` [B, T] is the per-token entropy of the current policy, differentiable.
    ``entropy_coef``, when the trainer offers it (from an :func:`adaptive_entropy_coef` controller),
    overrides the fixed ``coef``.
    """
    return _with_bonus(
        logprobs, old_logprobs, advantages, mask, entropy_with_grad, coef, entropy_coef, inner, inner_params,
        False, clip_low=clip_low, clip_high=clip_high, entropy=entropy, sampling_logprobs=sampling_logprobs,
    )  # fmt: skip


@POLICY_LOSSES.register("positive_entropy")
def positive_entropy_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    entropy_with_grad: torch.Tensor,
    coef: float = 1e-3,
    entropy_coef: float | None = None,
    inner: str = "ppo_clip",
    inner_params: dict[str, Any] | None = None,
    clip_low: float | None = None,
    clip_high: float | None = None,
    entropy: torch.Tensor | None = None,
    sampling_logprobs: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """The ``inner`` loss plus ``−coef · H`` only on the tokens of positive-advantage samples.

    Diversity-aware policy optimisation (seeds 004:7) raises token-level diversity (entropy) on
    positive samples only: more ways to reach a right answer, without also spreading the mass of
    wrong ones (whose entropy falling is part of learning, seeds 001:283). A token is in when its
    advantage is > 0 (for per-sequence advantages: its sample's). ``entropy_coef`` from an
    :func:`adaptive_entropy_coef` controller overrides ``coef``, as for ``entropy_bonus``.
    """
    return _with_bonus(
        logprobs, old_logprobs, advantages, mask, entropy_with_grad, coef, entropy_coef, inner, inner_params,
        True, clip_low=clip_low, clip_high=clip_high, entropy=entropy, sampling_logprobs=sampling_logprobs,
    )  # fmt: skip


def adaptive_entropy_coef(
    coef: float,
    entropy: float,
    target: float,
    step: float = 5e-4,
    min_coef: float = 0.0,
    max_coef: float = 1e-2,
) -> float:
    """Next entropy coefficient: ``coef ± step`` towards holding ``entropy`` at ``target``, clamped.

    Below the target the bonus grows by ``step``; above it, shrinks by ``step``. The state is just
    the coefficient: the trainer keeps it, updates it once per step with the batch's mean entropy,
    and checkpoints it.
    """
    nxt = coef + step if entropy < target else coef - step
    return min(max(nxt, min_coef), max_coef)
