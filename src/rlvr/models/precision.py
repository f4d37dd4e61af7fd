"""Numeric precision of training and sampling: fp32, bf16/fp16 mixed, pure bf16/fp16, auto.

``model.precision`` picks how the learner computes:

- ``fp32``: fp32 weights, fp32 compute (the reference; rlvr's default).
- ``bf16-mixed`` / ``fp16-mixed``: fp32 *master* weights and optimizer state; forward and
  backward passes run under ``torch.autocast`` in the low dtype (matmuls on AMX / tensor cores;
  reductions, norms and the log-softmax of the logprobs stay in fp32). fp16 adds dynamic loss
  scaling (``torch.amp.GradScaler``), as fp16 gradients underflow without it.
- ``bf16`` / ``fp16``: the weights themselves (and so the optimizer state) are in the low dtype.
  Cheapest, least exact: small updates round away. For inference-like uses and comparisons.
- ``auto``: ``bf16-mixed`` where the device computes bf16 natively (a CUDA GPU with bf16 support;
  a CPU with AMX-bf16 or AVX512-bf16), else ``fp32``; the start-up header says which and why.

``rollout.weights_dtype`` picks what the engine samples from: ``policy`` (the learner's module as
it is: no copy), ``bf16`` / ``fp16`` (a low-precision copy, refreshed by the weight sync after
every update), or ``auto`` (a bf16 copy under ``bf16-mixed``, an fp16 copy under ``fp16-mixed``,
the policy itself otherwise). A copy in another dtype than the trainer computes in is where the
sampler/trainer mismatch comes from; ``mismatch/*`` metrics measure it every step and the
TIS / masked-IS corrections in ``rlvr.algo`` correct for it (docs/precision.md).
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path

import torch

_LOW = {"bf16": torch.bfloat16, "fp16": torch.float16}
DTYPE_NAMES = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}


@dataclass(frozen=True)
class Precision:
    """A resolved ``model.precision`` (+ ``rollout.weights_dtype``) for one device."""

    mode: str  # fp32 | bf16-mixed | fp16-mixed | bf16 | fp16 (never auto)
    device_type: str  # cpu | cuda | ...
    rollout_dtype: torch.dtype | None  # None: the engine samples from the policy module itself
    reason: str = ""  # why ``auto`` chose this mode (start-up header)

    @property
    def param_dtype(self) -> torch.dtype:
        """The dtype the policy's (master) weights and optimizer state live in."""
        return _LOW[self.mode] if self.mode in _LOW else torch.float32

    @property
    def autocast_dtype(self) -> torch.dtype | None:
        """The dtype forward/backward passes autocast to (mixed modes), else None."""
        return _LOW[self.mode.removesuffix("-mixed")] if self.mode.endswith("-mixed") else None

    @property
    def loss_scaling(self) -> bool:
        """fp16 mixed precision scales the loss (dynamic GradScaler); bf16 needs none."""
        return self.mode == "fp16-mixed"

    @property
    def compute_name(self) -> str:
        """The dtype the trainer's matmuls run in: fp32, bf16 or fp16."""
        dtype = self.autocast_dtype or self.param_dtype
        return DTYPE_NAMES[dtype]

    def autocast(self) -> AbstractContextManager:
        """The context a training or scoring forward pass runs under (a no-op outside mixed modes)."""
        if self.autocast_dtype is None:
            return nullcontext()
        return torch.autocast(self.device_type, dtype=self.autocast_dtype)

    def describe(self) -> str:
        """One line for the start-up header."""
        master = DTYPE_NAMES[self.param_dtype]
        rollout = (
            "the policy's own weights"
            if self.rollout_dtype is None
            else (f"a {DTYPE_NAMES[self.rollout_dtype]} copy, refreshed after every update")
        )
        text = (
            f"{self.mode} (weights and optimizer {master}, compute {self.compute_name}; "
            f"sampling from {rollout})"
        )
        return f"{text}; {self.reason}" if self.reason else text


def native_low_precision(device: str) -> tuple[bool, str]:
    """Whether ``device`` computes bf16 natively, and what says so (for ``auto``)."""
    kind = torch.device(device).type
    if kind == "cuda":
        if torch.cuda.is_available() and torch.cuda.is_bf16_supported(including_emulation=False):
            return True, f"{torch.cuda.get_device_name(torch.device(device))} supports bf16"
        return False, "this GPU has no native bf16"
    if kind == "cpu":
        flags = cpu_flags()
        found = [f for f in ("amx_bf16", "avx512_bf16") if f in flags]
        if found:
            return True, f"the CPU has {' and '.join(found)}"
        return (
            False,
            "the CPU has neither amx_bf16 nor avx512_bf16 (bf16 would be emulated, slower than fp32)",
        )
    return False, f"no bf16 detection for device type '{kind}'"


def cpu_flags(path: Path = Path("/proc/cpuinfo")) -> set[str]:
    """The CPU feature flags (Linux ``/proc/cpuinfo``; torch's own checks elsewhere)."""
    try:
        for line in path.read_text().splitlines():
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    flags = set()
    if getattr(torch.cpu, "_is_amx_tile_supported", lambda: False)():
        flags.add("amx_bf16")
    if getattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False)():
        flags.add("avx512_bf16")
    return flags


def resolve_precision(mode: str, weights_dtype: str, device: str) -> Precision:
    """``model.precision`` and ``rollout.weights_dtype`` resolved for ``device``."""
    reason = ""
    if mode == "auto":
        native, why = native_low_precision(device)
        mode = "bf16-mixed" if native else "fp32"
        reason = f"auto chose {mode}: {why}"
    if weights_dtype == "auto":
        rollout = _LOW[mode.removesuffix("-mixed")] if mode.endswith("-mixed") else None
    elif weights_dtype == "policy":
        rollout = None
    else:
        rollout = _LOW[weights_dtype]
    if rollout is not None and mode in _LOW and _LOW[mode] == rollout:
        rollout = None  # the policy already is in that dtype: no copy to keep
    return Precision(mode, torch.device(device).type, rollout, reason)


def precision_of(cfg) -> Precision:  # noqa: ANN001 (RunConfig; config imports models lazily)
    """The run's resolved precision."""
    return resolve_precision(cfg.model.precision, cfg.rollout.weights_dtype, cfg.model.device)


def grad_scaler(precision: Precision) -> torch.amp.GradScaler | None:
    """fp16-mixed's dynamic loss scaler (None otherwise)."""
    if not precision.loss_scaling:
        return None
    return torch.amp.GradScaler(precision.device_type)
