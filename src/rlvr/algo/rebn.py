"""ReBN: REINFORCE with Return Batch Normalization, for dense per-turn rewards.

GEM (seeds 003:262) trains its agent baselines with REINFORCE whose returns are normalised over the
*batch* (Return Batch Normalization), which, unlike GRPO, needs no group of episodes from one start
state and works in the full RL setting: every turn's reward is credited to that turn and the turns
before it (discounted), not only a final outcome to the whole episode. Here::

    G_t = Σ_{k ≥ t} discount^(k − t) · r_k     over tokens; r: the in-completion rewards the trainer
                                               offers as ``token_rewards`` (environment turn rewards
                                               on each turn's last token, a reward's step rewards,
                                               an in-reward KL penalty), plus the sequence reward
                                               on the last token
    A_t = (G_t − mean_batch G) / std_batch G   mean and std over every valid token of the batch

Choices the abstract leaves open: rlvr's estimators see tokens, not turns, so the discount is per
token (default 1: a turn's tokens all share the turn's return-to-go) and the batch statistics are
taken over tokens (GEM's over turns, so a long turn weighs more here). ``group_index`` is not used:
the baseline is the batch's, as in REINFORCE++ (``reinforce_pp``), to which ReBN reduces for
single-turn completions without token rewards, up to this token weighting of the statistics.
"""

from __future__ import annotations

import torch

from rlvr.algo.advantages import ADVANTAGE_ESTIMATORS, _scale
from rlvr.algo.step_returns import token_returns


@ADVANTAGE_ESTIMATORS.register("rebn")
def rebn_advantages(
    rewards: torch.Tensor,
    group_index: torch.Tensor,
    lengths: torch.Tensor,
    token_rewards: torch.Tensor | None = None,
    discount: float = 1.0,
    eps: float = 1e-6,
) -> torch.Tensor:
    """ReBN advantages [N, T] (T = longest completion): each token's discounted return-to-go,
    normalised by the mean and std of all valid tokens' returns in the batch (module docstring)."""
    del group_index  # the baseline is the batch's
    if not 0.0 <= discount <= 1.0:
        raise ValueError(f"rebn: discount must lie in [0, 1], got {discount}")
    returns, mask = token_returns(rewards, lengths, token_rewards, discount)
    valid = returns[mask > 0]
    if valid.numel() < 2:
        return torch.zeros_like(returns)
    centered = returns - valid.mean()
    return _scale(centered, valid.std().expand_as(centered), eps) * mask
