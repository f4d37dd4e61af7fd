"""AdamW with linear warmup and a constant or cosine schedule."""

from __future__ import annotations

import math

import torch

from rlvr.config.schema import OptimConfig


def build_optimizer(model: torch.nn.Module, cfg: OptimConfig) -> torch.optim.Optimizer:
    """AdamW over the trainable parameters, with torch's fused kernel where the device has one.

    The fused kernel updates each parameter in one pass over (param, grad, exp_avg, exp_avg_sq);
    the ``foreach`` path makes about ten passes. On 2 CPU cores with SmolLM2-135M's 540 MB of fp32
    weights the step is memory-bound: clip + fused step 0.14 s, clip + foreach step 0.38–1.33 s
    (median 1.15 s), measured by benchmarks/optimizer_step.py.
    """
    params = [p for p in model.parameters() if p.requires_grad]
    fused = bool(params) and all(p.device.type in _FUSED_DEVICES for p in params)
    return torch.optim.AdamW(
        params,
        lr=cfg.lr,
        betas=tuple(cfg.betas),
        eps=cfg.eps,
        weight_decay=cfg.weight_decay,
        **({"fused": True} if fused else {"foreach": True}),
    )


_FUSED_DEVICES = ("cpu", "cuda")


def lr_factor(step: int, total: int, cfg: OptimConfig) -> float:
    """Multiplier of the peak lr at optimizer step ``step`` (0-based) of ``total``."""
    if cfg.warmup_steps and step < cfg.warmup_steps:
        return (step + 1) / cfg.warmup_steps
    if cfg.schedule == "constant":
        return 1.0
    span = max(total - cfg.warmup_steps, 1)
    progress = min((step - cfg.warmup_steps) / span, 1.0)
    return cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress))


def build_scheduler(optimizer: torch.optim.Optimizer, total: int, cfg: OptimConfig):
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: lr_factor(step, total, cfg))
