"""TEMPO: Tree-Estimated Mean Prefix Value for Policy Optimization (seeds 003:50).

A group's completions of one prompt form a prefix tree ("Prefix-to-Tree", P2T): completions that
share their first ``d`` tokens share the tree's node at depth ``d``. Each node's value ``V(s)`` is
the mean outcome of the completions through it, a nonparametric value estimate that needs no critic.
TEMPO adds a temporal-difference correction to GRPO's group-relative signal:

    A_{i,t} = (R_i − V(root) + coef · (V(s_{t+1}) − V(s_t))) / σ

where ``s_t`` is completion ``i``'s prefix before token ``t``, ``V(root)`` the group mean and σ the
group's reward std (with ``normalize_std``). A node all of whose completions take the same next
token has the same completions below it, so ``V(s_{t+1}) = V(s_t)``: the TD term is zero off
branching points ("branch-gated", as the abstract says) and TEMPO is GRPO there; at a branch the
token that led to better completions than its siblings gets extra credit.

Where the abstract is silent: the correction is divided by the same group std as the outcome term,
so the method is invariant to the reward's scale and ``coef`` is a pure ratio of the two signals; a
completion that ends inside another's path counts at every node of its own prefix (its end is one more
branch of the last node); the tree is over the sampled tokens only (``token_ids``, compacted), so in
multi-turn episodes the environment's tokens between turns are not part of the key.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from rlvr.algo.advantages import ADVANTAGE_ESTIMATORS, group_std


def token_id_matrix(
    token_ids: torch.Tensor | Sequence[Sequence[int]], lengths: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """(ids [N, T] long, valid [N, T] bool) from a tensor or per-row lists; ``lengths`` [N] marks the
    valid prefix of each row (what lies past it, padding, is never compared)."""
    n = len(lengths)
    if isinstance(token_ids, torch.Tensor):
        ids = token_ids.long()
        if ids.dim() != 2 or ids.shape[0] != n:
            raise ValueError(f"token_ids must be [N={n}, T], got shape {tuple(ids.shape)}")
    else:
        if len(token_ids) != n:
            raise ValueError(f"token_ids has {len(token_ids)} rows, lengths {n}")
        width = max((len(row) for row in token_ids), default=0)
        ids = torch.zeros(n, width, dtype=torch.long)
        for row, seq in enumerate(token_ids):
            ids[row, : len(seq)] = torch.tensor(list(seq), dtype=torch.long)
    if n and int(lengths.max()) > ids.shape[1]:
        raise ValueError(f"lengths exceed token_ids' width {ids.shape[1]}")
    valid = torch.arange(ids.shape[1])[None, :] < lengths.cpu()[:, None]
    return ids.cpu(), valid


def common_prefix_lengths(ids: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """[g, g]: how many leading tokens rows i and j share (the diagonal holds each row's length)."""
    same = (ids[:, None, :] == ids[None, :, :]) & valid[:, None, :] & valid[None, :, :]
    return same.long().cumprod(dim=2).sum(dim=2)


def prefix_values(rewards: torch.Tensor, shared: torch.Tensor, width: int) -> torch.Tensor:
    """[g, width + 1]: ``V`` of row i's node at depth d, the mean reward of the rows through it
    (those sharing at least d leading tokens with it, itself included); 0 past the row's length."""
    depth = torch.arange(width + 1)
    through = (shared[:, :, None] >= depth[None, None, :]).to(rewards.dtype)  # [g, g, width + 1]
    total = (through * rewards[None, :, None]).sum(dim=1)
    return total / through.sum(dim=1).clamp(min=1)


@ADVANTAGE_ESTIMATORS.register("tempo")
def tempo_advantages(
    rewards: torch.Tensor,
    group_index: torch.Tensor,
    token_ids: torch.Tensor | Sequence[Sequence[int]],
    lengths: torch.Tensor,
    coef: float = 1.0,
    normalize_std: bool = True,
    eps: float = 1e-6,
) -> torch.Tensor:
    """[N, T] token advantages: GRPO's ``R − mean`` plus ``coef`` × the prefix tree's TD term
    ``V(s_{t+1}) − V(s_t)``, over the group's std if ``normalize_std``; 0 past each length.

    A group whose rewards are all equal, and a group of one, get 0 everywhere (every node's value is
    then the same). ``token_ids``: each row's sampled tokens (the trainer's context).
    """
    if not coef >= 0:
        raise ValueError(f"coef must be >= 0 (weight of the tree's TD term), got {coef}")
    if not eps > 0:
        raise ValueError(f"eps must be > 0, got {eps}")
    ids, valid = token_id_matrix(token_ids, lengths)
    width = ids.shape[1]
    r = rewards.detach().cpu().to(torch.float64)
    index = group_index.cpu()
    out = torch.zeros(len(r), width, dtype=torch.float64)
    for group in index.unique():
        rows = (index == group).nonzero().squeeze(1)
        shared = common_prefix_lengths(ids[rows], valid[rows])
        values = prefix_values(r[rows], shared, width)  # [g, width + 1]
        td = values[:, 1:] - values[:, :-1]  # token t moves from depth t to t + 1
        out[rows] = (r[rows] - values[:, 0])[:, None] + coef * td  # values[:, 0]: the group mean
    if normalize_std:
        std = group_std(r, index)
        out = torch.where(std[:, None] > 0, out / (std[:, None] + eps), torch.zeros_like(out))
    else:  # an all-equal group is exactly 0 already; keep float noise out of the mean
        out = torch.where((group_std(r, index) > 0)[:, None], out, torch.zeros_like(out))
    return torch.where(valid, out, torch.zeros_like(out)).to(rewards.dtype).to(rewards.device)
