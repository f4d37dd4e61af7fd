"""Group and sample filters applied between scoring and the update."""

from __future__ import annotations

from typing import Any

import torch

from rlvr.algo.losses import POLICY_LOSSES, inner_loss, masked_fraction


def informative_groups(rewards: torch.Tensor, group_index: torch.Tensor, tol: float = 1e-6) -> torch.Tensor:
    """Boolean [num_groups]: True where the group's rewards are not all equal.

    DAPO's dynamic sampling drops the others: with group-relative advantages they carry zero
    gradient but still cost a forward and backward pass.
    """
    groups = int(group_index.max()) + 1 if group_index.numel() else 0
    high = torch.full((groups,), -float("inf")).scatter_reduce(0, group_index, rewards, "amax")
    low = torch.full((groups,), float("inf")).scatter_reduce(0, group_index, rewards, "amin")
    return (high - low) > tol


def overlong_mask(mask: torch.Tensor, truncated: torch.Tensor) -> torch.Tensor:
    """``mask`` [B, T] with the rows of truncated completions zeroed (DAPO's overlong filtering).

    A completion cut at ``max_new_tokens`` (``finish_reason == "length"``) is scored as wrong although
    its reasoning may be sound; training on it punishes length, not error. Excluding it from the
    loss (and from the token count of the aggregation) removes that noise. ``truncated`` is bool [B].
    """
    return mask * (~truncated.bool()).to(mask.dtype)[:, None]


@POLICY_LOSSES.register("overlong_filter")
def overlong_filter_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    truncated: torch.Tensor,
    inner: str = "ppo_clip",
    inner_params: dict[str, Any] | None = None,
    clip_low: float | None = None,
    clip_high: float | None = None,
    entropy: torch.Tensor | None = None,
    sampling_logprobs: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """The ``inner`` loss with truncated completions' tokens zeroed (see :func:`overlong_mask`).

    As a loss it cannot change the aggregation's token count, so with ``token-mean`` the batch's
    loss is scaled by the kept share; applying :func:`overlong_mask` to the mask before
    :func:`rlvr.algo.token_weights` is the exact form.
    """
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
    keep = overlong_mask(mask, truncated) > 0
    stats = {**stats, "overlong_masked_frac": masked_fraction(~keep, mask)}
    return torch.where(keep, loss, torch.zeros_like(loss)), stats
