"""Per-token logprobs of completion tokens under a model (the trainer's side of the ratio).

Two paths compute the same numbers:

- :func:`completion_logprobs` (the fast one) runs each prompt once, repeats its key/value cache for
  the group's G completions, and runs only completion tokens on top. Autograd flows through the
  repeated cache, so the prompt's activations and gradients are computed once per group instead
  of G times. Only positions that predict completion tokens go through the LM head.
- :func:`completion_logprobs_simple` runs every (prompt + completion) sequence in full and scores
  it with a plain log-softmax. It is the reference the fast path is tested against.

The fast path scores logits with :func:`rlvr.train.token_logprobs.token_logprobs` (row chunks, one
exponential per element each way) unless the loss needs the entropy's gradient.
"""

from __future__ import annotations

import torch
from transformers import DynamicCache

from rlvr.train.batch import TrainBatch
from rlvr.train.token_logprobs import token_logprobs, token_logprobs_reference


def _token_logprobs(
    logits: torch.Tensor, targets: torch.Tensor, temperature: float, with_entropy: bool | str
) -> tuple[torch.Tensor, torch.Tensor | None]:
    if with_entropy == "grad":
        return token_logprobs_reference(logits, targets, temperature, with_entropy)
    return token_logprobs(logits, targets, temperature, bool(with_entropy))


def completion_logprobs(
    model: torch.nn.Module,
    batch: TrainBatch,
    temperature: float = 1.0,
    with_entropy: bool | str = False,
    with_hidden: bool = False,
    plain_scoring: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Logprobs [B, T] of ``batch.completion_ids`` and, if asked, per-token entropy [B, T]
    (detached for ``with_entropy=True``, differentiable for ``with_entropy="grad"``).
    ``with_hidden`` appends a third result: the final hidden states [B, T, H] at the positions that
    predict each completion token (a value head's input). ``plain_scoring`` scores one concatenated
    [B, T, V] logit tensor with a full log-softmax, as before the chunked scoring (for benchmarks)."""
    prompt_positions = (batch.prompt_mask.cumsum(-1) - 1).clamp(min=0)
    cache = DynamicCache()
    prompt_out = model(
        input_ids=batch.prompt_ids,
        attention_mask=batch.prompt_mask,
        position_ids=prompt_positions,
        past_key_values=cache,
        use_cache=True,
        logits_to_keep=1,
        output_hidden_states=with_hidden,
    )
    first_logits = prompt_out.logits[:, -1][batch.group_index]  # predicts completion token 0
    hidden = [prompt_out.hidden_states[-1][:, -1:][batch.group_index]] if with_hidden else []
    width = batch.completion_width
    if width == 1:
        logits = first_logits[:, None]
    else:
        cache = prompt_out.past_key_values
        cache.batch_select_indices(batch.group_index)  # indexing is differentiable: grads sum per prompt
        mask = torch.cat([batch.prompt_mask[batch.group_index], batch.completion_mask[:, :-1].long()], dim=1)
        start = batch.prompt_mask.sum(-1)[batch.group_index]
        positions = start[:, None] + torch.arange(width - 1, device=start.device)[None, :]
        out = model(
            input_ids=batch.completion_ids[:, :-1],
            attention_mask=mask,
            position_ids=positions,
            past_key_values=cache,
            use_cache=True,
            output_hidden_states=with_hidden,
        )
        hidden += [out.hidden_states[-1]] if with_hidden else []
        if plain_scoring:
            logits = torch.cat([first_logits[:, None], out.logits], dim=1)
            result = token_logprobs_reference(logits, batch.completion_ids, temperature, with_entropy)
            return (*result, torch.cat(hidden, dim=1)) if with_hidden else result
        # The first token's logits and the rest are scored apart: concatenating them would copy the
        # whole [B, T, V] logit tensor; only the [B, T] results are joined.
        first = _token_logprobs(first_logits[:, None], batch.completion_ids[:, :1], temperature, with_entropy)
        rest = _token_logprobs(out.logits, batch.completion_ids[:, 1:], temperature, with_entropy)
        result = tuple(
            torch.cat([a, b], dim=1) if a is not None else None for a, b in zip(first, rest, strict=True)
        )
        return (*result, torch.cat(hidden, dim=1)) if with_hidden else result
    result = _token_logprobs(logits, batch.completion_ids, temperature, with_entropy)
    return (*result, torch.cat(hidden, dim=1)) if with_hidden else result


def completion_logprobs_simple(
    model: torch.nn.Module, batch: TrainBatch, temperature: float = 1.0, with_entropy: bool | str = False
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Same result as :func:`completion_logprobs`, one full sequence per completion (reference path)."""
    prompt_ids = batch.prompt_ids[batch.group_index]
    prompt_mask = batch.prompt_mask[batch.group_index]
    input_ids = torch.cat([prompt_ids, batch.completion_ids], dim=1)
    mask = torch.cat([prompt_mask, batch.completion_mask.long()], dim=1)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    width = batch.completion_width
    out = model(
        input_ids=input_ids,
        attention_mask=mask,
        position_ids=positions,
        use_cache=False,
        logits_to_keep=width + 1,
    )
    return token_logprobs_reference(out.logits[:, :-1], batch.completion_ids, temperature, with_entropy)
