"""The rollout engine a run config asks for."""

from __future__ import annotations

import torch

from rlvr.config import RunConfig
from rlvr.rollout.hf_engine import HFEngine


def build_engine(cfg: RunConfig, model: torch.nn.Module, tokenizer) -> HFEngine:
    """``rollout.engine`` over ``model`` (today: the HF engine, sampling from the module it is given)."""
    return HFEngine(
        model,
        tokenizer,
        max_batch_sequences=cfg.rollout.max_batch_sequences,
        seed=cfg.seed,
        packed_weights=cfg.rollout.packed_weights,
    )
