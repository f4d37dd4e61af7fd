"""Advantage estimators: sequence rewards → sequence advantages, one function per method.

Every estimator takes ``rewards`` [N] and ``group_index`` [N] (which prompt each completion answers;
groups may differ in size) and returns advantages [N]. They are pure tensor functions so that they
can be tested against hand-computed numbers and swapped by name. The methods differ only in the
*baseline* subtracted from a reward and the *scale* it is divided by; the docstrings say which and why.
Estimators that need more than rewards name it (``lengths``, ``baseline_rewards``, ``values``...);
the trainer passes what a signature names (:func:`rlvr.registry.accepted_context`).

An estimator may also return ``(advantages, targets)``: ``targets`` maps names to per-completion
tensors the update needs besides the advantages. The one the trainer uses is ``"returns"`` [N, T],
the critic's regression targets (required from an estimator that takes ``values``, see ``gae``).
"""

from __future__ import annotations

import torch

from rlvr.registry import Registry

ADVANTAGE_ESTIMATORS: Registry = Registry("advantage estimator")


def _num_groups(group_index: torch.Tensor) -> int:
    return int(group_index.max()) + 1 if group_index.numel() else 0


def group_count(values: torch.Tensor, group_index: torch.Tensor) -> torch.Tensor:
    """Size of each element's group, broadcast back to [N] (same dtype as ``values``)."""
    counts = torch.zeros(_num_groups(group_index), dtype=values.dtype, device=values.device)
    return counts.index_add_(0, group_index, torch.ones_like(values))[group_index]


def group_mean(values: torch.Tensor, group_index: torch.Tensor) -> torch.Tensor:
    """Mean of ``values`` over each element's group, broadcast back to [N]."""
    sums = torch.zeros(_num_groups(group_index), dtype=values.dtype, device=values.device)
    sums = sums.index_add_(0, group_index, values)[group_index]
    return sums / group_count(values, group_index).clamp(min=1)


def group_std(values: torch.Tensor, group_index: torch.Tensor) -> torch.Tensor:
    """Unbiased (n-1) standard deviation over each element's group; 0 for groups of one."""
    centered = values - group_mean(values, group_index)
    sq = torch.zeros(_num_groups(group_index), dtype=values.dtype, device=values.device)
    sq = sq.index_add_(0, group_index, centered**2)[group_index]
    return (sq / (group_count(values, group_index) - 1).clamp(min=1)).sqrt()


def _scale(values: torch.Tensor, std: torch.Tensor, eps: float) -> torch.Tensor:
    """``values / (std + eps)`` where std > 0, else 0: no signal rather than a division by zero."""
    return torch.where(std > 0, values / (std + eps), torch.zeros_like(values))


def _batch_std(values: torch.Tensor) -> torch.Tensor:
    """Unbiased std over the whole batch (0 for fewer than two values)."""
    return values.std() if values.numel() > 1 else values.new_zeros(())


@ADVANTAGE_ESTIMATORS.register("grpo")
def grpo_advantages(
    rewards: torch.Tensor, group_index: torch.Tensor, normalize_std: bool = True, eps: float = 1e-6
) -> torch.Tensor:
    """GRPO (DeepSeekMath; seeds 003:173): reward minus its group's mean, optionally over the group's std.

    A group whose rewards are all equal gets zero advantages (no signal), not a division by zero.
    """
    advantages = rewards - group_mean(rewards, group_index)
    if normalize_std:
        advantages = _scale(advantages, group_std(rewards, group_index), eps)
    return advantages


@ADVANTAGE_ESTIMATORS.register("dr_grpo")
def dr_grpo_advantages(rewards: torch.Tensor, group_index: torch.Tensor) -> torch.Tensor:
    """Dr. GRPO ("Understanding R1-Zero-Like Training"): reward minus group mean, *no* std division.

    Dividing by the group's std up-weights prompts that are nearly always solved or nearly always
    failed (tiny std), a question-difficulty bias; Dr. GRPO drops it (and, in its preset, the
    per-sequence length normalisation of the loss: ``loss_agg: seq-mean-token-sum-norm``).
    """
    return rewards - group_mean(rewards, group_index)


@ADVANTAGE_ESTIMATORS.register("batch_std")
def batch_std_advantages(rewards: torch.Tensor, group_index: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """LitePPO ("Tricks or Traps? A Deep Dive into RL for LLM Reasoning"): group mean, *batch* std.

    The group mean is the right baseline (same prompt), but a group's own std is a noisy scale for
    small groups and explodes for near-constant ones; the std of all rewards in the batch is a
    stable scale shared by every prompt.
    """
    return _scale(rewards - group_mean(rewards, group_index), _batch_std(rewards), eps)


@ADVANTAGE_ESTIMATORS.register("rloo")
def rloo_advantages(rewards: torch.Tensor, group_index: torch.Tensor) -> torch.Tensor:
    """RLOO (REINFORCE leave-one-out; seeds 000:12): reward minus the mean of the *other* rewards.

    Leaving the sample out makes the baseline independent of the sample, so the estimate is
    unbiased. Equals ``n/(n-1) * (r - group mean)``; a group of one has no baseline and gets 0.
    """
    n = group_count(rewards, group_index)
    centered = rewards - group_mean(rewards, group_index)
    return torch.where(n > 1, centered * n / (n - 1).clamp(min=1), torch.zeros_like(rewards))


@ADVANTAGE_ESTIMATORS.register("reinforce_pp")
def reinforce_pp_advantages(
    rewards: torch.Tensor, group_index: torch.Tensor, eps: float = 1e-6
) -> torch.Tensor:
    """REINFORCE++ (Hu, 2025): rewards normalised by the mean and std of the *whole batch*.

    No per-prompt baseline at all: global normalisation is what keeps the critic-free estimate
    stable without overfitting to easy prompts (``group_index`` is accepted for the common contract).
    """
    return _scale(rewards - rewards.mean(), _batch_std(rewards), eps)


@ADVANTAGE_ESTIMATORS.register("reinforce_pp_baseline")
def reinforce_pp_baseline_advantages(
    rewards: torch.Tensor, group_index: torch.Tensor, eps: float = 1e-6
) -> torch.Tensor:
    """REINFORCE++-baseline: subtract the group mean, then divide by the batch std of the *result*.

    Differs from ``batch_std`` only in the scale: the spread of the group-centred rewards (what the
    policy can actually learn from) rather than of the raw rewards (which includes between-prompt
    difficulty differences).
    """
    centered = rewards - group_mean(rewards, group_index)
    return _scale(centered, _batch_std(centered), eps)


@ADVANTAGE_ESTIMATORS.register("remax")
def remax_advantages(
    rewards: torch.Tensor, group_index: torch.Tensor, baseline_rewards: torch.Tensor
) -> torch.Tensor:
    """ReMax (Li et al., 2023; seeds 000:12): reward minus the reward of the *greedy* completion.

    ``baseline_rewards`` [N] is the reward of the greedy (temperature-0) completion of each row's
    prompt: a per-prompt baseline that needs one extra greedy rollout instead of a group or a critic.
    """
    return rewards - baseline_rewards.to(rewards.dtype)


@ADVANTAGE_ESTIMATORS.register("psr_nsr")
def psr_nsr_advantages(
    rewards: torch.Tensor,
    group_index: torch.Tensor,
    positive_weight: float = 1.0,
    negative_weight: float = 1.0,
    success_threshold: float = 0.5,
) -> torch.Tensor:
    """Positive / negative sample reinforcement (Zhu et al., 2025; seeds 000:29).

    Rewards become ±1 (correct when ``reward >= success_threshold``) with *no baseline*, as in the
    paper's REINFORCE decomposition, then the two halves are weighted separately:
    ``+positive_weight`` for correct samples (PSR), ``-negative_weight`` for incorrect ones (NSR).
    PSR-only is ``negative_weight=0``, NSR-only is ``positive_weight=0``; the paper finds NSR alone
    keeps pass@k high at large k because it only pushes mass *away* from wrong answers.
    Without a baseline, groups that are all right or all wrong still carry signal, so presets turn
    dynamic sampling off.
    """
    correct = rewards >= success_threshold
    return torch.where(
        correct,
        torch.full_like(rewards, positive_weight),
        torch.full_like(rewards, -negative_weight),
    )


@ADVANTAGE_ESTIMATORS.register("w_reinforce")
def w_reinforce_advantages(
    rewards: torch.Tensor,
    group_index: torch.Tensor,
    positive_weight: float = 0.1,
    success_threshold: float = 0.5,
) -> torch.Tensor:
    """W-REINFORCE (seeds 000:29): ``psr_nsr`` with positives down-weighted to λ=0.1 (the paper's λ).

    ``λ·L_PSR + L_NSR``: mostly negative reinforcement, with a little positive reinforcement to
    keep pass@1 up.
    """
    return psr_nsr_advantages(rewards, group_index, positive_weight, 1.0, success_threshold)
