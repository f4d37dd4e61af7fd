"""Distillation: divergences between a student's and a teacher's next-token distributions.

Two signals, for two kinds of data:

- Full-vocabulary divergences (:data:`DIVERGENCES`) when both models' logits are at hand: forward
  KL (mass-covering, classic KD), reverse KL (mode-seeking; KDRL combines GRPO with it, seeds
  000:17) and the generalized JSD between them (GKD; TRL's ``generalized_jsd_loss``).
- :func:`opd_token_advantages` for on-policy distillation (seeds 001:171): the student samples,
  the teacher scores only the sampled tokens, and ``log π_teacher − log π_student`` per token is
  the advantage of a policy-gradient update, a one-sample estimate of the reverse KL's gradient.

Both need the two models to share a vocabulary (:func:`check_same_vocabulary`): logits compared
column by column across different tokenizers are meaningless without an error.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from rlvr.errors import RlvrError
from rlvr.registry import Registry

Tensor = torch.Tensor

DIVERGENCES: Registry = Registry("distillation divergence")

# Rows of [B·T, V] logits processed at once: about 2**24 elements per chunk, i.e. 64 MiB for each
# float32 temporary (log-softmaxes, mixture, products), whatever the vocabulary (≈110 rows at
# V = 152k). Without chunking one [B·T, V] float32 temporary is 2.3 GiB at B·T = 4096, V = 152k.
CHUNK_ELEMENTS = 1 << 24

# Stand-in for log 0 (a −inf logit, e.g. a masked or padded column): finite, so that 0·log 0 is 0
# and not NaN, and low enough that exp() of it is exactly 0.
_LOG_ZERO = -1e30


def _log_probs(logits: Tensor, temperature: float) -> Tensor:
    """Log-softmax in at least float32 (bf16 logits lose the small probabilities), −inf → _LOG_ZERO."""
    logits = logits.to(torch.promote_types(logits.dtype, torch.float32))
    return F.log_softmax(logits / temperature, dim=-1).clamp(min=_LOG_ZERO)


def _kl(log_p: Tensor, log_q: Tensor) -> Tensor:
    """KL(p ‖ q) = Σ p·(log p − log q) over the last axis; terms with p = 0 are 0."""
    return (log_p.exp() * (log_p - log_q)).sum(-1)


def _chunked(
    rowwise: Callable[..., Tensor],
    student: Tensor,
    teacher: Tensor,
    chunk_rows: int | None,
    temperature: float,
    **params: float,
) -> Tensor:
    """Apply ``rowwise(s [n, V], t [n, V], temperature, **params) → [n]`` to [B, T, V] logits in row chunks.

    With autograd on, each chunk runs under activation checkpointing, so the float32 intermediates
    of only one chunk are alive at a time in the backward pass as well (they are recomputed there);
    what the graph keeps is the inputs (views of the logits, already in memory) and the [B, T] output.
    """
    if student.shape != teacher.shape:
        raise ValueError(
            f"student logits {tuple(student.shape)} and teacher logits {tuple(teacher.shape)} differ "
            "(see vocab_width for padded vocabularies)"
        )
    if temperature <= 0:
        raise ValueError(f"distillation temperature must be > 0, got {temperature}")
    rowwise = functools.partial(rowwise, temperature=temperature, **params)
    *lead, width = student.shape
    rows = chunk_rows or max(1, CHUNK_ELEMENTS // max(width, 1))
    s, t = student.reshape(-1, width), teacher.reshape(-1, width)
    grad = torch.is_grad_enabled() and (s.requires_grad or t.requires_grad)
    parts = []
    for start in range(0, s.shape[0], rows):
        a, b = s[start : start + rows], t[start : start + rows]
        parts.append(checkpoint(rowwise, a, b, use_reentrant=False) if grad else rowwise(a, b))
    out = torch.cat(parts) if parts else s.new_zeros(0, dtype=torch.promote_types(s.dtype, torch.float32))
    return out.reshape(lead)


def _forward_kl_rows(s: Tensor, t: Tensor, temperature: float) -> Tensor:
    return _kl(_log_probs(t, temperature), _log_probs(s, temperature))


def _reverse_kl_rows(s: Tensor, t: Tensor, temperature: float) -> Tensor:
    return _kl(_log_probs(s, temperature), _log_probs(t, temperature))


def _jsd_rows(s: Tensor, t: Tensor, temperature: float, beta: float) -> Tensor:
    log_s, log_t = _log_probs(s, temperature), _log_probs(t, temperature)
    # log m, m = β·p_t + (1 − β)·p_s, without leaving log space
    log_m = torch.logaddexp(log_t + math.log(beta), log_s + math.log(1.0 - beta))
    return beta * _kl(log_t, log_m) + (1.0 - beta) * _kl(log_s, log_m)


@DIVERGENCES.register("forward_kl")
def forward_kl(
    student_logits: Tensor, teacher_logits: Tensor, *, temperature: float = 1.0, chunk_rows: int | None = None
) -> Tensor:
    """KL(teacher ‖ student) = Σ p_t·(log p_t − log p_s) per token: classic (mass-covering) KD.

    The student is pushed to put mass wherever the teacher does; with a smaller student this
    spreads it over modes it cannot represent well. ``temperature`` divides both logits.
    """
    return _chunked(_forward_kl_rows, student_logits, teacher_logits, chunk_rows, temperature)


@DIVERGENCES.register("reverse_kl")
def reverse_kl(
    student_logits: Tensor, teacher_logits: Tensor, *, temperature: float = 1.0, chunk_rows: int | None = None
) -> Tensor:
    """KL(student ‖ teacher) = Σ p_s·(log p_s − log p_t) per token: mode-seeking KD (KDRL, seeds 000:17).

    The student is penalised for mass where the teacher has little, not for missing some of the
    teacher's modes: the divergence on-policy distillation minimises.
    """
    return _chunked(_reverse_kl_rows, student_logits, teacher_logits, chunk_rows, temperature)


@DIVERGENCES.register("jsd")
def generalized_jsd(
    student_logits: Tensor,
    teacher_logits: Tensor,
    *,
    temperature: float = 1.0,
    beta: float = 0.5,
    chunk_rows: int | None = None,
) -> Tensor:
    """Generalized JSD of GKD (Agarwal et al., 2024), defined as TRL's ``generalized_jsd_loss``.

    With the mixture ``m = β·p_t + (1 − β)·p_s``: ``β·KL(p_t ‖ m) + (1 − β)·KL(p_s ‖ m)``, and at
    the endpoints (where that expression is 0) the two KLs it interpolates: β = 0 is forward KL,
    β = 1 reverse KL. β = 0.5 is the ordinary Jensen–Shannon divergence, bounded by log 2.
    """
    if not 0.0 <= beta <= 1.0:
        raise ValueError(f"jsd: beta must be in [0, 1], got {beta}")
    if beta == 0.0:
        return forward_kl(student_logits, teacher_logits, temperature=temperature, chunk_rows=chunk_rows)
    if beta == 1.0:
        return reverse_kl(student_logits, teacher_logits, temperature=temperature, chunk_rows=chunk_rows)
    return _chunked(_jsd_rows, student_logits, teacher_logits, chunk_rows, temperature, beta=beta)


def opd_token_advantages(
    student_logprobs: Tensor, teacher_logprobs: Tensor, mask: Tensor, coef: float = 1.0
) -> Tensor:
    """On-policy distillation's per-token advantage ``−coef·(log π_student − log π_teacher)`` on ``mask``.

    The student sampled each token; the teacher scored the same token. The negative log-ratio is
    then a one-sample estimate of the (negative) reverse KL at that position, and using it as the
    advantage of a policy-gradient loss minimises the reverse KL: tokens the teacher likes more than
    the student are pushed up, the rest down (Tinker's ``kl_penalty_coef``; seeds 001:171 treats
    OPD as dense KL-constrained RL with this reward). The result is detached (it is a signal, not a
    path for gradients) and exactly 0 off the mask, whatever the padding holds.
    """
    diff = (student_logprobs.detach() - teacher_logprobs.detach()).float()
    return torch.where(mask > 0, -coef * diff * mask, torch.zeros_like(diff))


def check_same_vocabulary(
    student_tokenizer: Any, teacher_tokenizer: Any, student_name: str, teacher_name: str
) -> None:
    """Refuse to distill between models whose tokenizers differ (size or any token → id entry).

    Divergences and OPD compare the two models' numbers for the same token id; with different
    vocabularies id 1234 is a different string in each, and training on it runs without error
    but learns nothing (or the wrong thing). Cross-tokenizer distillation needs an alignment
    (e.g. GOLD), which this library does not do.
    """
    sizes = len(student_tokenizer), len(teacher_tokenizer)
    if sizes[0] != sizes[1]:
        raise RlvrError(
            f"distillation needs the student and teacher to share a tokenizer: student '{student_name}' "
            f"has {sizes[0]} tokens, teacher '{teacher_name}' has {sizes[1]}"
        )
    student_vocab, teacher_vocab = student_tokenizer.get_vocab(), teacher_tokenizer.get_vocab()
    if student_vocab != teacher_vocab:
        differ = sorted(
            token
            for token in student_vocab.keys() | teacher_vocab.keys()
            if student_vocab.get(token) != teacher_vocab.get(token)
        )
        shown = ", ".join(
            f"{token!r}: {student_vocab.get(token)} vs {teacher_vocab.get(token)}" for token in differ[:5]
        )
        raise RlvrError(
            f"distillation needs the student and teacher to share a tokenizer: student '{student_name}' "
            f"and teacher '{teacher_name}' map {len(differ)} token(s) to different ids "
            f"(student vs teacher: {shown})"
        )


def vocab_width(
    student_logits: Tensor, teacher_logits: Tensor, tokenizer_size: int | None = None
) -> tuple[Tensor, Tensor]:
    """Both logits cut to their shared width, if the extra columns are only embedding padding.

    A model's output width is often padded beyond its tokenizer (to a multiple of 64 or 128 for
    fast matmuls): Qwen2.5-0.5B has 151,936 columns for 151,665 tokens, and two models of a family
    with one tokenizer can pad differently. Columns at or beyond ``tokenizer_size`` are no token's,
    so cutting the wider one off there loses nothing. A difference that would cut a real token
    (``tokenizer_size`` above the shared width), or one with no ``tokenizer_size`` to tell, is an
    error: then the vocabularies really differ (see :func:`check_same_vocabulary`).
    """
    ws, wt = student_logits.shape[-1], teacher_logits.shape[-1]
    if ws == wt:
        return student_logits, teacher_logits
    shared = min(ws, wt)
    if tokenizer_size is None or tokenizer_size > shared:
        raise RlvrError(
            f"student logits have {ws} columns and teacher logits {wt}; only padding beyond the tokenizer's "
            f"{tokenizer_size if tokenizer_size is not None else '(unknown)'} tokens may be cut"
        )
    return student_logits[..., :shared], teacher_logits[..., :shared]
