"""Advantage estimators: sequence rewards → sequence advantages, one function per method.

Every estimator takes ``rewards`` [N] and ``group_index`` [N] (which prompt each completion answers;
groups may differ in size) and returns advantages [N]. They are pure tensor functions so that they
can be tested against hand-computed numbers and swapped by name.
"""

from __future__ import annotations

import torch

from rlvr.registry import Registry

ADVANTAGE_ESTIMATORS: Registry = Registry("advantage estimator")


def group_mean(values: torch.Tensor, group_index: torch.Tensor) -> torch.Tensor:
    """Mean of ``values`` over each element's group, broadcast back to [N]."""
    groups = int(group_index.max()) + 1 if group_index.numel() else 0
    sums = torch.zeros(groups, dtype=values.dtype).index_add_(0, group_index, values)
    counts = torch.zeros(groups, dtype=values.dtype).index_add_(0, group_index, torch.ones_like(values))
    return (sums / counts.clamp(min=1))[group_index]


def group_std(values: torch.Tensor, group_index: torch.Tensor) -> torch.Tensor:
    """Unbiased (n-1) standard deviation over each element's group; 0 for groups of one."""
    groups = int(group_index.max()) + 1 if group_index.numel() else 0
    centered = values - group_mean(values, group_index)
    sq = torch.zeros(groups, dtype=values.dtype).index_add_(0, group_index, centered**2)
    counts = torch.zeros(groups, dtype=values.dtype).index_add_(0, group_index, torch.ones_like(values))
    return (sq / (counts - 1).clamp(min=1)).sqrt()[group_index]


@ADVANTAGE_ESTIMATORS.register("grpo")
def grpo_advantages(
    rewards: torch.Tensor, group_index: torch.Tensor, normalize_std: bool = True, eps: float = 1e-6
) -> torch.Tensor:
    """GRPO (DeepSeekMath; seeds 003:173): reward minus its group's mean, optionally over the group's std.

    A group whose rewards are all equal gets zero advantages (no signal), not a division by zero.
    """
    advantages = rewards - group_mean(rewards, group_index)
    if normalize_std:
        std = group_std(rewards, group_index)
        advantages = torch.where(std > 0, advantages / (std + eps), torch.zeros_like(advantages))
    return advantages
