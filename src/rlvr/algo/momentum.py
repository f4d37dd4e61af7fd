"""AAPO: group-relative advantages plus a clipped margin over a moving reference reward.

GRPO's advantage vanishes when a group's rewards are (nearly) equal, and with it the update,
even when the policy is doing better (or worse) on that prompt than it used to. AAPO
(Advantage-Augmented Policy Optimization; seeds 003:199, 003:200) adds to each sample's group
advantage a *momentum* term: how far its reward lies above a reference reward, clipped, and
trains with the cross-entropy (plain policy-gradient) loss.

The reference here is the policy's own past, kept as estimator state across steps: for a prompt
seen before, a moving average of its earlier groups' mean rewards; for a new prompt, a moving
average of earlier batches' mean rewards; on the very first step there is none and the margin is
0. The state is a plain dict the trainer keeps, offers as ``estimator_state`` and checkpoints, so
``--resume`` continues with the same references.
"""

from __future__ import annotations

from typing import Any

import torch

from rlvr.algo.advantages import ADVANTAGE_ESTIMATORS, grpo_advantages


def reference_rewards(example_ids: list[str], state: dict[str, Any]) -> list[float | None]:
    """Each row's reference reward from ``state``: its prompt's, else the batch-level one, else None."""
    prompts: dict[str, float] = state.get("prompts", {})
    batch = state.get("batch")
    return [prompts.get(example_id, batch) for example_id in example_ids]


def update_references(
    rewards: torch.Tensor,
    group_index: torch.Tensor,
    example_ids: list[str],
    state: dict[str, Any],
    momentum: float,
) -> None:
    """Move the references in ``state`` (in place) towards this batch: each prompt's towards its
    group's mean reward, the batch-level one towards the batch's mean; a first value is taken as is."""

    def moved(old: float | None, new: float) -> float:
        return new if old is None else momentum * old + (1.0 - momentum) * new

    prompts: dict[str, float] = state.setdefault("prompts", {})
    values = rewards.tolist()
    by_group: dict[int, list[float]] = {}
    first_id: dict[int, str] = {}
    for value, group, example_id in zip(values, group_index.tolist(), example_ids, strict=True):
        by_group.setdefault(group, []).append(value)
        first_id.setdefault(group, example_id)
    for group in sorted(by_group):  # a prompt sampled twice in one batch moves twice, in order
        example_id = first_id[group]
        prompts[example_id] = moved(prompts.get(example_id), sum(by_group[group]) / len(by_group[group]))
    if values:
        state["batch"] = moved(state.get("batch"), sum(values) / len(values))


@ADVANTAGE_ESTIMATORS.register("aapo")
def aapo_advantages(
    rewards: torch.Tensor,
    group_index: torch.Tensor,
    example_ids: list[str],
    estimator_state: dict[str, Any],
    momentum: float = 0.9,
    margin_low: float = 0.2,
    margin_high: float = 0.28,
    normalize_std: bool = True,
    eps: float = 1e-6,
) -> torch.Tensor:
    """AAPO (seeds 003:200): ``grpo(r)_i + clip(r_i − ref_i, −margin_low, margin_high)``.

    ``example_ids`` [N] names each row's prompt; ``ref_i`` is its reference reward read from
    ``estimator_state`` (:func:`reference_rewards`; none yet: margin 0). After computing the
    advantages the estimator moves the references by ``momentum`` (:func:`update_references`):
    this is the one estimator with state, and it updates ``estimator_state`` in place. The clip
    range (−0.2, 0.28) is a choice (DAPO's asymmetric widths; the abstract gives none). A group
    whose rewards are all equal still gets the margin: positive where the prompt is now solved more
    often than it used to be, negative where less.
    """
    if not 0.0 <= momentum < 1.0:
        raise ValueError(f"aapo: momentum must lie in [0, 1), got {momentum}")
    if margin_low < 0 or margin_high < 0:
        raise ValueError(f"aapo: margin_low and margin_high must be >= 0, got {margin_low}, {margin_high}")
    if len(example_ids) != rewards.shape[0]:
        raise ValueError(f"aapo: {len(example_ids)} example_ids for {rewards.shape[0]} rewards")
    advantages = grpo_advantages(rewards, group_index, normalize_std, eps)
    refs = reference_rewards(example_ids, estimator_state)
    known = torch.tensor([r is not None for r in refs], dtype=torch.bool, device=rewards.device)
    reference = torch.tensor(
        [0.0 if r is None else r for r in refs], dtype=rewards.dtype, device=rewards.device
    )
    margin = (rewards - reference).clamp(-margin_low, margin_high)
    advantages = advantages + torch.where(known, margin, torch.zeros_like(margin))
    update_references(rewards, group_index, example_ids, estimator_state, momentum)
    return advantages
