"""Lay scored groups out as tensors for the training forward pass.

The G completions of a group share one prompt, so the batch stores each prompt once
(``prompt_ids``, left-padded) and maps completion rows to their prompt with ``group_index``.
The forward pass encodes each prompt once and reuses its keys/values for all its completions
(see :mod:`rlvr.train.learn.logprobs`), in the forward and the backward pass.

A row's completion is its trajectory's response ledger (:mod:`rlvr.trajectory`): sampled tokens
and context tokens (an environment's answer) in order. Every one of them is attended to
(``completion_attention``); only sampled ones are trained on (``completion_mask``). For a
single-turn completion the two masks are equal.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import torch

from rlvr.rollout import Completion
from rlvr.trajectory import Trajectory
from rlvr.vision.prompt import vision_of


@dataclass
class TrainBatch:
    prompt_ids: torch.Tensor  # [P, Lp] left-padded
    prompt_mask: torch.Tensor  # [P, Lp]
    group_index: torch.Tensor  # [B] row of prompt_ids each completion continues
    completion_ids: torch.Tensor  # [B, T] right-padded
    completion_mask: torch.Tensor  # [B, T] float, 1 on tokens that are trained on (sampled ones)
    completion_attention: torch.Tensor  # [B, T] long, 1 on every response token (sampled or context)
    sampling_logprobs: torch.Tensor  # [B, T] logprobs from the rollout engine
    advantages: torch.Tensor  # [B] or [B, T]
    truncated: torch.Tensor  # [B] bool, the completion hit max_new_tokens
    returns: torch.Tensor | None = None  # [B, T] the critic's targets (when there is a critic)
    old_values: torch.Tensor | None = None  # [B, T] the critic's values at sampling time
    # [B, T] float, 1 on given tokens (a demonstration in a group: trained on, never sampled, so no
    # sampling logprob); None when no row has any
    given_mask: torch.Tensor | None = None
    # [B] bool, the row is a replayed past sample (rlvr.collect.replay): its sampling logprobs are an
    # older policy's, and the update weights it by the importance ratio; None when no row is
    replayed: torch.Tensor | None = None
    # per prompt row, its images (a rlvr.vision.prompt.VisionPrompt) or None; None when no prompt has
    # any. The forwards that encode the prompts pass them to the model (rlvr.vision.prompt.vision_kwargs)
    prompt_vision: list[Any] | None = None
    # per completion row, the images among its context tokens (multi-turn observations: an ImageSet)
    # or None; None when no row has any
    completion_vision: list[Any] | None = None

    def __len__(self) -> int:
        return self.completion_ids.shape[0]

    @property
    def completion_width(self) -> int:
        return self.completion_ids.shape[1]

    def select(self, rows: torch.Tensor | slice) -> TrainBatch:
        """Completion rows ``rows`` with only the prompts they use, trimmed of all-padding columns."""
        rows = torch.arange(len(self))[rows] if isinstance(rows, slice) else rows
        used, group_index = torch.unique(self.group_index[rows], return_inverse=True)
        prompt_mask = self.prompt_mask[used]
        left = int((prompt_mask.sum(0) == 0).sum())
        completion_mask = self.completion_mask[rows]
        width = int(completion_mask.sum(0).nonzero().max()) + 1 if completion_mask.any() else 1

        def per_row(t: torch.Tensor | None) -> torch.Tensor | None:  # [B] or [B, T] (trimmed), or None
            return t if t is None else t[rows] if t.dim() == 1 else t[rows][:, :width]

        return TrainBatch(
            prompt_ids=self.prompt_ids[used][:, left:],
            prompt_mask=prompt_mask[:, left:],
            group_index=group_index,
            completion_ids=self.completion_ids[rows][:, :width],
            completion_mask=completion_mask[:, :width],
            completion_attention=self.completion_attention[rows][:, :width],
            sampling_logprobs=self.sampling_logprobs[rows][:, :width],
            advantages=per_row(self.advantages),
            truncated=self.truncated[rows],
            returns=per_row(self.returns),
            old_values=per_row(self.old_values),
            given_mask=per_row(self.given_mask),
            replayed=per_row(self.replayed),
            prompt_vision=None
            if self.prompt_vision is None
            else [self.prompt_vision[i] for i in used.tolist()],
            completion_vision=None
            if self.completion_vision is None
            else [self.completion_vision[i] for i in rows.tolist()],
        )

    def to(self, device: torch.device | str) -> TrainBatch:
        lists = ("prompt_vision", "completion_vision")  # moved when collated
        moved = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in lists}
        moved = {k: v if v is None else v.to(device) for k, v in moved.items()}
        return TrainBatch(**moved, **{k: getattr(self, k) for k in lists})


def build_batch(
    groups: list[list[Completion]] | list[list[Trajectory]], advantages: list[float], pad_id: int
) -> TrainBatch:
    """One batch from groups of completions or trajectories (each group shares its prompt);
    advantages are flat, one per row."""
    rows = [
        [t if isinstance(t, Trajectory) else Trajectory.from_completion(t, -1, "", 0) for t in g]
        for g in groups
    ]
    prompts = [g[0].prompt_ids for g in rows]
    vision = [vision_of(p) for p in prompts]
    ledgers = [t for g in rows for t in g]
    responses_vision = [vision_of(t.response_vision) for t in ledgers]
    prompt_width = max(len(p) for p in prompts)
    responses = [t.response_ids for t in ledgers]
    width = max(max(len(r) for r in responses), 1)
    prompt_ids = torch.full((len(prompts), prompt_width), pad_id, dtype=torch.long)
    prompt_mask = torch.zeros((len(prompts), prompt_width), dtype=torch.long)
    for row, ids in enumerate(prompts):
        prompt_ids[row, prompt_width - len(ids) :] = torch.tensor(ids, dtype=torch.long)
        prompt_mask[row, prompt_width - len(ids) :] = 1
    completion_ids = torch.full((len(ledgers), width), pad_id, dtype=torch.long)
    completion_mask = torch.zeros((len(ledgers), width))
    completion_attention = torch.zeros((len(ledgers), width), dtype=torch.long)
    sampling_logprobs = torch.zeros((len(ledgers), width))
    given_mask = torch.zeros((len(ledgers), width)) if any(t.is_given for t in ledgers) else None
    for row, (t, ids) in enumerate(zip(ledgers, responses)):
        n = len(ids)
        completion_ids[row, :n] = torch.tensor(ids, dtype=torch.long)
        completion_mask[row, :n] = torch.tensor(t.loss_mask)
        completion_attention[row, :n] = 1
        sampling_logprobs[row, :n] = torch.tensor(t.sampling_logprobs)
        if given_mask is not None:
            given_mask[row, :n] = torch.tensor(t.given_mask)
    group_index = torch.arange(len(rows)).repeat_interleave(torch.tensor([len(g) for g in rows]))
    return TrainBatch(
        prompt_ids=prompt_ids,
        prompt_mask=prompt_mask,
        group_index=group_index,
        completion_ids=completion_ids,
        completion_mask=completion_mask,
        completion_attention=completion_attention,
        sampling_logprobs=sampling_logprobs,
        advantages=torch.tensor(advantages, dtype=torch.float32),
        truncated=torch.tensor([t.finish_reason == "length" for t in ledgers]),
        given_mask=given_mask,
        replayed=torch.tensor([t.replayed for t in ledgers]) if any(t.replayed for t in ledgers) else None,
        prompt_vision=vision if any(v is not None for v in vision) else None,
        completion_vision=responses_vision if any(v is not None for v in responses_vision) else None,
    )
