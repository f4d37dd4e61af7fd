"""GRIP: group-relative importance weights over a group's reasoning paths.

GRIP (Group-based Relative Importance for Policy optimization, the RL stage of Time-R1; seeds 002:10)
"leverages non-uniform sampling to further encourage and optimize the model's exploration of
effective reasoning paths". The abstract gives no formula; what is built here:

- *Which distribution.* A group's paths are drawn non-uniformly, each with probability
  ``p_i = softmax_g(r / temperature)_i`` within its group g: the better a path scored, the more
  often it is drawn, the more it is trained on. ``temperature → ∞`` is GRPO's uniform draw; a small
  temperature puts almost all weight on the group's best path.
- *Weights, not draws.* Drawing paths from ``p`` and averaging their GRPO terms has expectation
  ``Σ_i p_i A_i ∇log π(y_i) = (1/n) Σ_i (n p_i) A_i ∇log π(y_i)``. The estimator returns that
  expectation's per-path factor, ``A_i · w_i`` with ``w_i = n_g · p_i`` (mean 1 over a group), so
  the non-uniform sampling costs no extra variance from the draw itself and needs no resampling
  of the batch (the trainer's batch layout stays as it is).
- *Which advantage.* ``A_i`` is GRPO's (group mean baseline, divided by the group std unless
  ``normalize_std`` is false). The weight multiplies it, so a good path's positive advantage is
  amplified and a bad path's negative one damped: the update concentrates on the effective paths
  rather than on pushing the poor ones down.

Edge cases: a group whose rewards are all equal has uniform weights (``w = 1``) and GRPO advantage
0; a group of one path has weight 1 and advantage 0.
"""

from __future__ import annotations

import torch

from rlvr.algo.advantages import ADVANTAGE_ESTIMATORS, grpo_advantages


def relative_importance(rewards: torch.Tensor, group_index: torch.Tensor, temperature: float) -> torch.Tensor:
    """[N] weights ``n_g · softmax_g(r / temperature)``: each path's draw probability within its group
    times the group's size, so they average 1 over every group (1 everywhere for equal rewards)."""
    if not temperature > 0:
        raise ValueError(f"grip: temperature must be > 0, got {temperature}")
    if rewards.numel() == 0:
        return rewards.clone()
    groups = int(group_index.max()) + 1
    scaled = rewards / temperature
    # the group max subtracted first: exp never overflows, and the softmax is unchanged
    peak = torch.full((groups,), float("-inf"), dtype=rewards.dtype, device=rewards.device)
    peak = peak.scatter_reduce(0, group_index, scaled, reduce="amax")
    exp = torch.exp(scaled - peak[group_index])
    total = torch.zeros(groups, dtype=rewards.dtype, device=rewards.device).index_add_(0, group_index, exp)
    count = torch.zeros(groups, dtype=rewards.dtype, device=rewards.device)
    count = count.index_add_(0, group_index, torch.ones_like(rewards))
    return count[group_index] * exp / total[group_index]


@ADVANTAGE_ESTIMATORS.register("grip")
def grip_advantages(
    rewards: torch.Tensor,
    group_index: torch.Tensor,
    temperature: float = 1.0,
    normalize_std: bool = True,
    eps: float = 1e-6,
) -> torch.Tensor:
    """GRIP (seeds 002:10): ``grpo(r)_i · n_g · softmax_g(r / temperature)_i``; see the module docstring.

    ``temperature`` (> 0) sets how non-uniform the draw over a group's paths is (large: GRPO).
    """
    weights = relative_importance(rewards, group_index, temperature)
    return grpo_advantages(rewards, group_index, normalize_std, eps) * weights
