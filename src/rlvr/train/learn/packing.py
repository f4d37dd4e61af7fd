"""Several completions of one prompt in one row of the training forward (no padding between them).

The shared-prefix forward (:func:`rlvr.train.learn.logprobs.completion_logprobs`) runs one row per
completion, each as wide as the longest completion of the micro-batch. Completions that stop early
at a stop token leave the rest of their row as padding, and every layer of the forward and the
backward pass still multiplies it: on the default task (≤ 24 new tokens, 11–17 on average) that
is a third or more of the completion tokens.

:func:`pack_rows` puts the completions of each prompt into as few rows of that width as they fit
(first-fit, longest first). A row then holds several *segments*, one per completion: the prompt's
last token followed by the completion's tokens but its last, which is exactly the unpacked row cut
to the completion's length. Each segment's tokens attend to the prompt's cached keys and values
(the prompt is still encoded once per prompt) and to the earlier tokens of their own segment, and
take the positions they have in the unpacked row; a 4-D attention mask says so. The logits of row
position ``j`` then predict the token the unpacked row predicts there, and the logprobs are
scattered back to the batch's [B, T] layout. The numbers equal the unpacked forward's up to float
rounding (``tests/test_train_packing.py``); ``benchmarks/packed_training.py`` measures the time.

When packing would leave every completion in its own row (equal lengths, as in the fixed-length
benchmark) the unpacked forward runs unchanged. :func:`micro_batches` sizes the passes by tokens.

SFT packs differently (``rlvr/data/packing.py``): its examples are independent sequences, so position
restarts give transformers' block-diagonal mask. Here every segment also reads its prompt's shared
cache, which needs the explicit mask.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rlvr.models.prefix import MIN_SHARED_PREFIX, common_prefix_length

# attention implementations that take a custom 4-D mask (bool for SDPA, additive for eager)
_MASKED_ATTENTION = {"rlvr_sdpa": "bool", "sdpa": "bool", "eager": "additive"}


@dataclass
class PackedRows:
    """Where each completion token sits once the completions are packed into R rows of width W.

    ``row_of`` / ``col_of`` [N]: the packed row and column of each (batch row ``src_row``, column
    ``src_col``) completion position, N = the completion tokens of the batch."""

    group: torch.Tensor  # [R] the prompt of each packed row
    input_ids: torch.Tensor  # [R, W]
    targets: torch.Tensor  # [R, W] the token each position predicts (0 on padding)
    offsets: torch.Tensor  # [R, W] position within the segment (0 = the prompt's last token)
    segment: torch.Tensor  # [R, W] segment id within the row, -1 on padding
    src_row: torch.Tensor  # [N]
    src_col: torch.Tensor  # [N]
    row_of: torch.Tensor  # [N]
    col_of: torch.Tensor  # [N]


def completion_lengths(attention: torch.Tensor) -> torch.Tensor | None:
    """Each row's response length [B] when ``attention`` [B, T] is a prefix mask (real tokens, then
    padding); None when some row has a hole (packing then does not apply)."""
    lengths = attention.sum(dim=1)
    prefix = torch.arange(attention.shape[1], device=attention.device)[None, :] < lengths[:, None]
    return lengths if bool((prefix == attention.bool()).all()) else None


def pack_rows(
    group_index: torch.Tensor, lengths: torch.Tensor, width: int
) -> tuple[list[int], list[list[int]]]:
    """Bins of completion rows, each bin's lengths summing to at most ``width``, never mixing
    prompts: (the prompt of each bin, the batch rows in each bin in order). First-fit decreasing
    within each prompt's completions; empty completions go in no bin."""
    groups: list[int] = []
    bins: list[list[int]] = []
    lengths_list = lengths.tolist()
    for prompt in torch.unique(group_index).tolist():
        members = (group_index == prompt).nonzero().flatten().tolist()
        members = sorted((r for r in members if lengths_list[r] > 0), key=lambda r: -lengths_list[r])
        room: list[int] = []
        start = len(bins)
        for row in members:
            need = lengths_list[row]
            for b, left in enumerate(room):
                if left >= need:
                    bins[start + b].append(row)
                    room[b] -= need
                    break
            else:
                bins.append([row])
                groups.append(prompt)
                room.append(width - need)
    return groups, bins


def packed_layout(batch, lengths: torch.Tensor, groups: list[int], bins: list[list[int]]) -> PackedRows:  # noqa: ANN001
    """The packed rows' tensors for ``batch`` (a :class:`rlvr.train.learn.batch.TrainBatch`)."""
    width, rows = batch.completion_width, len(bins)
    last_prompt = batch.prompt_ids[:, -1]
    input_ids = torch.zeros((rows, width), dtype=torch.long)
    targets = torch.zeros((rows, width), dtype=torch.long)
    offsets = torch.zeros((rows, width), dtype=torch.long)
    segment = torch.full((rows, width), -1, dtype=torch.long)
    src_row, src_col, row_of, col_of = [], [], [], []
    completion = batch.completion_ids.cpu()
    for r, members in enumerate(bins):
        at = 0
        for s, row in enumerate(members):
            n = int(lengths[row])
            ids = completion[row, :n]
            input_ids[r, at] = last_prompt[groups[r]]
            input_ids[r, at + 1 : at + n] = ids[:-1]
            targets[r, at : at + n] = ids
            offsets[r, at : at + n] = torch.arange(n)
            segment[r, at : at + n] = s
            src_row += [row] * n
            src_col += range(n)
            row_of += [r] * n
            col_of += range(at, at + n)
            at += n
    as_long = lambda xs: torch.tensor(xs, dtype=torch.long)  # noqa: E731
    return PackedRows(
        group=as_long(groups),
        input_ids=input_ids,
        targets=targets,
        offsets=offsets,
        segment=segment,
        src_row=as_long(src_row),
        src_col=as_long(src_col),
        row_of=as_long(row_of),
        col_of=as_long(col_of),
    )


def micro_batches(batch, size: int) -> list[slice]:  # noqa: ANN001
    """Row slices of ``batch`` (a TrainBatch whose groups' rows are contiguous) for packed
    forward/backward passes: whole groups, as many as fit in the tokens that ``size`` unpacked rows
    take (``size`` × (prompt width + completion width)), so a pass holds no more activations than an
    unpacked micro-batch of ``size`` rows. A pass's tokens are the prompts' shared prefix once (when
    it is long enough to be shared), each prompt's rest padded to the longest, and the packed rows;
    a group larger than the budget is a pass of its own."""
    budget = size * (batch.prompt_ids.shape[1] + batch.completion_width)
    lengths = batch.completion_attention.sum(dim=1).cpu()
    index = batch.group_index.cpu()
    prompts = [
        ids[mask.bool()].tolist() for ids, mask in zip(batch.prompt_ids.cpu(), batch.prompt_mask.cpu())
    ]
    starts = [0] + [r for r in range(1, len(index)) if index[r] != index[r - 1]] + [len(index)]
    slices, first, shared, rest, rows, groups = [], 0, 0, 0, 0, 0
    for begin, end in zip(starts[:-1], starts[1:]):
        prompt = prompts[int(index[begin])]
        if begin == first:  # a new pass starts with this group
            candidate_shared, candidate_rest = len(prompt), 0
        else:
            head = prompts[int(index[first])]
            candidate_shared = min(shared, common_prefix_length([head, prompt]))
            candidate_rest = max(rest + shared - candidate_shared, len(prompt) - candidate_shared)
        _, bins = pack_rows(index[begin:end], lengths[begin:end], batch.completion_width)
        candidate_rows, candidate_groups = rows + len(bins), groups + 1
        once = candidate_shared if candidate_shared >= MIN_SHARED_PREFIX else 0  # a shorter one repeats
        prompt_tokens = once + candidate_groups * (candidate_shared - once + candidate_rest)
        tokens = prompt_tokens + candidate_rows * batch.completion_width
        if begin > first and tokens > budget:
            slices.append(slice(first, begin))
            first, shared, rest, rows, groups = begin, len(prompt), 0, len(bins), 1
        else:
            shared, rest, rows, groups = candidate_shared, candidate_rest, candidate_rows, candidate_groups
    slices.append(slice(first, len(index)))
    return slices


def segment_mask(layout: PackedRows, past_mask: torch.Tensor, kind: str, dtype: torch.dtype) -> torch.Tensor:
    """The 4-D attention mask [R, 1, W, past + W]: a segment's tokens see the prompt's real cached
    positions (``past_mask`` [R, past]) and their own segment up to themselves; a padding position
    sees only itself (so no softmax row is empty)."""
    seg = layout.segment
    width = seg.shape[1]
    col = torch.arange(width)
    causal = col[None, :, None] >= col[None, None, :]  # [1, W(q), W(k)]
    same = (seg[:, :, None] == seg[:, None, :]) & (seg[:, :, None] >= 0)
    own = causal & same | torch.eye(width, dtype=torch.bool)[None]
    sees_past = (seg >= 0)[:, :, None] & past_mask.bool()[:, None, :]
    allowed = torch.cat([sees_past, own], dim=2)[:, None]
    if kind == "bool":
        return allowed
    return torch.zeros(allowed.shape, dtype=dtype).masked_fill_(~allowed, torch.finfo(dtype).min)


def set_packing(model: torch.nn.Module, enabled: bool) -> None:
    """Turn packing on or off for ``model``'s training forwards (``algo.packing``; on by default)."""
    getattr(model, "module", model).rlvr_packing = enabled


def mask_kind(model: torch.nn.Module) -> str | None:
    """How ``model``'s attention takes a custom 4-D mask, or None when it does not (or packing is
    turned off for it)."""
    inner = getattr(model, "module", model)  # a DDP wrapper's model
    if not getattr(inner, "rlvr_packing", True):
        return None
    return _MASKED_ATTENTION.get(getattr(getattr(inner, "config", None), "_attn_implementation", None))


def unpack(values: torch.Tensor, layout: PackedRows, rows: int, width: int) -> torch.Tensor:
    """Packed [R, W, ...] values back to the batch layout [B, T, ...] (zeros on padding)."""
    picked = values[layout.row_of.to(values.device), layout.col_of.to(values.device)]
    out = values.new_zeros((rows, width, *values.shape[2:]))
    return out.index_put((layout.src_row.to(values.device), layout.src_col.to(values.device)), picked)
