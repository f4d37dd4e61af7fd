"""ArenaRL: advantages from a round-robin tournament inside each group instead of from reward values.

ArenaRL (seeds 001:105, 001:107) argues that pointwise reward models suffer a *discrimination
collapse*: the scores of a group's trajectories are squeezed into a narrow range, so after GRPO's
normalisation the advantages are mostly the reward model's noise. It replaces pointwise scoring by
intra-group relative ranking: trajectories meet in pairwise matches (judged by an LLM with
process-aware rubrics) and a tournament ranks them; the advantage comes from the ranking.

rlvr has one scalar reward per completion and no pairwise judge, so a match is decided by the
rewards' order: the higher reward wins (1), equal rewards (within ``tie_margin``) tie (0.5 each).
Each completion's score is its *net win rate* against the other members of its group,
``s_i = (wins − losses) / (n − 1)`` in [−1, 1] (= 2 · win rate − 1), which already sums to zero over
the group; with ``normalize_std`` it is divided by its group std, as GRPO does with rewards. Only the
order of the rewards matters: 0.50/0.51/0.52 and 0/1/100 give the same advantages, which is the
point of the method (a compressed but correctly ordered score range still gives full-size signal).

Choices the abstract leaves open:

- **Round robin, not single elimination.** The paper's seeded single-elimination bracket exists to
  cut the O(n²) LLM-judge calls of a full round robin to O(n) while approximating its ranking; with
  scalar rewards a comparison costs nothing, so the full round robin (the scheme the bracket
  approximates) is computed exactly.
- **Win-rate scores, not rank positions.** Ties share credit (0.5 each), so tied completions get
  equal advantages and an all-tied group gets 0 (never NaN); a group of one has no opponent and gets 0.
"""

from __future__ import annotations

import torch

from rlvr.algo.advantages import ADVANTAGE_ESTIMATORS, _scale, group_count, group_std


def net_win_rate(rewards: torch.Tensor, group_index: torch.Tensor, tie_margin: float = 0.0) -> torch.Tensor:
    """``(wins − losses) / (n − 1)`` of every completion against the rest of its group (0 alone).

    A match against ``j`` is won when ``r_i − r_j > tie_margin``, lost when ``r_j − r_i > tie_margin``,
    tied otherwise. O(N²) memory over the batch, fine for RL batch sizes (hundreds of completions).
    """
    if tie_margin < 0:
        raise ValueError(f"arenarl: tie_margin must be >= 0, got {tie_margin}")
    if rewards.numel() == 0:
        return rewards.clone()
    diff = rewards[:, None] - rewards[None, :]
    outcome = (diff > tie_margin).to(rewards.dtype) - (diff < -tie_margin).to(rewards.dtype)
    same_group = group_index[:, None] == group_index[None, :]
    net = torch.where(same_group, outcome, torch.zeros_like(outcome)).sum(dim=1)  # self-match is 0
    opponents = group_count(rewards, group_index) - 1
    return torch.where(opponents > 0, net / opponents.clamp(min=1), torch.zeros_like(net))


@ADVANTAGE_ESTIMATORS.register("arenarl")
def arenarl_advantages(
    rewards: torch.Tensor,
    group_index: torch.Tensor,
    tie_margin: float = 0.0,
    normalize_std: bool = True,
    eps: float = 1e-6,
) -> torch.Tensor:
    """ArenaRL (seeds 001:107): each completion's net win rate in its group's round robin (module
    docstring), divided by the group's std of those win rates when ``normalize_std``.

    ``tie_margin``: reward differences up to this count as a tie (a judge's indifference band); 0
    makes any difference decisive.
    """
    scores = net_win_rate(rewards, group_index, tie_margin)
    if normalize_std and scores.numel():
        scores = _scale(scores, group_std(scores, group_index), eps)
    return scores
