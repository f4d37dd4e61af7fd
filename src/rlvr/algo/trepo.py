"""Trajectory policy gradient and TRePO, Token-Reinforced Policy Optimization (seeds 000:12).

**What the abstract proves.** The Trajectory Policy Gradient Theorem: even when the true rewards are
per token (the Zero-Reward Assumption need not hold), with a response-level reward ``R`` (their sum)

    ∇J = E[ Σ_t ∇log π(a_t | s_t) · (R − b_t) ]

for any baseline ``b_t`` that does not depend on ``a_t`` or what follows it. So the response-level
estimators rlvr already has are unbiased token-level policy gradients: ``rloo`` (``b`` = the mean
of the prompt's other rewards), ``remax`` (a greedy completion's reward) and, up to its
``(n − 1)/n`` self-inclusion factor, the group mean of ``dr_grpo``/``grpo``. None of them needs a
new estimator; the theorem is their justification (tests/test_algo_wave2_credit.py checks it exactly
on an enumerable two-token problem, with token-level rewards that break the Zero-Reward Assumption).

**What is new here.** The abstract names TRePO — "simpler than PPO, as memory-efficient as GRPO",
token-level credit from response-level rewards — but not its formula. What the theorem allows
beyond a sequence-level baseline is a *state*-dependent one, ``b_t = b(s_t)``, which gives each token
its own advantage without a critic. ``trepo`` takes it from the group itself: the mean reward of the
prompt's *other* completions that share the prefix ``s_t`` (leave-one-out, so the baseline is
independent of the completion's own actions and the estimate stays unbiased). Where no other
completion shares ``s_t``, it keeps the baseline of the deepest prefix that one still does (which
``s_t`` alone determines, so it is still an allowed baseline). Before the group's completions diverge,
every token gets RLOO's advantage; after, a token is credited against the completions that made the
same earlier choices. ``prefix_baseline: false`` is RLOO on every token, exactly.

This is rlvr's reading of an abstract that leaves the algorithm open, not a reproduction of the
paper's code; the preset trains it with the PPO clip and no critic (GRPO's memory).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from rlvr.algo.advantages import ADVANTAGE_ESTIMATORS
from rlvr.algo.tempo import common_prefix_lengths, token_id_matrix


def prefix_loo_baselines(rewards: torch.Tensor, shared: torch.Tensor, width: int) -> torch.Tensor:
    """[g, width]: the baseline of row i's token t (state ``s_t``, depth t): the mean reward of the
    other rows sharing ``min(t, m_i)`` leading tokens with it, ``m_i`` the most any other row shares.
    NaN for a group of one (no other row)."""
    g = len(rewards)
    others = ~torch.eye(g, dtype=torch.bool)
    deepest = torch.where(others, shared, torch.full_like(shared, -1)).max(dim=1).values  # m_i
    depth = torch.arange(width)[None, :].minimum(deepest[:, None].clamp(min=0))  # [g, width]
    through = (shared[:, :, None] >= depth[:, None, :]) & others[:, :, None]  # [g, g, width]
    count = through.sum(dim=1)
    total = (through.to(rewards.dtype) * rewards[None, :, None]).sum(dim=1)
    return torch.where(count > 0, total / count.clamp(min=1), torch.full_like(total, float("nan")))


@ADVANTAGE_ESTIMATORS.register("trepo")
def trepo_advantages(
    rewards: torch.Tensor,
    group_index: torch.Tensor,
    token_ids: torch.Tensor | Sequence[Sequence[int]],
    lengths: torch.Tensor,
    prefix_baseline: bool = True,
) -> torch.Tensor:
    """[N, T] token advantages ``R_i − b_i(s_t)`` with the leave-one-out prefix baseline above (or,
    with ``prefix_baseline`` false, the mean of the group's other rewards: RLOO on every token).

    A group of one has no baseline and gets 0; an all-equal group gets 0; 0 past each length.
    """
    ids, valid = token_id_matrix(token_ids, lengths)
    width = ids.shape[1]
    r = rewards.detach().cpu().to(torch.float64)
    index = group_index.cpu()
    out = torch.zeros(len(r), width, dtype=torch.float64)
    for group in index.unique():
        rows = (index == group).nonzero().squeeze(1)
        if len(rows) < 2:
            continue  # no other completion: no baseline, no signal (as rloo)
        shared = common_prefix_lengths(ids[rows], valid[rows])
        if not prefix_baseline:
            shared = torch.zeros_like(shared)  # every row shares only the root: one baseline per row
        baseline = prefix_loo_baselines(r[rows], shared, width)
        out[rows] = r[rows][:, None] - baseline
    return torch.where(valid, out, torch.zeros_like(out)).to(rewards.dtype).to(rewards.device)
