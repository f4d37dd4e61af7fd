"""GDPO: group normalisation of each reward component on its own, for runs with several rewards.

GRPO normalises the *weighted total* within a group. With several rewards (correctness, format,
length...) different combinations of component scores add up to the same total and so to the
same advantage: the policy cannot tell "right but badly formatted" from "wrong but well
formatted". GDPO (Group reward-Decoupled Normalization Policy Optimization; seeds 001:417, 001:419)
normalises every component within the group separately and combines the normalised components
with the rewards' configured weights, so their relative differences survive.

The trainer offers ``reward_components`` [N, K] (each configured reward's unweighted score, in the
order of ``rewards.functions``; NaN where a sample has no score for it) and ``reward_weights`` [K]
to an estimator that names them (:func:`rlvr.train.learn.estimate.reward_components`).
"""

from __future__ import annotations

import torch

from rlvr.algo.advantages import ADVANTAGE_ESTIMATORS, _batch_std, _num_groups, _scale

# |total − weighted sum of the components| below this (relative to the total) is rounding, not a residual
RESIDUAL_TOL = 1e-5


def _group_sum(values: torch.Tensor, group_index: torch.Tensor) -> torch.Tensor:
    sums = torch.zeros(_num_groups(group_index), dtype=values.dtype, device=values.device)
    return sums.index_add_(0, group_index, values)[group_index]


def normalize_component(values: torch.Tensor, group_index: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """``(v − group mean) / (group std + eps)`` over the samples that have a value (not NaN).

    A sample without a value is left out of its group's mean and std and gets 0, as does every
    sample of a group whose present values are all equal (or that has fewer than two of them).
    The std is the unbiased (n − 1) one, as in :func:`rlvr.algo.grpo_advantages`.
    """
    present = ~torch.isnan(values)
    filled = torch.where(present, values, torch.zeros_like(values))
    count = _group_sum(present.to(values.dtype), group_index)
    mean = _group_sum(filled, group_index) / count.clamp(min=1)
    centered = torch.where(present, values - mean, torch.zeros_like(values))
    std = (_group_sum(centered**2, group_index) / (count - 1).clamp(min=1)).sqrt()
    return _scale(centered, std, eps)


@ADVANTAGE_ESTIMATORS.register("gdpo")
def gdpo_advantages(
    rewards: torch.Tensor,
    group_index: torch.Tensor,
    reward_components: torch.Tensor,
    reward_weights: torch.Tensor,
    batch_normalize: bool = True,
    eps: float = 1e-6,
) -> torch.Tensor:
    """GDPO (seeds 001:419): ``Σ_k w_k · groupnorm(c_k)``, then (``batch_normalize``) over its batch std.

    ``reward_components`` [N, K] holds the components' unweighted scores (NaN: no score, see
    :func:`normalize_component`), ``reward_weights`` [K] their weights. A component constant within
    a group adds 0 there. What the total holds beyond ``Σ_k w_k c_k`` (shaping, environment turn
    rewards, an in-reward KL penalty) is one more component of weight 1, so nothing in the total is
    lost; it is computed only for samples with every component present.

    ``batch_normalize`` divides the combined advantage by its standard deviation over the batch, so
    that its scale does not grow with the number of rewards (the mean is already 0: every
    normalised component sums to 0 within its group).
    """
    components = reward_components.to(rewards.dtype)
    weights = reward_weights.to(rewards.dtype)
    if (
        components.dim() != 2
        or components.shape[0] != rewards.shape[0]
        or components.shape[1] != weights.numel()
    ):
        raise ValueError(
            f"gdpo: reward_components {tuple(components.shape)} must be [N={rewards.shape[0]}, "
            f"K={weights.numel()}] (one column per weight)"
        )
    complete = ~torch.isnan(components).any(dim=1)
    residual = rewards - torch.where(torch.isnan(components), 0.0, components) @ weights
    residual = torch.where(residual.abs() <= RESIDUAL_TOL * (1 + rewards.abs()), 0.0, residual)
    residual = torch.where(complete, residual, torch.full_like(residual, float("nan")))
    advantages = torch.zeros_like(rewards)
    for k in range(components.shape[1]):
        advantages = advantages + weights[k] * normalize_component(components[:, k], group_index, eps)
    if bool((residual.nan_to_num(0.0) != 0).any()):
        advantages = advantages + normalize_component(residual, group_index, eps)
    if batch_normalize:
        advantages = _scale(advantages, _batch_std(advantages), eps)
    return advantages
