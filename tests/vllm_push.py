"""A policy perturbed and pushed to a vLLM engine for the length of a ``with`` block, then restored
and pushed back (the weight-update tests of tests/test_rollout_vllm.py and tests/test_vision_vllm.py)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch


@contextmanager
def perturbed_and_pushed(model: torch.nn.Module, sync, engine, scale: float) -> Iterator[int]:
    """Add noise of ``scale`` × each parameter's mean magnitude (seed 0), push it; yield the pushed
    version. On exit the original weights return to the model and to vLLM."""
    original = {k: v.clone() for k, v in model.state_dict().items()}
    version = engine.policy_version
    try:
        generator = torch.Generator().manual_seed(0)
        with torch.no_grad():
            for p in model.parameters():
                p.add_(torch.randn(p.shape, generator=generator) * scale * p.abs().mean())
        sync.push(model, version + 1)
        yield version + 1
    finally:
        model.load_state_dict(original)
        sync.push(model, version + 2)
