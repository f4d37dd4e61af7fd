"""Sequence packing for SFT: several examples in one row, each attending only to itself.

Padding a batch of demonstrations to its longest wastes the compute of every pad token; packing
puts examples end to end in rows of at most ``max_length`` tokens instead. Each example's
``position_ids`` restart at 0, and the model is run with *no* attention mask: transformers (5.x,
``masking_utils.find_packed_sequence_indices``) then reads the restarts as sequence boundaries and
builds a block-diagonal causal mask, for the sdpa and eager attentions alike (and rlvr's
``rlvr_sdpa``, which shares sdpa's mask). tests/test_sft_packing.py checks that packed logprobs and
gradients equal those of each example run alone, and that no example sees another's tokens; it is
what fails if a transformers upgrade stops building that mask.

An example is ``(token_ids, mask)``: ``mask[j]`` weights token ``j`` as a target (predicted from
the tokens before it), so ``mask[0]`` must be 0 (nothing predicts an example's first token). A
trajectory's is :func:`trajectory_example`. Logprobs come back aligned the same way: ``logprobs[j]``
is log p(token j | the example's tokens before it), 0 at each example's first token.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from rlvr.errors import RlvrError
from rlvr.train.learn.token_logprobs import token_logprobs
from rlvr.trajectory import Trajectory

Example = tuple[list[int], list[float]]


@dataclass
class PackedRow:
    """Examples end to end: ``input_ids``, ``position_ids`` (restarting at 0 per example), ``mask``
    (the examples' target weights, aligned to ``input_ids``), ``examples`` (their indices in the
    input) and ``spans`` (each one's ``(start, end)`` in the row)."""

    input_ids: list[int] = field(default_factory=list)
    position_ids: list[int] = field(default_factory=list)
    mask: list[float] = field(default_factory=list)
    examples: list[int] = field(default_factory=list)
    spans: list[tuple[int, int]] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.input_ids)

    def add(self, index: int, example: Example) -> None:
        ids, mask = example
        start = len(self.input_ids)
        self.input_ids += ids
        self.position_ids += range(len(ids))
        self.mask += mask
        self.examples.append(index)
        self.spans.append((start, start + len(ids)))


def trajectory_example(trajectory: Trajectory) -> Example:
    """A trajectory's ledger as an example: its prompt and response tokens, trained where its loss
    mask says."""
    return (
        trajectory.prompt_ids + trajectory.response_ids,
        [0.0] * len(trajectory.prompt_ids) + trajectory.loss_mask,
    )


def pack(examples: Sequence[Example], max_length: int) -> list[PackedRow]:
    """Pack ``examples`` into rows of at most ``max_length`` tokens by *best-fit decreasing*: longest
    first (ties in input order), each into the row it fills most tightly, a new row when none has room.

    That wastes less of each row than filling rows in input order; the input order is not kept (a
    row's ``examples`` say where each came from, and the loss is a token mean, which order does not
    change). Deterministic. An example longer than ``max_length`` is an :class:`RlvrError`.
    """
    if max_length < 1:
        raise ValueError(f"max_length must be positive, not {max_length}")
    for index, (ids, mask) in enumerate(examples):
        if len(ids) != len(mask):
            raise ValueError(f"example {index}: {len(ids)} tokens but {len(mask)} mask values")
        if not ids:
            raise ValueError(f"example {index} has no tokens")
        if mask[0]:
            raise ValueError(
                f"example {index}: mask[0] is set, but nothing predicts an example's first token"
            )
        if len(ids) > max_length:
            raise RlvrError(
                f"example {index} is {len(ids):,} tokens, longer than the packing length {max_length:,}: "
                "drop or shorten it, or raise the length"
            )
    rows: list[PackedRow] = []
    free: list[tuple[int, int]] = []  # (room left, row number), sorted: the tightest fit is found by bisect
    for index in sorted(range(len(examples)), key=lambda i: (-len(examples[i][0]), i)):
        size = len(examples[index][0])
        at = bisect.bisect_left(free, (size, -1))
        if at == len(free):
            rows.append(PackedRow())
            room, number = max_length, len(rows) - 1
        else:
            room, number = free.pop(at)
        rows[number].add(index, examples[index])
        if room - size > 0:
            bisect.insort(free, (room - size, number))
    return rows


def _row_tensors(rows: Sequence[PackedRow], device: torch.device) -> tuple[torch.Tensor, ...]:
    """[R, L] ids, positions, masks and example starts; shorter rows end in pad tokens that form a
    block of their own (positions from 0, mask 0), so they change nothing before them."""
    width = max(len(r) for r in rows)
    ids = torch.zeros(len(rows), width, dtype=torch.long)
    positions = torch.zeros(len(rows), width, dtype=torch.long)
    mask = torch.zeros(len(rows), width)
    starts = torch.zeros(len(rows), width, dtype=torch.bool)
    for k, row in enumerate(rows):
        n = len(row)
        ids[k, :n] = torch.tensor(row.input_ids)
        positions[k, :n] = torch.tensor(row.position_ids)
        positions[k, n:] = torch.arange(width - n)
        mask[k, :n] = torch.tensor(row.mask, dtype=torch.float32)
        starts[k, [s for s, _ in row.spans]] = True
        starts[k, n:] = True
    return ids.to(device), positions.to(device), mask.to(device), starts.to(device)


def _next_token_logprobs(logits: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """[B, L] log p(ids[:, j] | before), 0 at j = 0: the log-softmax of the logits one position back."""
    lp = torch.log_softmax(logits[:, :-1].float(), dim=-1).gather(-1, ids[:, 1:, None]).squeeze(-1)
    return torch.nn.functional.pad(lp, (1, 0))


def packed_token_logprobs(
    model: torch.nn.Module, rows: Sequence[PackedRow]
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(logprobs, mask)``, both [R, L] float32, of packed ``rows`` in one forward pass: position ids
    restart per example and no attention mask is given, so transformers builds the block-diagonal
    causal mask (module docstring). Logprobs are computed at the trained tokens only (mask 1); the
    others, a token across a boundary (an example's first, predicted from the previous example) and
    pads are 0 with mask 0.

    The LM head runs only at the positions that predict a trained token: in a multi-turn
    demonstration most tokens are context (a game's board, a tool's output), and the head's
    [tokens, vocabulary] product and its log-softmax (V = 49,152 for SmolLM2) cost about a fifth of
    the forward pass and most of its memory when taken at every position."""
    device = next(model.parameters()).device
    ids, positions, mask, starts = _row_tensors(rows, device)
    mask = mask.masked_fill(starts, 0.0)
    split = _body_and_head(model)
    if split is None:  # a model whose logits are not head(hidden): every position, as before
        logits = model(input_ids=ids, position_ids=positions, use_cache=False).logits
        return _next_token_logprobs(logits, ids).masked_fill(mask == 0, 0.0), mask
    body, head = split
    hidden = body(input_ids=ids, position_ids=positions, use_cache=False).last_hidden_state
    row, col = (mask[:, 1:] > 0).nonzero(as_tuple=True)  # hidden state at col predicts token col + 1
    chosen, _ = token_logprobs(head(hidden[row, col]), ids[row, col + 1], 1.0, False)
    logprobs = torch.zeros(mask.shape, dtype=torch.float32, device=device)
    return logprobs.index_put((row, col + 1), chosen), mask


def _body_and_head(model: torch.nn.Module) -> tuple[torch.nn.Module, torch.nn.Module] | None:
    """(the decoder that returns hidden states, the LM head) of a causal LM whose logits are exactly
    ``head(hidden)``; None for anything else (a wrapper, softcapped or scaled logits)."""
    config = getattr(model, "config", None)
    inner = getattr(model, getattr(model, "base_model_prefix", "") or "model", None)
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if config is None or inner is None or inner is model or not isinstance(head, torch.nn.Linear):
        return None
    if getattr(config, "final_logit_softcapping", None) or getattr(config, "logit_scale", None) not in (
        None,
        1.0,
    ):
        return None
    return inner, head


def unpacked_token_logprobs(
    model: torch.nn.Module, examples: Sequence[Example]
) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """The reference: each example run alone (no padding, no packing); per example ``[n]`` logprobs
    (0 at the first token) and its mask."""
    device = next(model.parameters()).device
    logprobs, masks = [], []
    for ids, mask in examples:
        tokens = torch.tensor([ids], device=device)
        logits = model(input_ids=tokens, use_cache=False).logits
        logprobs.append(_next_token_logprobs(logits, tokens)[0])
        masks.append(torch.tensor(mask, dtype=torch.float32, device=device))
    return logprobs, masks


def per_example(values: torch.Tensor, rows: Sequence[PackedRow]) -> dict[int, torch.Tensor]:
    """Split [R, L] values of packed rows back into each example's ``[n]``, keyed by its input index."""
    return {
        index: values[k, s:e] for k, row in enumerate(rows) for index, (s, e) in zip(row.examples, row.spans)
    }


def sft_loss(logprobs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The SFT cross-entropy: minus the mean logprob over all trained tokens (sum over every token of
    every example, divided by their count), so a long example weighs by its tokens, the same
    whether examples are packed, padded or run alone. 0 (with a gradient path) when none is trained."""
    return -(logprobs * mask).sum() / mask.sum().clamp(min=1.0)
