"""Group filters applied between scoring and the update."""

from __future__ import annotations

import torch


def informative_groups(rewards: torch.Tensor, group_index: torch.Tensor, tol: float = 1e-6) -> torch.Tensor:
    """Boolean [num_groups]: True where the group's rewards are not all equal.

    DAPO's dynamic sampling drops the others: with group-relative advantages they carry zero
    gradient but still cost a forward and backward pass.
    """
    groups = int(group_index.max()) + 1 if group_index.numel() else 0
    high = torch.full((groups,), -float("inf")).scatter_reduce(0, group_index, rewards, "amax")
    low = torch.full((groups,), float("inf")).scatter_reduce(0, group_index, rewards, "amin")
    return (high - low) > tol
