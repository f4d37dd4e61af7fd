"""A prefix that every prompt of a batch shares (a system prompt, few-shot examples), run once.

Task prompts often start with the same tokens: the chat template's system prompt, instructions,
few-shot exchanges. The default demo's prompts are 118–120 tokens, and the first 94 are the same in
every one of them. Both forwards that read whole prompts run such a prefix once:

- the HF engine's prefill (:mod:`rlvr.rollout.hf_engine`) computes the prefix's cache from one row
  and continues every prompt from it, as a multi-turn turn continues from its kept cache;
- the training forward (:mod:`rlvr.train.learn.logprobs`) runs the prefix as one row, repeats its
  cache for the prompts (autograd sums their gradients) and runs each prompt's rest on top.

The rest of each prompt sits after a hole of padding in the cache, which the attention mask hides
and the positions skip; the attentions that take such a mask are listed in ``HOLE_MASK_ATTENTION``.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

# a prefix shorter than this is run with each prompt (a separate pass costs a forward's fixed work)
MIN_SHARED_PREFIX = 16
# attention implementations that take a 2-D (or custom 4-D) mask with holes in the middle
HOLE_MASK_ATTENTION = ("rlvr_sdpa", "sdpa", "eager")


def common_prefix_length(sequences: Sequence[Sequence[int]]) -> int:
    """How many leading tokens all ``sequences`` share (0 for none, or no sequences)."""
    if not sequences:
        return 0
    first, shortest = sequences[0], min(len(s) for s in sequences)
    for i in range(shortest):
        token = first[i]
        if any(s[i] != token for s in sequences):
            return i
    return shortest


def takes_holes(model: torch.nn.Module) -> bool:
    """Whether ``model``'s attention takes a mask with padding between real positions."""
    config = getattr(getattr(model, "module", model), "config", None)
    return getattr(config, "_attn_implementation", None) in HOLE_MASK_ATTENTION
