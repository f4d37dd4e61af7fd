"""SDPA attention that keeps grouped-query K/V grouped on the CPU.

With an attention mask (rlvr always passes one: prompts are left-padded), transformers' ``sdpa``
implementation copies every key/value head to all the query heads that share it (``repeat_kv``)
before calling ``scaled_dot_product_attention``, because CUDA's fast SDPA kernels reject masked GQA.
PyTorch's CPU kernel takes ``enable_gqa=True`` with a mask and gives the same numbers without the
copies: ``benchmarks/sdpa_gqa.py`` measures the difference. ``rlvr_sdpa`` does that on the CPU and
hands every other case (another device, position bias, paged cache, soft-capping, the static-cache
prefill slice) to transformers' own ``sdpa`` unchanged. It is registered per model at load time
(``attn_implementation="rlvr_sdpa"``), so no process-wide switch is flipped.
"""

from __future__ import annotations

import torch

NAME = "rlvr_sdpa"
_registered = False


def rlvr_sdpa_forward(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    is_causal: bool | None = None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """``sdpa_attention_forward``'s contract: [B, H, T, D] in, ([B, T, H, D], None) out."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    q_len, kv_len = query.shape[2], key.shape[2]
    causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    causal = q_len > 1 and attention_mask is None and causal
    special = any(kwargs.get(k) is not None for k in ("position_bias", "cache", "softcap"))
    special = special or bool(kwargs.get("output_attentions")) or (causal and kv_len > q_len)
    if query.device.type != "cpu" or special:
        kwargs.update(dropout=dropout, scaling=scaling, is_causal=is_causal)
        return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)
    if q_len == 1 and query.dtype != torch.float32 and dropout == 0.0:
        mask = attention_mask[:, :, -1:] if attention_mask is not None else None
        out = single_query_attention(query, key, value, mask, scaling)
        return out.transpose(1, 2).contiguous(), None
    out = torch.nn.functional.scaled_dot_product_attention(
        query,
        key,
        value,
        attn_mask=attention_mask,
        dropout_p=dropout,
        scale=scaling,
        is_causal=causal,
        enable_gqa=key.shape[1] != query.shape[1],
    )
    return out.transpose(1, 2).contiguous(), None


def single_query_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    mask: torch.Tensor | None,
    scaling: float | None = None,
) -> torch.Tensor:
    """One decode step's attention in bf16/fp16 on the CPU: query [B, H, 1, D] over key/value
    [B, KV, L, D] (H a multiple of KV, grouped as ``repeat_kv`` groups them), ``mask`` boolean
    (True: attend) or additive, broadcastable to [B, 1, 1, L]; returns [B, H, 1, D] in the query's dtype.

    The scores and the softmax are fp32 (the keys converted, the products summed in fp32); the
    weights are rounded to the value dtype for the second product. PyTorch's SDPA kernel does the
    same work at one query in bf16 about five times slower on an AVX512-bf16 CPU (16 sequences ×
    120 keys, 2 threads: 1.0 ms per layer against 0.2 ms; ``benchmarks/bf16_decode.py``), which made
    attention about a third of transformers' bf16 decode step. The fused decode step
    (``rlvr.models.fused_decode``) calls this same function, so the two stay bit-identical."""
    batch, heads, _, dim = query.shape
    kv_heads = key.shape[1]
    if scaling is None:
        scaling = dim**-0.5
    grouped = query.reshape(batch, kv_heads, heads // kv_heads, dim).float()
    scores = torch.matmul(grouped, key.transpose(-1, -2).float()).mul_(scaling)
    if mask is not None:
        scores = scores.masked_fill_(~mask, float("-inf")) if mask.dtype == torch.bool else scores.add_(mask)
    weights = torch.softmax(scores, dim=-1).to(value.dtype)
    return torch.matmul(weights, value).reshape(batch, heads, 1, dim)


def register() -> str:
    """Register ``rlvr_sdpa`` (attention and its mask format, the same as ``sdpa``); returns its name."""
    global _registered
    if not _registered:
        from transformers import AttentionInterface
        from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface, sdpa_mask

        AttentionInterface.register(NAME, rlvr_sdpa_forward)
        AttentionMaskInterface.register(NAME, ALL_MASK_ATTENTION_FUNCTIONS.get("sdpa", sdpa_mask))
        _registered = True
    return NAME
