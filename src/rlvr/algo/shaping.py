"""Reward shaping: sequence rewards → shaped sequence rewards, before the advantage estimator.

A shaping function is ``(rewards [N], group_index [N], lengths [N], ...) -> rewards [N]`` and is
registered in :data:`REWARD_SHAPERS`. Shaping that only needs the completion itself (soft overlong
punishment, a flat length penalty) is a reward function in :mod:`rlvr.rewards` instead
(``overlong``, ``length_penalty``); shaping here needs the *group* (e.g. its pass rate).
"""

from __future__ import annotations

import torch

from rlvr.algo.advantages import ADVANTAGE_ESTIMATORS, group_count, group_mean, grpo_advantages
from rlvr.registry import Registry

REWARD_SHAPERS: Registry = Registry("reward shaping")


@REWARD_SHAPERS.register("adaptive_length_penalty")
def adaptive_length_penalty(
    rewards: torch.Tensor,
    group_index: torch.Tensor,
    lengths: torch.Tensor,
    max_new_tokens: int,
    beta: float = 0.1,
    success_threshold: float = 0.5,
) -> torch.Tensor:
    """Difficulty-scaled length penalty (seeds 002:11; the form of ALP, Xiang et al., 2025):
    ``r − beta · (length / max_new_tokens) · max(pass rate of the group, 1/group size)``.

    The group's pass rate estimates how easy the prompt is for the current policy: easy prompts
    (everyone right) pay the full penalty and learn to be concise; hard ones (few right) pay almost
    nothing and keep their long reasoning. The floor 1/G keeps a small pressure on unsolved prompts.
    """
    solved = (rewards >= success_threshold).to(rewards.dtype)
    pass_rate = group_mean(solved, group_index)
    floor = 1.0 / group_count(rewards, group_index).clamp(min=1)
    scale = torch.maximum(pass_rate, floor)
    return rewards - beta * (lengths.to(rewards.dtype) / max_new_tokens) * scale


@ADVANTAGE_ESTIMATORS.register("alp")
def alp_advantages(
    rewards: torch.Tensor,
    group_index: torch.Tensor,
    lengths: torch.Tensor,
    max_new_tokens: int,
    beta: float = 0.1,
    success_threshold: float = 0.5,
    normalize_std: bool = False,
    eps: float = 1e-6,
) -> torch.Tensor:
    """GRPO advantages of :func:`adaptive_length_penalty`-shaped rewards (usable without a shaping hook).

    ``normalize_std`` defaults to off: dividing by the group's std would blow a tiny length
    difference in an all-correct group up to full-size advantages, making ``beta`` meaningless.
    """
    shaped = adaptive_length_penalty(rewards, group_index, lengths, max_new_tokens, beta, success_threshold)
    return grpo_advantages(shaped, group_index, normalize_std=normalize_std, eps=eps)
