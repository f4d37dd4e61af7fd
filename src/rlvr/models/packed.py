"""Decode with the model's linear weights in MKL's packed GEMM layout (CPU, fp32).

A decode step multiplies a handful of rows (one per live sequence) by every weight matrix of the
model, so it is bound by how fast the GEMM streams the weights, not by FLOPs. MKL's ``sgemm`` re-lays
out each weight on every call; ``cblas_sgemm_pack`` does that once and ``cblas_sgemm_compute`` then
reads the packed copy directly. PyTorch exposes the pair as ``torch.ops.mkl._mkl_reorder_linear_weight``
and ``torch.ops.mkl._mkl_linear``. ``benchmarks/packed_decode.py`` measures the effect side by side.

The packed copies are rebuilt after :meth:`PackedLinears.invalidate` (the engine calls it from
``sync_weights``, which the trainer calls after every update: torch's fused AdamW writes the weights
without moving their version counters, so those cannot tell) or when a weight's storage or version
changed, i.e. once per generation call during training. They are used only inside
:meth:`PackedLinears.active`, so training and every other forward see plain ``nn.Linear`` modules.
"""

from __future__ import annotations

import types
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import torch

# When packing pays (benchmarks/packed_decode.py, fp32, 2 cores, SmolLM2-135M, repack included):
# 16 sequences × 128 tokens 10.79 -> 10.11 s; 32 × 64 7.05 -> 7.30 s (MKL's plain sgemm is already
# as fast at 32 rows); 16 × 32 loses (the ~0.4 s repack outweighs 32 steps of ~8 ms). "auto" packs
# only where it was measured to pay: few rows, long generations.
AUTO_MIN_NEW_TOKENS = 64
AUTO_MAX_ROWS = 16


def packing_pays(rows: int, max_new_tokens: int) -> bool:
    """The "auto" rule: decoding at most AUTO_MAX_ROWS sequences for at least AUTO_MIN_NEW_TOKENS."""
    return rows <= AUTO_MAX_ROWS and max_new_tokens >= AUTO_MIN_NEW_TOKENS


def packed_decode_available(model: torch.nn.Module) -> bool:
    """Whether packed decode can apply: MKL present and the model on CPU in fp32."""
    if not (torch.backends.mkl.is_available() and hasattr(torch.ops.mkl, "_mkl_linear")):
        return False
    param = next(model.parameters(), None)
    return param is not None and param.device.type == "cpu" and param.dtype == torch.float32


class PackedLinears:
    """Packed copies of every ``nn.Linear`` weight in ``model``, swapped in during decoding."""

    def __init__(self, model: torch.nn.Module, batch_hint: int = 16) -> None:
        self.modules = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
        self.batch_hint = batch_hint
        self._packed: dict[int, torch.Tensor] = {}
        self._packed_version: dict[int, tuple[int, int]] = {}

    def invalidate(self) -> None:
        """Mark every packed copy stale: the weights were updated."""
        self._packed_version.clear()

    def refresh(self) -> int:
        """Repack the weights that changed since the last call; returns how many were packed.

        MKL packs a matrix on one thread; the matrices are independent, so they are packed by as
        many threads as torch uses (the op releases the GIL).
        """
        stale = []
        for module in self.modules:
            key = (module.weight.data_ptr(), module.weight._version)
            if self._packed_version.get(id(module)) != key:
                self._packed.pop(id(module), None)  # free the old copy before making the new one
                stale.append((module, key))
        if not stale:
            return 0

        def pack(item: tuple[torch.nn.Linear, tuple[int, int]]) -> None:
            module, key = item
            with torch.no_grad():
                weight = module.weight.detach().contiguous()
                self._packed[id(module)] = torch.ops.mkl._mkl_reorder_linear_weight(weight, self.batch_hint)
            self._packed_version[id(module)] = key

        with ThreadPoolExecutor(max_workers=max(1, torch.get_num_threads())) as pool:
            list(pool.map(pack, stale))
        return len(stale)

    @contextmanager
    def active(self) -> Iterator[None]:
        """Within the block, every linear of the model multiplies through its packed weight."""
        self.refresh()
        for module in self.modules:
            module.forward = types.MethodType(_packed_forward(self._packed[id(module)]), module)
        try:
            yield
        finally:
            for module in self.modules:
                del module.forward


def _packed_forward(packed: torch.Tensor):
    def forward(module: torch.nn.Linear, x: torch.Tensor) -> torch.Tensor:
        if torch.is_grad_enabled() or x.dtype != torch.float32:
            return torch.nn.functional.linear(x, module.weight, module.bias)
        rows = x.numel() // x.shape[-1]
        return torch.ops.mkl._mkl_linear(x, packed, module.weight, module.bias, rows)

    return forward
