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
from rlvr.errors import RlvrError
from rlvr.models.precision import precision_of
from rlvr.rollout.base import RolloutEngine
from rlvr.rollout.from_config import build_engine, build_hf_engine
from rlvr.rollout.hf_engine import HFEngine
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


def eval_weights(cfg: RunConfig, fsdp: bool) -> str:
    """``eval.weights`` resolved for this run: ``sampler``, ``master`` or ``both``. ``auto`` is both
    where the HF engine samples from a copy in another dtype (a bf16 copy of fp32 master weights), whose
    greedy answers can differ from the weights the checkpoint saves; else the sampler's alone."""
    chosen = cfg.eval.weights
    copy = cfg.rollout.engine == "hf" and precision_of(cfg).rollout_dtype is not None
    if chosen == "auto":
        return "both" if copy and not fsdp else "sampler"
    if chosen != "sampler" and fsdp:
        raise RlvrError(
            f"eval.weights={chosen}: under FSDP2 the master weights are sharded over the ranks and no "
            "rank holds them whole; use eval.weights=sampler and evaluate the checkpoint with `rlvr eval`"
        )
    return chosen


def master_engine(cfg: RunConfig, policy: torch.nn.Module, tokenizer: Any) -> HFEngine:
    """An HF engine over the learner's own module (the master weights, in their own dtype), for
    evaluating them beside what the run samples from (``eval.weights``)."""
    return build_hf_engine(cfg, policy, tokenizer)
