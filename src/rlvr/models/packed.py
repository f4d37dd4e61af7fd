"""Decode with the model's linear weights in MKL's packed GEMM layout (CPU, fp32).

A decode step multiplies a handful of rows (one per live sequence) by every weight matrix of the
model, so it is bound by how fast the GEMM streams the weights, not by FLOPs. MKL's ``sgemm`` re-lays
out each weight on every call; ``cblas_sgemm_pack`` does that once and ``cblas_sgemm_compute`` then
reads the packed copy directly. PyTorch exposes the pair as ``torch.ops.mkl._mkl_reorder_linear_weight``
and ``torch.ops.mkl._mkl_linear``. ``benchmarks/packed_decode.py`` measures the effect side by side.

The packed copies are made on entering :func:`packed_linears` and dropped on leaving it: during
training the weights change after every update, so each generation call needs fresh copies anyway,
and training never holds them next to its activations and gradients. Outside the block every
forward sees plain ``nn.Linear`` modules.
"""

from __future__ import annotations

import types
from collections.abc import Iterator
from contextlib import contextmanager

import torch

# When packing pays (benchmarks/packed_decode.py, fp32, 2 cores, SmolLM2-135M, repack included):
# 16 sequences × 128 tokens 10.79 -> 10.11 s; 32 × 64 7.05 -> 7.30 s (MKL's plain sgemm is already
# as fast at 32 rows); 16 × 32 loses (scratch timing, weights changed between calls: 2.30 -> 2.42 s;
# the ~0.4 s repack outweighs 32 steps of ~8 ms). "auto" packs only where it was measured to pay:
# few rows, long generations.
AUTO_MIN_NEW_TOKENS = 64
AUTO_MAX_ROWS = 16


def packing_pays(rows: int, max_new_tokens: int) -> bool:
    """The "auto" rule: decoding at most AUTO_MAX_ROWS sequences for at least AUTO_MIN_NEW_TOKENS."""
    return rows <= AUTO_MAX_ROWS and max_new_tokens >= AUTO_MIN_NEW_TOKENS


def packed_decode_available(model: torch.nn.Module) -> bool:
    """Whether packed decode can apply: MKL present, the model on CPU in fp32, and no LoRA adapters
    (packed copies of the base weights would leave the adapters out)."""
    if not (torch.backends.mkl.is_available() and hasattr(torch.ops.mkl, "_mkl_linear")):
        return False
    if hasattr(model, "peft_config"):
        return False
    param = next(model.parameters(), None)
    return param is not None and param.device.type == "cpu" and param.dtype == torch.float32


@contextmanager
def packed_linears(model: torch.nn.Module, batch_hint: int = 16) -> Iterator[None]:
    """Within the block, every ``nn.Linear`` of ``model`` multiplies through a packed copy of its
    weight (made on entry, from the weights as they are then); gradient mode falls back to the
    plain product."""
    modules = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    try:
        with torch.no_grad():
            for module in modules:
                weight = module.weight.detach().contiguous()
                packed = torch.ops.mkl._mkl_reorder_linear_weight(weight, batch_hint)
                module.forward = types.MethodType(_packed_forward(packed), module)
        yield
    finally:
        for module in modules:
            vars(module).pop("forward", None)


def _packed_forward(packed: torch.Tensor):
    def forward(module: torch.nn.Linear, x: torch.Tensor) -> torch.Tensor:
        if torch.is_grad_enabled() or x.dtype != torch.float32:
            return torch.nn.functional.linear(x, module.weight, module.bias)
        rows = x.numel() // x.shape[-1]
        return torch.ops.mkl._mkl_linear(x, packed, module.weight, module.bias, rows)

    return forward
