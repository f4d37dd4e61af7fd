"""C3PO's token budget: each update trains on at most a fixed number of completion tokens.

C3PO (Constrained Contextual Computation Policy Optimization, the RL method of Ring-lite; seeds
003:357, 003:358) is introduced for an MoE model, against "optimization instability during RL
training", and "enhances training stability and improves computational throughput via
algorithm-system co-design". The abstract names no routing mechanism: what it constrains is the
*computation* of an update, and that applies to a dense model as much as to an MoE one. Here it is
a per-update token budget:

- The batch's groups are taken in batch order, whole (a group's baseline needs all of its
  members), and a group is kept while the kept groups' completion tokens (``lengths``) stay within
  ``token_budget``; a group that would overflow it is skipped and later, smaller ones may still
  fit (first fit). The kept rows get GRPO's advantage, the others 0, so every update's gradient
  comes from at most ``token_budget`` tokens whatever the completions' lengths were.
- With an aggregation whose normaliser is a constant (``loss_agg: seq-mean-token-sum-norm``, as the
  preset uses) the size of an update then no longer swings with the sampled lengths, the
  instability a varying token count brings to a token-level loss.

What is not built, and why: the throughput half. Rows with advantage 0 still go through the
trainer's forward and backward passes (the learner does not drop them; that would be a change to
``rlvr.train.learn``), and Ring-lite's system side (packing a fixed token count per device, how
left-over samples are reused) is not in the abstract. Skipped groups are dropped, not carried to the
next step. The order is the batch's (not shortest first), so the budget does not prefer short
answers beyond the fact that a long group is the one more likely to overflow it. If no group fits,
the update gets all-zero advantages.
"""

from __future__ import annotations

import torch

from rlvr.algo.advantages import ADVANTAGE_ESTIMATORS, grpo_advantages


def budget_rows(lengths: torch.Tensor, group_index: torch.Tensor, token_budget: int) -> torch.Tensor:
    """[N] bool: the rows of the groups kept, first fit in order of first appearance, within
    ``token_budget`` completion tokens in all."""
    if isinstance(token_budget, bool) or not isinstance(token_budget, int) or token_budget < 1:
        raise ValueError(f"c3po: token_budget must be a positive integer, got {token_budget!r}")
    if lengths.shape != group_index.shape:
        raise ValueError(f"c3po: {lengths.shape[0]} lengths for {group_index.shape[0]} rows")
    tokens: dict[int, int] = {}
    for group, length in zip(group_index.tolist(), lengths.tolist(), strict=True):
        tokens[group] = tokens.get(group, 0) + int(length)
    used, kept = 0, set()
    for group, count in tokens.items():  # dicts keep insertion order: first appearance in the batch
        if used + count <= token_budget:
            kept.add(group)
            used += count
    return torch.tensor([g in kept for g in group_index.tolist()], dtype=torch.bool, device=lengths.device)


@ADVANTAGE_ESTIMATORS.register("c3po")
def c3po_advantages(
    rewards: torch.Tensor,
    group_index: torch.Tensor,
    lengths: torch.Tensor,
    token_budget: int | None = None,
    normalize_std: bool = True,
    eps: float = 1e-6,
) -> torch.Tensor:
    """C3PO (seeds 003:357): GRPO's advantages on the groups that fit ``token_budget`` completion
    tokens (:func:`budget_rows`), 0 on the others; see the module docstring."""
    if token_budget is None:
        raise ValueError("c3po: token_budget is required (completion tokens per update)")
    keep = budget_rows(lengths, group_index, token_budget)
    advantages = grpo_advantages(rewards, group_index, normalize_std, eps)
    return torch.where(keep, advantages, torch.zeros_like(advantages))
