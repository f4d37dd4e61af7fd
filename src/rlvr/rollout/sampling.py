"""Picking the next token from logits: sampling (exact, one uniform draw per row), greedy, and the
self-certainty diagnostic. The HF engine calls :func:`sample_next` once per decode step."""

from __future__ import annotations

import math

import torch

from rlvr.rollout.base import SamplingParams


def token_self_certainty(logits: torch.Tensor) -> torch.Tensor:
    """KL(uniform ‖ p) of each row's next-token distribution ``p = softmax(logits)`` [B, V] → [B]:
    ``-log V - mean_j log p_j`` (Intuitor's self-certainty of one token; 0 for a uniform ``p``).
    Computed at temperature 1, from the policy's own distribution, whatever the sampling temperature."""
    logits = logits.float()
    mean_logprob = logits.mean(dim=-1) - torch.logsumexp(logits, dim=-1)
    return -math.log(logits.shape[-1]) - mean_logprob


def sample_next(
    logits: torch.Tensor,
    params: SamplingParams,
    generator: torch.Generator | None,
    temperature: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Pick next tokens from ``logits`` [B, V]; return (tokens [B], logprobs [B]).

    ``temperature`` [B] (all > 0), when given, is each row's own temperature in place of
    ``params.temperature`` (intent-factored generation): each logprob is then under its row's.

    The logprob is taken from the temperature-scaled distribution before top-p truncation, which
    is the distribution the trainer recomputes (it applies the same temperature). Sampling inverts
    the CDF with one uniform draw per row: ``torch.multinomial`` draws an exponential variate per
    vocabulary entry, which on CPU cost more than the model's own decode step for a 135M model.
    """
    if params.greedy:
        logits = logits.float()
        tokens = logits.argmax(dim=-1)
        chosen = logits.gather(-1, tokens[:, None]).squeeze(-1)
        return tokens, chosen - torch.logsumexp(logits, dim=-1)
    scale = params.temperature if temperature is None else temperature.to(logits.device)[:, None]
    if params.top_p >= 1.0:
        return _sample_unnormalised(logits, scale, generator)
    probs = torch.softmax(logits.float() / scale, dim=-1)
    sorted_probs, order = probs.sort(dim=-1, descending=True)
    outside = sorted_probs.cumsum(-1) - sorted_probs > params.top_p
    kept = torch.zeros_like(probs).scatter_(-1, order, sorted_probs.masked_fill(outside, 0.0))
    cdf = kept.cumsum(dim=-1)
    u = torch.rand((probs.shape[0], 1), generator=generator, device=probs.device) * cdf[:, -1:]
    tokens = torch.searchsorted(cdf, u, right=True).squeeze(-1).clamp(max=probs.shape[-1] - 1)
    return tokens, probs.gather(-1, tokens[:, None]).squeeze(-1).log()


SAMPLING_BLOCK = 512  # vocabulary entries per block of the two-level inverse CDF


def _sample_unnormalised(
    logits: torch.Tensor, scale: float | torch.Tensor, generator: torch.Generator | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Inverse-CDF sampling from softmax(logits / scale), exact, without normalising it and without
    a cumulative sum over the whole vocabulary.

    The weights exp(x − max) are summed in blocks of ``SAMPLING_BLOCK`` entries; one uniform draw,
    scaled by their total, picks a block by the cumulative sum of the block sums, then an entry by
    the cumulative sum inside that block alone. The logprob is x[token] − max − log(total). A
    full-vocabulary cumulative sum is a sequential pass that cost more than the rest of sampling
    (``benchmarks/sampling_step.py`` compares this with the normalised sampler it replaced)."""
    x = logits.float()
    if not (isinstance(scale, float | int) and scale == 1.0):
        x = x / scale
    rows, vocab = x.shape
    peak = x.amax(dim=-1, keepdim=True)
    weights = torch.sub(x, peak).exp_()
    blocks = -(-vocab // SAMPLING_BLOCK)
    if blocks * SAMPLING_BLOCK != vocab:  # zero weight on the padding
        weights = torch.nn.functional.pad(weights, (0, blocks * SAMPLING_BLOCK - vocab))
    weights = weights.view(rows, blocks, SAMPLING_BLOCK)
    block_sums = weights.sum(dim=-1)
    total = block_sums.sum(dim=-1, keepdim=True)
    block_cdf = block_sums.cumsum(dim=-1)
    u = torch.rand((rows, 1), generator=generator, device=x.device) * block_cdf[:, -1:]
    block = torch.searchsorted(block_cdf, u, right=True).clamp(max=blocks - 1)  # [B, 1]
    below = torch.where(block > 0, block_cdf.gather(-1, (block - 1).clamp(min=0)), torch.zeros_like(u))
    inside = weights.gather(1, block[:, :, None].expand(rows, 1, SAMPLING_BLOCK)).squeeze(1).cumsum(dim=-1)
    entry = torch.searchsorted(inside, u - below, right=True).clamp(max=SAMPLING_BLOCK - 1)
    tokens = (block * SAMPLING_BLOCK + entry).squeeze(-1).clamp(max=vocab - 1)
    chosen = x.gather(-1, tokens[:, None]) - peak - total.log()
    return tokens, chosen.squeeze(-1)
