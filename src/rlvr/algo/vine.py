"""VinePPO's step advantages from Monte-Carlo values (seeds 003:181-182).

A value network guesses how good a partial response is; VinePPO measures it instead: the collector
(:mod:`rlvr.collect.vine`) continues the response from each step boundary a few times and scores
the continuations, so ``V(s_k)`` is their mean reward. With the reward only at the end (discount 1)
the advantage of step ``k``, which moves the response from state ``s_{k-1}`` to ``s_k``, is::

    A_k = V(s_k) − V(s_{k−1})          V(s_0): the mean reward of the group's other responses
                                       V(s_K): the response's own reward

so every token of step ``k`` gets ``A_k``. ``V(s_0)`` is estimated by the G − 1 other samples of the
same prompt (they are Monte-Carlo rollouts from the prompt; leave-one-out keeps the estimate
independent of the response itself). A boundary without a value (NaN) is skipped: its two steps
share one advantage. ``normalize`` divides by the batch's std of per-token advantages.

With ``tree: true`` the continuations join the group as responses of their own, branching again for
``depth`` levels (TreeRL, seeds 002:1; :mod:`rlvr.collect.tree`): the same formula then credits every
leaf, with each node's value the mean reward of the leaves below it.
"""

from __future__ import annotations

import math

import torch

from rlvr.algo.advantages import ADVANTAGE_ESTIMATORS, group_count, group_mean


@ADVANTAGE_ESTIMATORS.register("vine")
def vine_advantages(
    rewards: torch.Tensor,
    group_index: torch.Tensor,
    lengths: torch.Tensor,
    mc_values: list[list[float]],
    mc_ends: list[list[int]],
    samples: int = 4,
    max_steps: int = 8,
    split: str = "separator",
    tree: bool = False,
    depth: int = 1,
    normalize: bool = False,
    eps: float = 1e-6,
) -> torch.Tensor:
    """Step advantages [N, T] (module docstring). ``samples``, ``max_steps``, ``split``, ``tree`` and
    ``depth`` are the collector's (continuations per boundary, most steps valued per response, where
    the boundaries are: ``separator`` or ``uncertain``, rlvr.collect.vine; whether the continuations
    join the group as a tree, and its levels, rlvr.collect.tree); they are read there."""
    if split not in ("separator", "uncertain"):
        raise ValueError(f"vine: split must be 'separator' or 'uncertain', not {split!r}")
    if depth < 1 or (depth > 1 and not tree):
        raise ValueError(f"vine: depth must be at least 1, and above 1 only with tree: true (got {depth})")
    del samples, max_steps, tree, depth
    n = rewards.shape[0]
    width = int(lengths.max()) if n else 0
    count = group_count(rewards, group_index)
    others = (group_mean(rewards, group_index) * count - rewards) / (count - 1).clamp(min=1)
    start_values = torch.where(count > 1, others, rewards)  # alone in its group: no estimate, A = 0
    out = torch.zeros(n, width)
    for row in range(n):
        length = int(lengths[row])
        points = [(-1, float(start_values[row]))]
        for end, value in zip(mc_ends[row], mc_values[row], strict=True):
            if not math.isnan(value) and points[-1][0] < end < length - 1:
                points.append((end, value))
        points.append((length - 1, float(rewards[row])))
        for (before, v_before), (end, v_end) in zip(points, points[1:], strict=False):
            out[row, before + 1 : end + 1] = v_end - v_before
    if normalize and n:
        mask = torch.arange(width)[None, :] < lengths[:, None]
        std = out[mask].std() if int(mask.sum()) > 1 else torch.tensor(0.0)
        out = torch.where(std > 0, out / (std + eps), out)
    return out
