"""The rollout engine and the weight sync that feeds it, chosen from the config.

Where the engine's weights live decides how the learner's updates reach it
(:mod:`rlvr.train.loop.weight_sync`):

- a vLLM server holds its own copy (sync or async; under FSDP2 each rank's own server, a push
  gathers the parameters one by one): :class:`~rlvr.rollout.vllm_engine.VLLMWeightSync`;
- in one process, synchronous, same dtype: the engine samples from the learner's own module and
  a push copies nothing (:class:`InProcessSync`);
- otherwise the engine samples from its own copy — while the learner trains (asynchronous
  collection), while it trains shards (FSDP2: a full copy), or in another dtype (a bf16 copy of
  fp32 master weights, :mod:`rlvr.models.precision`) — and each push copies the new weights in,
  cast to the copy's dtype.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import torch

from rlvr.config import RunConfig
from rlvr.models.precision import precision_of
from rlvr.rollout.base import RolloutEngine
from rlvr.rollout.from_config import build_engine
from rlvr.rollout.vllm_engine import VLLMWeightSync
from rlvr.train.loop.async_collect import CopySync
from rlvr.train.loop.weight_sync import InProcessSync
from rlvr.train.scale.fsdp import FullCopySync

Sync = InProcessSync | CopySync | FullCopySync | VLLMWeightSync


def engine_and_sync(
    cfg: RunConfig, policy: torch.nn.Module, tokenizer: Any, run_dir: Path, fsdp: bool
) -> tuple[RolloutEngine, Sync]:
    """The engine the collector samples with, and the sync the loop pushes new weights through."""
    rollout_dtype = precision_of(cfg).rollout_dtype
    if cfg.rollout.engine == "vllm":
        engine = build_engine(cfg, policy, tokenizer, log_dir=run_dir)
        return engine, VLLMWeightSync(engine)
    if not fsdp and cfg.train.max_staleness is None and rollout_dtype is None:
        engine = build_engine(cfg, policy, tokenizer)
        return engine, InProcessSync(engine)
    sampler = copy.deepcopy(policy).requires_grad_(False)
    engine = build_engine(cfg, sampler.to(rollout_dtype) if rollout_dtype else sampler, tokenizer)
    return engine, FullCopySync(engine) if fsdp else CopySync(engine)
