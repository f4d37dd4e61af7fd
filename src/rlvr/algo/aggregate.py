"""Loss aggregation: how per-token losses of a batch are weighted into one scalar.

The modes differ in how long and short completions are weighted (see Dr.GRPO, seeds 003 on
length bias). They are expressed as per-token *weights* computed over the whole minibatch, so that
a minibatch split into micro-batches for memory gives exactly the same gradient as one pass.
"""

from __future__ import annotations

import torch

AGGREGATIONS = (
    "token-mean",
    "seq-mean-token-mean",
    "seq-mean-token-sum",
    "seq-mean-token-sum-norm",
    "token-sum",
)


def token_weights(mask: torch.Tensor, mode: str, max_tokens: int | None = None) -> torch.Tensor:
    """Weights [B, T] such that ``(loss * weights).sum()`` is the aggregated loss.

    - ``token-mean``: every valid token of the batch counts equally (DAPO).
    - ``seq-mean-token-mean``: mean over each sequence's tokens, then over sequences (original GRPO).
    - ``seq-mean-token-sum``: sum over each sequence's tokens, mean over sequences.
    - ``seq-mean-token-sum-norm``: token sum divided by a constant ``max_tokens`` (Dr.GRPO): no
      per-sequence length normalisation, so no length bias.
    - ``token-sum``: the plain sum over every valid token of the batch (Tinker's convention: its
      losses are sums, and the caller scales advantages or weights). The gradient grows with the
      batch, so the learning rate must be chosen for the batch size.
    """
    mask = mask.to(torch.float32)
    num_seqs = max(mask.shape[0], 1)
    if mode == "token-mean":
        return mask / mask.sum().clamp(min=1.0)
    if mode == "seq-mean-token-mean":
        return mask / mask.sum(dim=1, keepdim=True).clamp(min=1.0) / num_seqs
    if mode == "seq-mean-token-sum":
        return mask / num_seqs
    if mode == "seq-mean-token-sum-norm":
        if not max_tokens:
            raise ValueError("seq-mean-token-sum-norm needs max_tokens")
        return mask / (num_seqs * max_tokens)
    if mode == "token-sum":
        return mask
    raise ValueError(f"unknown loss aggregation '{mode}'; allowed: {', '.join(AGGREGATIONS)}")
