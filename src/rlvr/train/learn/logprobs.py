"""Per-token logprobs of completion tokens under a model (the trainer's side of the ratio).

Two paths compute the same numbers:

- :func:`completion_logprobs` (the fast one) runs each prompt once, repeats its key/value cache for
  the group's G completions, and runs only completion tokens (and the prompt's last token) on top.
  Autograd flows through the repeated cache, so the prompt's activations and gradients are
  computed once per group instead of G times. Only positions that predict completion tokens go
  through the LM head, in one product.
- :func:`completion_logprobs_simple` runs every (prompt + completion) sequence in full and scores
  it with a plain log-softmax. It is the reference the fast path is tested against.

The fast path scores logits with :func:`rlvr.train.learn.token_logprobs.token_logprobs` (row chunks, one
exponential per element each way) unless the loss needs the entropy's gradient.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import DynamicCache

from rlvr.models.prefix import MIN_SHARED_PREFIX, common_prefix_length
from rlvr.train.learn.batch import TrainBatch
from rlvr.train.learn.packing import (
    PackedRows,
    completion_lengths,
    mask_kind,
    pack_rows,
    packed_layout,
    segment_mask,
    unpack,
)
from rlvr.train.learn.token_logprobs import token_logprobs, token_logprobs_reference
from rlvr.vision.positions import text_positions, uses_mrope, vision_positions
from rlvr.vision.prompt import check_images_reach, merge_images, vision_kwargs


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
    packing: bool = True,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Logprobs [B, T] of ``batch.completion_ids`` and, if asked, per-token entropy [B, T]
    (detached for ``with_entropy=True``, differentiable for ``with_entropy="grad"``).
    ``with_hidden`` appends a third result: the final hidden states [B, T, H] at the positions that
    predict each completion token (a value head's input). ``plain_scoring`` scores the [B, T, V]
    logits with a full log-softmax, as before the chunked scoring (for benchmarks). ``packing``
    encodes a prefix common to all prompts once (:func:`shared_prefix_length`) and lets the
    completions of a prompt share rows where that removes padding (:mod:`rlvr.train.learn.packing`);
    values at padding positions are then 0."""
    # Prompts are left-padded, so every prompt's last token is in the last column. The prompt minus
    # that token runs once per group and its key/value cache is repeated for the group's completions;
    # the last prompt token then runs with each completion, so that one forward gives the logits of
    # all T completion tokens and one LM-head product scores them (the last token's work is repeated
    # G times: one token per completion).
    index = batch.group_index
    prompt_mask = batch.prompt_mask
    positions = (prompt_mask.cumsum(-1) - 1).clamp(min=0)
    # a VLM's prompt images go into the prompt's pass (images never end a prompt: its template does)
    vision = vision_kwargs(batch.prompt_vision or [], batch.prompt_ids.device)
    check_images_reach(model, batch.prompt_ids, vision, "the training forward")
    prompt_positions = vision_positions(model, batch.prompt_ids, prompt_mask, positions, vision)
    positions = text_positions(prompt_positions)
    pack = packing and not plain_scoring and packing_applies(model, batch)
    cache, cache_mask = _prompt_pass(model, batch, prompt_positions, vision, share_prefix=pack)
    width = batch.completion_width
    layout = _packing(model, batch) if pack else None
    if layout is not None:
        return _packed_forward(
            model, batch, layout, cache, cache_mask, positions, temperature, with_entropy, with_hidden
        )
    if cache is not None:
        cache.batch_select_indices(index)  # indexing is differentiable: grads sum per prompt
    past_mask = cache_mask[index]
    tail_ids = torch.cat([batch.prompt_ids[index, -1:], batch.completion_ids[:, :-1]], dim=1)
    # a multi-turn response's observation images go with the response's pass
    response_vision = response_kwargs(model, batch)
    check_images_reach(model, tail_ids, response_vision, "the training forward (the response)")
    out = model(
        input_ids=tail_ids,
        attention_mask=torch.cat(
            [past_mask, prompt_mask[index, -1:], batch.completion_attention[:, :-1]], dim=1
        ),
        position_ids=_response_positions(model, batch)
        if response_vision and uses_mrope(model)
        else positions[index, -1:] + torch.arange(width, device=positions.device)[None, :],
        past_key_values=cache,
        use_cache=cache is not None,
        output_hidden_states=with_hidden,
        **response_vision,
    )
    if plain_scoring:
        result = token_logprobs_reference(out.logits, batch.completion_ids, temperature, with_entropy)
    else:
        result = _token_logprobs(out.logits, batch.completion_ids, temperature, with_entropy)
    return (*result, out.hidden_states[-1]) if with_hidden else result


def packing_applies(model: torch.nn.Module, batch: TrainBatch) -> bool:
    """Whether the packed forward (a shared prefix, packed rows) can run ``batch`` through ``model``:
    text only, 1-D positions, an attention that takes a custom mask, ``algo.packing`` on."""
    text = batch.prompt_vision is None and batch.completion_vision is None
    return text and not uses_mrope(model) and mask_kind(model) is not None


def shared_prefix_length(batch: TrainBatch) -> int:
    """Tokens at the start of every prompt of ``batch`` that are the same in all of them (a system
    prompt, few-shot examples), leaving out each prompt's last token (the completion pass runs it);
    0 with fewer than two prompts."""
    if batch.prompt_ids.shape[0] < 2:
        return 0
    ids, mask = batch.prompt_ids.cpu(), batch.prompt_mask.cpu().bool()
    return common_prefix_length([row[keep].tolist()[:-1] for row, keep in zip(ids, mask)])


def _prompt_pass(
    model: torch.nn.Module,
    batch: TrainBatch,
    prompt_positions: torch.Tensor,
    vision: dict[str, torch.Tensor],
    share_prefix: bool,
) -> tuple[DynamicCache | None, torch.Tensor]:
    """The key/value cache of every prompt but its last token [P rows], and the mask of its columns.

    With ``share_prefix``, a prefix common to all prompts (``shared_prefix_length``) runs once as
    one row and its cache is repeated for the P prompts (autograd sums their gradients), then the
    rest of each prompt runs on top of it, left-padded: the cache's columns are the prefix, then
    padding, then each prompt's remainder. Otherwise the left-padded prompts run as they are."""
    prompt_mask = batch.prompt_mask
    shared = shared_prefix_length(batch) if share_prefix else 0
    if shared == 0 or shared < MIN_SHARED_PREFIX:
        if batch.prompt_ids.shape[1] <= 1:
            return None, prompt_mask[:, :0]
        cache = DynamicCache()
        model(
            input_ids=batch.prompt_ids[:, :-1],
            attention_mask=prompt_mask[:, :-1],
            position_ids=prompt_positions[..., :-1],
            past_key_values=cache,
            use_cache=True,
            logits_to_keep=1,  # unused: no gradient reaches it
            **vision,
        )
        return cache, prompt_mask[:, :-1]
    device, prompts = batch.prompt_ids.device, batch.prompt_ids.shape[0]
    real = [ids[mask.bool()] for ids, mask in zip(batch.prompt_ids, prompt_mask)]
    cache = DynamicCache()
    model(
        input_ids=real[0][None, :shared],
        position_ids=torch.arange(shared, device=device)[None],
        past_key_values=cache,
        use_cache=True,
        logits_to_keep=1,
    )
    cache.batch_repeat_interleave(prompts)
    rest = [ids[shared:-1] for ids in real]
    width = max(len(r) for r in rest)
    prefix_mask = prompt_mask.new_ones((prompts, shared))
    if width == 0:
        return cache, prefix_mask
    rest_ids = batch.prompt_ids.new_zeros((prompts, width))
    rest_mask = prompt_mask.new_zeros((prompts, width))
    for row, ids in enumerate(rest):
        if len(ids):
            rest_ids[row, width - len(ids) :] = ids
            rest_mask[row, width - len(ids) :] = 1
    cache_mask = torch.cat([prefix_mask, rest_mask], dim=1)
    model(
        input_ids=rest_ids,
        attention_mask=cache_mask,
        position_ids=shared + (rest_mask.cumsum(-1) - 1).clamp(min=0),
        past_key_values=cache,
        use_cache=True,
        logits_to_keep=1,
    )
    return cache, cache_mask


def _packing(model: torch.nn.Module, batch: TrainBatch) -> PackedRows | None:
    """The packed layout of ``batch`` when packing applies and saves rows, else None."""
    lengths = completion_lengths(batch.completion_attention)
    if lengths is None:
        return None
    groups, bins = pack_rows(batch.group_index.cpu(), lengths.cpu(), batch.completion_width)
    if len(bins) >= len(batch):
        return None
    return packed_layout(batch, lengths.cpu(), groups, bins)


def _packed_forward(
    model: torch.nn.Module,
    batch: TrainBatch,
    layout: PackedRows,
    cache: DynamicCache | None,
    cache_mask: torch.Tensor,
    positions: torch.Tensor,
    temperature: float,
    with_entropy: bool | str,
    with_hidden: bool,
) -> tuple[torch.Tensor, ...]:
    """The completion pass over packed rows (the prompt pass has filled ``cache``), scattered back."""
    device = batch.completion_ids.device
    group = layout.group.to(device)
    if cache is not None:
        cache.batch_select_indices(group)  # one copy of the prompt's cache per packed row
    past_mask = cache_mask[group]
    dtype = next(model.parameters()).dtype
    mask = segment_mask(layout, past_mask.cpu(), mask_kind(model), dtype).to(device)
    out = model(
        input_ids=layout.input_ids.to(device),
        attention_mask=mask,
        position_ids=positions[group, -1:] + layout.offsets.to(device),
        past_key_values=cache,
        use_cache=cache is not None,
        output_hidden_states=with_hidden,
    )
    logprobs, entropy = _token_logprobs(out.logits, layout.targets.to(device), temperature, with_entropy)
    rows, width = len(batch), batch.completion_width
    result = (
        unpack(logprobs, layout, rows, width),
        None if entropy is None else unpack(entropy, layout, rows, width),
    )
    return (*result, unpack(out.hidden_states[-1], layout, rows, width)) if with_hidden else result


def response_kwargs(model: torch.nn.Module, batch: TrainBatch) -> dict[str, torch.Tensor]:
    """The model keyword arguments of the completion rows' own images (multi-turn observations)."""
    if batch.completion_vision is None:
        return {}
    return vision_kwargs(batch.completion_vision, batch.completion_ids.device)


def _row_sequences(batch: TrainBatch) -> tuple[torch.Tensor, torch.Tensor, list[Any]]:
    """Each completion row's whole sequence (its prompt, then its response), the mask of it, and
    the row's images in order (its prompt's, then its response's)."""
    index = batch.group_index
    input_ids = torch.cat([batch.prompt_ids[index], batch.completion_ids], dim=1)
    mask = torch.cat([batch.prompt_mask[index], batch.completion_attention], dim=1)
    rows = []
    for row, prompt in enumerate(index.tolist()):
        parts = [batch.prompt_vision[prompt] if batch.prompt_vision is not None else None]
        parts.append(batch.completion_vision[row] if batch.completion_vision is not None else None)
        rows.append(merge_images(parts))
    return input_ids, mask, rows


def _response_positions(model: torch.nn.Module, batch: TrainBatch) -> torch.Tensor:
    """3-D positions [3, B, T] of the response pass (the last prompt token and the completion but
    its last token) of an M-RoPE model whose responses hold images: the model's own positions of
    each row's whole sequence, where an image advances the positions less than its token count."""
    input_ids, mask, rows = _row_sequences(batch)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    full = vision_positions(model, input_ids, mask, positions, vision_kwargs(rows, input_ids.device))
    start = batch.prompt_ids.shape[1] - 1
    return full[..., start : start + batch.completion_width]


def completion_logprobs_simple(
    model: torch.nn.Module, batch: TrainBatch, temperature: float = 1.0, with_entropy: bool | str = False
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Same result as :func:`completion_logprobs`, one full sequence per completion (reference path)."""
    input_ids, mask, rows = _row_sequences(batch)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    vision = vision_kwargs(rows, input_ids.device)
    check_images_reach(model, input_ids, vision, "the training forward")
    width = batch.completion_width
    out = model(
        input_ids=input_ids,
        attention_mask=mask,
        position_ids=vision_positions(model, input_ids, mask, positions, vision),
        use_cache=False,
        logits_to_keep=width + 1,
        **vision,
    )
    return token_logprobs_reference(out.logits[:, :-1], batch.completion_ids, temperature, with_entropy)
