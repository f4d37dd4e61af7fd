"""Pass@k advantages: reward a group of k samples for containing *one* right answer.

Implements the analytical advantage of "Pass@k Training for Adaptively Balancing Exploration and
Exploitation of Large Reasoning Models" (Chen et al., 2025, arXiv 2508.10751, section on the
analytical derivation). Pass@1 training (GRPO) pays every correct sample and fines every wrong one,
which favours the single most likely answer; pass@k training scores *subsets* of k samples by their
best member, so a wrong sample is only fined in proportion to how often it sits in a subset with no
right answer. The policy keeps probability on alternative answers: more exploration, better pass@k
(seeds 003:176 and 000:29 discuss why RLVR otherwise loses pass@k at large k).
"""

from __future__ import annotations

import math

import torch

from rlvr.algo.advantages import ADVANTAGE_ESTIMATORS


def passk_group_advantages(n: int, n_correct: int, k: int) -> tuple[float, float]:
    """(advantage of a correct sample, advantage of a wrong sample) for one group.

    Over all C(n, k) subsets of the group, a subset's reward is 1 if it holds a correct sample:

    - mean subset reward  R = 1 − C(n_wrong, k) / C(n, k)
    - subset reward std   σ = sqrt(R (1 − R))
    - a correct sample is in subsets of reward 1 only:      A+ = (1 − R) / σ
    - a wrong sample is in an all-wrong subset with probability
      q = C(n_wrong − 1, k − 1) / C(n − 1, k − 1):            A− = (1 − R − q) / σ

    Each sample's advantage is the mean normalised advantage of the subsets it belongs to. With
    k = 1 this is GRPO with the population std. k is capped at the group size; σ = 0 (every subset
    scores the same) gives zero advantages.
    """
    k = max(1, min(k, n))
    n_wrong = n - n_correct
    mean = 1.0 - math.comb(n_wrong, k) / math.comb(n, k)
    std = math.sqrt(max(mean * (1.0 - mean), 0.0))
    if std == 0.0:
        return 0.0, 0.0
    q = math.comb(n_wrong - 1, k - 1) / math.comb(n - 1, k - 1) if n_wrong > 0 else 0.0
    return (1.0 - mean) / std, (1.0 - mean - q) / std


@ADVANTAGE_ESTIMATORS.register("passk")
def passk_advantages(
    rewards: torch.Tensor, group_index: torch.Tensor, k: int = 4, success_threshold: float = 0.5
) -> torch.Tensor:
    """Pass@k analytical advantages (see the module docstring) for binary correctness.

    A sample is correct when ``reward >= success_threshold`` (rewards are binarised: the
    derivation is for pass/fail verifiers).
    """
    if k < 1:
        raise ValueError(f"passk: k must be >= 1, got {k}")
    correct = rewards >= success_threshold
    advantages = torch.zeros_like(rewards)
    for g in torch.unique(group_index).tolist():
        rows = group_index == g
        n, n_correct = int(rows.sum()), int(correct[rows].sum())
        positive, negative = passk_group_advantages(n, n_correct, k)
        advantages[rows] = torch.where(
            correct[rows], torch.full_like(rewards[rows], positive), torch.full_like(rewards[rows], negative)
        )
    return advantages
