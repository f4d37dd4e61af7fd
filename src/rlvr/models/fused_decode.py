"""A one-token decode step for Llama-architecture models on the CPU, through fused, packed weights.

A decode step on the CPU multiplies one row per live sequence by every weight of the model, so its
time is set by how fast the weights stream from memory, plus a fixed cost per operation. Inside
transformers' forward each layer runs seven GEMMs (q, k, v, o, gate, up, down) and a few dozen
small framework calls. :class:`FusedLlamaDecoder` runs the same arithmetic as four GEMMs per layer
(q|k|v and gate|up concatenated), each through a copy of the weight in MKL's packed GEMM layout
(``cblas_sgemm_pack``; see ``rlvr.models.packed``), with the model's own embedding and rotary
modules and its norms' weights as single ``rms_norm`` ops. ``benchmarks/packed_decode.py``
measures it against both other paths.

A model in bf16 (the sampling copy under ``model.precision=bf16-mixed``) runs the same step with
its four GEMMs through oneDNN's prepacked bf16 linear (``mkldnn._reorder_linear_weight`` once,
``mkldnn._linear_pointwise`` per call), on a CPU that computes bf16 natively (AMX or AVX512-bf16).
Its norms round where transformers' ``LlamaRMSNorm`` rounds and its attention is the function the
model's own forward calls at one query (``rlvr.models.attention.single_query_attention``, through
``rlvr_sdpa``), so its logits are bit-identical to the model's bf16 forward on the same cache (the
oneDNN GEMMs accumulate in the same order, packed or not). ``benchmarks/bf16_decode.py`` measures it.

The prefill still goes through transformers (it is a large GEMM, where the framework's cost is
negligible); the decoder then reads and writes the same preallocated KV cache
(``rlvr.rollout.kv_cache``). The fused and packed copies are made from the weights as they are when
the decoder is built, so it must be rebuilt after every policy update: the HF engine builds one per
``generate`` call and drops it at the end, which keeps the copies out of training's memory.
"""

from __future__ import annotations

import torch
from transformers.cache_utils import DynamicCache

from rlvr.models.attention import NAME, single_query_attention
from rlvr.models.packed import packed_decode_available
from rlvr.models.precision import native_low_precision

# When the fused step pays (benchmarks/packed_decode.py, fp32, 2 cores, SmolLM2-135M, a policy update
# and the ~0.1 s rebuild included): generate 16 × 128 tokens 10.24 -> 7.95 s (1.29x), 16 × 32
# 2.66 -> 2.33 s (1.14x), 32 × 24 2.56 -> 2.32 s (1.10x), 32 × 64 7.17 -> 5.85 s (1.23x), 64 × 16
# 2.87 -> 2.51 s (1.15x). "auto" uses it within the measured range.
AUTO_MIN_NEW_TOKENS = 16
AUTO_MAX_ROWS = 64


# bf16, the rows as in fp32 (AMD EPYC with AVX512-bf16, 2 threads, 4 prompts x 8 sequences, bf16 copy,
# fused vs transformers' forward, medians of 4 alternating calls, the ~0.1 s repack included):
# 2 tokens 0.56 vs 0.47 s, 4 tokens 0.61 vs 0.62 s, 8 tokens 0.84 vs 0.93 s.
BF16_AUTO_MIN_NEW_TOKENS = 8


def fused_decode_pays(rows: int, max_new_tokens: int, dtype: torch.dtype = torch.float32) -> bool:
    """The "auto" rule: at most AUTO_MAX_ROWS sequences, at least AUTO_MIN_NEW_TOKENS new tokens
    (BF16_AUTO_MIN_NEW_TOKENS for a bf16 model)."""
    least = BF16_AUTO_MIN_NEW_TOKENS if dtype == torch.bfloat16 else AUTO_MIN_NEW_TOKENS
    return rows <= AUTO_MAX_ROWS and max_new_tokens >= least


def bf16_linear_available(model: torch.nn.Module) -> bool:
    """Whether ``model`` is in bf16 on a CPU that computes bf16 natively, with oneDNN's prepacked
    linear, and without LoRA adapters (packed base weights would leave them out)."""
    ops = torch.ops.mkldnn
    if not (torch.backends.mkldnn.is_available() and hasattr(ops, "_linear_pointwise")):
        return False
    if hasattr(model, "peft_config"):
        return False
    param = next(model.parameters(), None)
    if param is None or param.device.type != "cpu" or param.dtype != torch.bfloat16:
        return False
    return native_low_precision("cpu")[0] and bool(ops._is_mkldnn_bf16_supported())


def fused_decode_supported(model: torch.nn.Module) -> bool:
    """Whether :class:`FusedLlamaDecoder` computes what ``model``'s own forward computes: a Llama
    model (no biases, SiLU MLP, no tensor-parallel split) on the CPU, in fp32 with MKL, or in bf16
    with oneDNN on a CPU with native bf16 and with rlvr's attention (``rlvr_sdpa``, as
    :func:`rlvr.models.load_model` sets it on the CPU)."""
    if not packed_decode_available(model):
        # bf16: exact only against the attention the model's own forward runs at one query
        if not bf16_linear_available(model) or getattr(model.config, "_attn_implementation", None) != NAME:
            return False
    config, inner = text_side(model)
    if getattr(config, "model_type", None) != "llama":
        return False
    if getattr(config, "attention_bias", False) or getattr(config, "mlp_bias", False):
        return False
    if getattr(config, "hidden_act", None) != "silu" or getattr(config, "pretraining_tp", 1) != 1:
        return False
    return inner is not None and hasattr(inner, "layers") and hasattr(inner, "rotary_emb")


def text_side(model: torch.nn.Module) -> tuple[object, torch.nn.Module | None]:
    """(config, decoder stack) of ``model``'s language side: the model's own for a causal LM, the
    text model's for a vision-language model (Idefics3 / SmolVLM decode text tokens with a Llama)."""
    config, inner = getattr(model, "config", None), getattr(model, "model", None)
    if getattr(config, "vision_config", None) is not None and inner is not None:
        config = config.get_text_config()
        inner = getattr(inner, "text_model", None) or getattr(inner, "language_model", None)
    return config, inner


class _Packed:
    """A weight [out, in] and its MKL-packed copy; ``__call__`` is ``x @ weight.T``."""

    __slots__ = ("weight", "packed")

    def __init__(self, weight: torch.Tensor, rows_hint: int) -> None:
        self.weight = weight.detach().contiguous()
        self.packed = torch.ops.mkl._mkl_reorder_linear_weight(self.weight, rows_hint)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.mkl._mkl_linear(x, self.packed, self.weight, None, x.shape[0])


class _PackedBf16:
    """A bf16 weight [out, in] in oneDNN's prepacked layout; ``__call__`` is ``x @ weight.T``."""

    __slots__ = ("packed",)

    def __init__(self, weight: torch.Tensor, rows_hint: int) -> None:
        self.packed = torch.ops.mkldnn._reorder_linear_weight(weight.detach().contiguous(), rows_hint)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.mkldnn._linear_pointwise(x, self.packed, None, "none", [], "")


class FusedLlamaDecoder:
    """Decode one token for each of B sequences: ``step(tokens [B], positions [B], cache, mask)``
    returns the next-token logits [B, vocab]. Built from ``model``'s current weights."""

    def __init__(self, model: torch.nn.Module, rows_hint: int = 16) -> None:
        if not fused_decode_supported(model):
            raise ValueError(
                "FusedLlamaDecoder needs a Llama model on the CPU, in fp32 with MKL or in bf16 with "
                "oneDNN on a CPU with native bf16"
            )
        config, self.inner = text_side(model)
        self.model = model
        packed = _PackedBf16 if next(model.parameters()).dtype == torch.bfloat16 else _Packed
        self.n_heads = config.num_attention_heads
        self.n_kv = config.num_key_value_heads
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // self.n_heads
        self.q_width = self.n_heads * self.head_dim
        self.kv_width = self.n_kv * self.head_dim
        self.layers = []
        with torch.no_grad():
            for layer in self.inner.layers:
                attn, mlp = layer.self_attn, layer.mlp
                qkv = torch.cat([attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight])
                gate_up = torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight])
                self.layers.append(
                    (
                        layer,
                        packed(qkv, rows_hint),
                        packed(attn.o_proj.weight, rows_hint),
                        packed(gate_up, rows_hint),
                        packed(mlp.down_proj.weight, rows_hint),
                        attn.scaling,
                    )
                )
            self.head = packed(model.lm_head.weight, rows_hint)

    @torch.inference_mode()
    def step(
        self, tokens: torch.Tensor, positions: torch.Tensor, cache: DynamicCache, mask: torch.Tensor
    ) -> torch.Tensor:
        """``mask`` [B, L+1] marks the real (non-padding) positions of the cache plus the new token."""
        inner = self.inner
        batch, head_dim, n_kv = tokens.shape[0], self.head_dim, self.n_kv
        group = self.n_heads // n_kv
        h = inner.embed_tokens(tokens)
        cos, sin = inner.rotary_emb(h[:, None], positions[:, None])  # [B, 1, head_dim]
        # the cached positions that are real (not left padding); fp32 adds it as 0 / -inf
        real = (mask != 0)[:, None, None, :]
        low = h.dtype != torch.float32
        bias = None if low else torch.zeros(real.shape).masked_fill_(~real, float("-inf"))
        k_end = self.q_width + self.kv_width
        for index, (layer, qkv_w, o_w, gate_up_w, down_w, scaling) in enumerate(self.layers):
            qkv = qkv_w(_rms_norm(layer.input_layernorm, h))
            # rotate the query and key heads together: [B, heads + kv heads, head_dim]
            qk = _rotate(qkv[:, :k_end].view(batch, -1, head_dim), cos, sin)
            q = qk[:, : self.n_heads].view(batch, n_kv, group, head_dim)
            k = qk[:, self.n_heads :].view(batch, n_kv, 1, head_dim)
            v = qkv[:, k_end:].view(batch, n_kv, 1, head_dim)
            keys, values = cache.layers[index].update(k, v)  # [B, kv heads, L+1, head_dim]
            # fp32, one query token: plain batched products beat the flash kernel at this size. Query
            # head j*group..(j+1)*group-1 reads kv head j, as transformers' repeat_kv lays them out.
            if low:  # what the model's own forward calls (rlvr_sdpa): the same roundings
                out = single_query_attention(q.reshape(batch, -1, 1, head_dim), keys, values, real, scaling)
            else:
                scores = torch.matmul(q, keys.transpose(-1, -2)).mul_(scaling).add_(bias)
                out = torch.matmul(torch.softmax(scores, dim=-1), values)  # [B, kv heads, group, head_dim]
            h = h + o_w(out.reshape(batch, self.q_width))
            gate, up = gate_up_w(_rms_norm(layer.post_attention_layernorm, h)).chunk(2, dim=-1)
            h = h + down_w(torch.nn.functional.silu(gate).mul_(up))
        return self.head(_rms_norm(inner.norm, h))


def _rms_norm(norm: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """``LlamaRMSNorm``: one fused op in fp32; in a lower precision normalised in fp32, rounded, then
    scaled by the weight, as ``LlamaRMSNorm`` rounds (the fused op rounds only once)."""
    if x.dtype == torch.float32:
        return torch.nn.functional.rms_norm(x, norm.weight.shape, norm.weight, norm.variance_epsilon)
    normed = torch.nn.functional.rms_norm(x.float(), norm.weight.shape, None, norm.variance_epsilon)
    return norm.weight * normed.to(x.dtype)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Llama's rotary embedding (``apply_rotary_pos_emb``, halves rotated) for x [B, heads, dim]."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin
