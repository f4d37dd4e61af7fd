"""The optimizer and learning-rate schedule: hand-computed schedule values, fused == foreach AdamW."""

from __future__ import annotations

import math

import pytest
import torch

from rlvr.config.schema import OptimConfig
from rlvr.train.learn.optim import build_optimizer, build_scheduler, lr_factor


def test_warmup_then_constant() -> None:
    cfg = OptimConfig(warmup_steps=4, schedule="constant")
    assert [lr_factor(s, 10, cfg) for s in range(6)] == [0.25, 0.5, 0.75, 1.0, 1.0, 1.0]


def test_cosine_decays_to_the_floor() -> None:
    cfg = OptimConfig(warmup_steps=2, schedule="cosine", min_lr_ratio=0.1)
    assert lr_factor(2, 12, cfg) == pytest.approx(1.0)
    # halfway through the 10 post-warmup steps: 0.1 + 0.9 * 0.5 * (1 + cos(pi / 2))
    assert lr_factor(7, 12, cfg) == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi / 2)))
    assert lr_factor(12, 12, cfg) == pytest.approx(0.1)
    assert lr_factor(50, 12, cfg) == pytest.approx(0.1)  # clamped past the end


def _model(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))


def test_cpu_uses_the_fused_kernel_and_matches_foreach() -> None:
    cfg = OptimConfig(lr=1e-2, warmup_steps=0, weight_decay=0.01)
    fused_model, reference = _model(0), _model(0)
    optimizer = build_optimizer(fused_model, cfg)
    assert optimizer.defaults["fused"] is True
    ref_opt = torch.optim.AdamW(
        reference.parameters(), lr=cfg.lr, betas=cfg.betas, eps=cfg.eps, weight_decay=0.01, foreach=True
    )
    x, y = torch.randn(32, 8, generator=torch.Generator().manual_seed(1)), torch.arange(32) % 3
    for _ in range(5):
        for model, opt in ((fused_model, optimizer), (reference, ref_opt)):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
    for a, b in zip(fused_model.parameters(), reference.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    moved = [(a - b).abs().max() for a, b in zip(fused_model.parameters(), _model(0).parameters())]
    assert max(moved) > 1e-3  # the comparison is not vacuous: five steps moved the weights


def test_scheduler_scales_the_peak_lr() -> None:
    cfg = OptimConfig(lr=0.1, warmup_steps=2)
    optimizer = build_optimizer(_model(0), cfg)
    scheduler = build_scheduler(optimizer, 10, cfg)
    seen = []
    for _ in range(3):
        seen.append(scheduler.get_last_lr()[0])
        optimizer.step()
        scheduler.step()
    assert seen == pytest.approx([0.05, 0.1, 0.1])
