"""Logprob of the chosen token (and the distribution's entropy) from logits, in row chunks.

The plain way, ``log_softmax(logits).gather(targets)`` plus ``-(p * log p).sum()`` for the entropy,
materialises several [N, V] float32 tensors (V = 49152 for SmolLM2): the log-softmax, its
exponential, their product; autograd keeps the log-softmax for the backward pass. On a CPU these
passes over memory cost as much as a sizeable share of the model's matmuls (profiled on 1 × 16 × 128
tokens: log-softmax, exp and the products took ~2 s of an 11.6 s update).

:func:`token_logprobs` computes the same numbers chunk by chunk of rows, so each chunk's temporaries
stay in cache: one exponential per element in the forward pass (it serves the log-sum-exp and the
entropy) and one in the backward pass (the softmax, recomputed from the saved log-sum-exp). Only the
[N] results and the [N] log-sum-exp are kept. The entropy it returns carries no gradient; an entropy
*bonus* needs one and uses :func:`token_logprobs_reference`.
"""

from __future__ import annotations

import torch

ROWS_PER_CHUNK = 256  # 256 × 49152 float32 = 48 MiB per temporary


class _ChosenTokenLogprob(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits, targets, inv_temperature, want_entropy):  # noqa: ANN001, ANN205
        rows = logits.shape[0]
        logprobs = torch.empty(rows, dtype=torch.float32, device=logits.device)
        lse = torch.empty(rows, dtype=torch.float32, device=logits.device)
        entropy = torch.empty(rows, dtype=torch.float32, device=logits.device) if want_entropy else None
        for start in range(0, rows, ROWS_PER_CHUNK):
            end = min(start + ROWS_PER_CHUNK, rows)
            x = _scaled(logits[start:end], inv_temperature)
            peak = x.amax(dim=-1, keepdim=True)
            e = torch.sub(x, peak).exp_()
            total = e.sum(dim=-1, keepdim=True)
            chunk_lse = (peak + total.log()).squeeze(-1)
            lse[start:end] = chunk_lse
            logprobs[start:end] = x.gather(-1, targets[start:end, None]).squeeze(-1) - chunk_lse
            if want_entropy:  # H = lse − Σ p·x, with p = e / total
                entropy[start:end] = chunk_lse - (e.mul_(x)).sum(dim=-1) / total.squeeze(-1)
        ctx.save_for_backward(logits, targets, lse)
        ctx.inv_temperature = inv_temperature
        if entropy is not None:
            ctx.mark_non_differentiable(entropy)
        return logprobs, entropy

    @staticmethod
    def backward(ctx, grad_logprobs, _grad_entropy):  # noqa: ANN001, ANN205
        logits, targets, lse = ctx.saved_tensors
        inv_temperature = ctx.inv_temperature
        grad = torch.empty_like(logits)
        for start in range(0, logits.shape[0], ROWS_PER_CHUNK):
            end = min(start + ROWS_PER_CHUNK, logits.shape[0])
            x = _scaled(logits[start:end], inv_temperature)
            g = grad_logprobs[start:end, None]
            # d logprob / d x = onehot(target) − softmax(x); then through x = logits / T
            chunk = torch.sub(x, lse[start:end, None]).exp_().mul_(-g)
            chunk.scatter_add_(-1, targets[start:end, None], g)
            if inv_temperature != 1.0:
                chunk.mul_(inv_temperature)
            grad[start:end] = chunk
        return grad, None, None, None


def _scaled(logits: torch.Tensor, inv_temperature: float) -> torch.Tensor:
    x = logits.float()
    return x * inv_temperature if inv_temperature != 1.0 else x


def token_logprobs(
    logits: torch.Tensor, targets: torch.Tensor, temperature: float = 1.0, with_entropy: bool = False
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """log softmax(logits / T)[target] for logits [..., V] and targets [...], both float32 results.

    With ``with_entropy``, also the entropy of softmax(logits / T) per position (no gradient).
    Gradients flow to ``logits`` through the logprobs.
    """
    shape = targets.shape
    inv = 1.0 / temperature if temperature and temperature != 1.0 else 1.0
    flat_logits = logits.reshape(-1, logits.shape[-1])
    logprobs, entropy = _ChosenTokenLogprob.apply(flat_logits, targets.reshape(-1), inv, with_entropy)
    return logprobs.view(shape), (entropy.view(shape) if entropy is not None else None)


def token_logprobs_reference(
    logits: torch.Tensor, targets: torch.Tensor, temperature: float, with_entropy: bool | str
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The same via a full log-softmax; ``with_entropy="grad"`` gives a differentiable entropy."""
    logits = logits.float()
    if temperature and temperature != 1.0:
        logits = logits / temperature
    logp_all = torch.log_softmax(logits, dim=-1)
    logprobs = logp_all.gather(-1, targets[..., None]).squeeze(-1)
    entropy = None
    if with_entropy == "grad":  # an entropy bonus needs its gradient (keeps a [B, T, V] graph)
        entropy = -(logp_all.exp() * logp_all).sum(-1)
    elif with_entropy:
        with torch.no_grad():
            entropy = -(logp_all.exp() * logp_all).sum(-1)
    return logprobs, entropy
