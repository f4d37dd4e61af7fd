"""The rollout engine a run config asks for."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from rlvr.config import RunConfig
from rlvr.errors import RlvrError
from rlvr.rollout.hf_engine import HFEngine, _default_stop_ids


def build_engine(cfg: RunConfig, model: torch.nn.Module, tokenizer, log_dir: Path | None = None):
    """``rollout.engine`` over ``model``: the HF engine samples from the module it is given; the vLLM
    engine starts (or reaches) a server loaded with ``model.name`` and is synced from ``model`` by a
    :class:`~rlvr.rollout.vllm_engine.VLLMWeightSync`. ``log_dir`` holds the vLLM server's log."""
    if cfg.rollout.engine == "vllm":
        return build_vllm_engine(cfg, model, tokenizer, log_dir)
    return HFEngine(
        model,
        tokenizer,
        max_batch_sequences=cfg.rollout.max_batch_sequences,
        seed=cfg.seed,
        packed_weights=cfg.rollout.packed_weights,
    )


def build_vllm_engine(cfg: RunConfig, model: torch.nn.Module, tokenizer, log_dir: Path | None = None):
    from rlvr.models import resolve_model_path
    from rlvr.rollout.vllm_engine import VLLMEngine
    from rlvr.rollout.vllm_process import VLLMServer, find_vllm_python

    v = cfg.rollout.vllm
    device = next(model.parameters()).device
    transfer = v.weight_transfer
    if transfer == "auto":  # NCCL cannot join two ranks on one GPU: a server without its own GPU gets files
        transfer = "nccl" if device.type == "cuda" and v.gpus is not None else "shm"
    if v.url:
        server = VLLMServer.connect(v.url, timeout_s=v.request_timeout_s)
    else:
        python = find_vllm_python(v.python)
        args = [
            "--model",
            resolve_model_path(cfg.model.name),
            "--dtype",
            cfg.model.dtype if v.dtype == "auto" else v.dtype,
            "--seed",
            str(cfg.seed),
            "--max-model-len",
            str(v.max_model_len),
            "--weight-transfer",
            transfer,
            "--enforce-eager" if v.enforce_eager else "--no-enforce-eager",
        ]
        if device.type == "cpu" and v.gpus is None:
            args += ["--kv-cache-bytes", str(int(v.kv_cache_gib * 2**30))]
        else:
            args += ["--gpu-memory-utilization", str(v.gpu_memory_utilization)]
        if cfg.model.lora.r and v.lora_sync == "adapter":
            args += ["--max-lora-rank", str(cfg.model.lora.r)]
        if v.llm_kwargs:
            args += ["--llm-kwargs", json.dumps(v.llm_kwargs)]
        server = VLLMServer.start(
            python,
            args,
            log_dir,
            startup_timeout_s=v.startup_timeout_s,
            timeout_s=v.request_timeout_s,
            env={"CUDA_VISIBLE_DEVICES": v.gpus} if v.gpus is not None else None,
        )
    try:
        engine = VLLMEngine(
            server,
            tokenizer,
            _default_stop_ids(model, tokenizer),
            seed=cfg.seed,
            weight_transfer=transfer,
            shm_dir=v.shm_dir,
            lora_sync=v.lora_sync,
        )
        if v.url:  # a running server holds whatever it was given last: give it this policy
            _check_lora(engine, cfg)
            engine.load_policy(model, 0)
        return engine
    except BaseException:
        server.close()
        raise


def _check_lora(engine, cfg: RunConfig) -> None:
    """A server reached by URL must take adapters of the policy's rank when they are to be pushed."""
    if not cfg.model.lora.r or cfg.rollout.vllm.lora_sync != "adapter":
        return
    served = int(engine.server.health().get("max_lora_rank") or 0)
    if served < cfg.model.lora.r:
        raise RlvrError(
            f"rollout.vllm.url={cfg.rollout.vllm.url} serves LoRA adapters up to rank {served}, and "
            f"model.lora.r={cfg.model.lora.r}: start that server with --max-lora-rank "
            f"{cfg.model.lora.r}, or set rollout.vllm.lora_sync=merged"
        )
