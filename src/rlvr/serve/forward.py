"""Logprobs of Tinker datums with rlvr's shared-prefix forward.

A Tinker datum is one whole sequence: inputs ``x[0..N)`` and a target ``y[i]`` for every position.
In an RL or SFT batch the loss lives on a tail of it (the completion: the first position with a
non-zero weight or advantage onwards) and the datums of a group share everything before it. When a
datum is teacher-forced over that tail (``y[i] == x[i+1]``), its tail is scored the way rlvr's
learner scores a completion (:func:`rlvr.train.learn.logprobs.completion_logprobs`): each distinct
prefix runs once, its key/value cache is repeated for the datums that continue it, and the LM head
runs on the tail only. The prefix positions' logprobs, which the client gets back but no loss term
can use (their weights are zero), come from one gradient-free pass per distinct prefix. Any other
datum is scored by a plain full-sequence forward.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import torch

from rlvr.serve.wire import Datum
from rlvr.train.learn.batch import TrainBatch
from rlvr.train.learn.logprobs import completion_logprobs
from rlvr.train.learn.token_logprobs import token_logprobs


def tail_start(datum: Datum, weight_key: str) -> int | None:
    """Where the datum's trained tail starts (its first non-zero ``weight_key`` entry, at most
    ``N - 1``), or None when it is not teacher-forced over that tail."""
    n = datum.tokens.size
    nonzero = np.flatnonzero(datum.inputs[weight_key])
    start = min(int(nonzero[0]) if nonzero.size else n - 1, n - 1)
    targets = datum.inputs["target_tokens"]
    if not np.array_equal(targets[start : n - 1], datum.tokens[start + 1 :]):
        return None
    return start


def _full(policy: torch.nn.Module, data: list[Datum]) -> list[torch.Tensor]:
    width = max(d.tokens.size for d in data)
    ids = torch.zeros((len(data), width), dtype=torch.long)
    targets = torch.zeros_like(ids)
    mask = torch.zeros_like(ids)
    for row, d in enumerate(data):
        n = d.tokens.size
        ids[row, :n] = torch.from_numpy(d.tokens.astype(np.int64))
        targets[row, :n] = torch.from_numpy(d.inputs["target_tokens"].astype(np.int64))
        mask[row, :n] = 1
    logits = policy(input_ids=ids, attention_mask=mask, use_cache=False).logits
    logprobs, _ = token_logprobs(logits, targets)
    return [logprobs[row, : d.tokens.size] for row, d in enumerate(data)]


def _shared(policy: torch.nn.Module, data: list[Datum], starts: list[int]) -> list[torch.Tensor]:
    prefixes: dict[bytes, int] = {}
    keys = [_prefix_key(d, s) for d, s in zip(data, starts)]
    firsts: list[int] = []
    for i, key in enumerate(keys):
        if key not in prefixes:
            prefixes[key] = len(firsts)
            firsts.append(i)
    group_index = torch.tensor([prefixes[k] for k in keys])
    prompt_width = max(starts[i] + 1 for i in firsts)
    prompt_ids = torch.zeros((len(firsts), prompt_width), dtype=torch.long)
    prompt_mask = torch.zeros_like(prompt_ids)
    for row, i in enumerate(firsts):
        prefix = torch.from_numpy(data[i].tokens[: starts[i] + 1].astype(np.int64))
        prompt_ids[row, prompt_width - prefix.numel() :] = prefix
        prompt_mask[row, prompt_width - prefix.numel() :] = 1
    width = max(d.tokens.size - s for d, s in zip(data, starts))
    completion_ids = torch.zeros((len(data), width), dtype=torch.long)
    attention = torch.zeros_like(completion_ids)
    for row, (d, s) in enumerate(zip(data, starts)):
        tail = d.inputs["target_tokens"][s:]
        completion_ids[row, : tail.size] = torch.from_numpy(tail.astype(np.int64))
        attention[row, : tail.size] = 1
    zeros = torch.zeros((len(data), width))
    batch = TrainBatch(
        prompt_ids=prompt_ids,
        prompt_mask=prompt_mask,
        group_index=group_index,
        completion_ids=completion_ids,
        completion_mask=attention.float(),
        completion_attention=attention,
        sampling_logprobs=zeros,
        advantages=torch.zeros(len(data)),
        truncated=torch.zeros(len(data), dtype=torch.bool),
    )
    tails, _ = completion_logprobs(policy, batch)
    heads = _prefix_logprobs(policy, data, starts, firsts, group_index)
    return [
        torch.cat([heads[row], tails[row, : d.tokens.size - s]])
        for row, (d, s) in enumerate(zip(data, starts))
    ]


@torch.no_grad()
def _prefix_logprobs(
    policy: torch.nn.Module,
    data: list[Datum],
    starts: list[int],
    firsts: list[int],
    group_index: torch.Tensor,
) -> list[torch.Tensor]:
    """Each datum's logprobs at its prefix positions ``[0, s)``: one pass per distinct prefix."""
    per_prefix = []
    for i in firsts:
        s = starts[i]
        if s == 0:
            per_prefix.append(None)
            continue
        ids = torch.from_numpy(data[i].tokens[:s].astype(np.int64))[None]
        per_prefix.append(torch.log_softmax(policy(input_ids=ids, use_cache=False).logits[0].float(), dim=-1))
    heads = []
    for row, (d, s) in enumerate(zip(data, starts)):
        table = per_prefix[int(group_index[row])]
        if table is None:
            heads.append(torch.zeros(0))
            continue
        targets = torch.from_numpy(d.inputs["target_tokens"][:s].astype(np.int64))
        heads.append(table.gather(-1, targets[:, None]).squeeze(-1))
    return heads


def _prefix_key(datum: Datum, start: int) -> bytes:
    """What the datums of one shared pass have in common: their inputs up to the tail's first."""
    return datum.tokens[: start + 1].tobytes()


def _score(policy: torch.nn.Module, data: list[Datum], starts: list[int | None]) -> list[torch.Tensor]:
    """Logprobs of ``data``: a datum with a ``start`` whose prefix another datum shares goes
    through the shared pass; the rest (no start, or a prefix of its own, which would only add a
    gradient-free pass over it) through the plain full forward."""
    counts = Counter(_prefix_key(d, s) for d, s in zip(data, starts) if s is not None)
    shared = [
        i for i, (d, s) in enumerate(zip(data, starts)) if s is not None and counts[_prefix_key(d, s)] > 1
    ]
    plain = sorted(set(range(len(data))) - set(shared))
    out: list[torch.Tensor] = [torch.zeros(0)] * len(data)
    if shared:
        for i, lp in zip(shared, _shared(policy, [data[i] for i in shared], [starts[i] for i in shared])):
            out[i] = lp
    if plain:
        for i, lp in zip(plain, _full(policy, [data[i] for i in plain])):
            out[i] = lp
    return out


def datum_logprobs(policy: torch.nn.Module, data: list[Datum], weight_key: str) -> list[torch.Tensor]:
    """Each datum's logprob of its target at every position [N], with gradient where the loss can
    reach (its tail; everywhere for datums scored by the full forward; nowhere for a datum whose
    weights or advantages are all zero, which adds nothing to the loss or its gradient)."""
    inert = [i for i, d in enumerate(data) if not np.any(d.inputs[weight_key])]
    live = sorted(set(range(len(data))) - set(inert))
    out: list[torch.Tensor] = [torch.zeros(0)] * len(data)
    if inert:  # no loss term can reach them: their logprobs need no graph, and an RL datum's
        # sampled tail (where the sampler's logprobs are) shares its prompt's pass with its group
        rows = [data[i] for i in inert]
        with torch.no_grad():
            starts = [tail_start(d, "logprobs") if "logprobs" in d.inputs else None for d in rows]
            for i, lp in zip(inert, _score(policy, rows, starts)):
                out[i] = lp
    if live:
        rows = [data[i] for i in live]
        for i, lp in zip(live, _score(policy, rows, [tail_start(d, weight_key) for d in rows])):
            out[i] = lp
    return out
