"""The rollout engine a run config asks for."""

from __future__ import annotations

import json
import os
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
    return build_hf_engine(cfg, model, tokenizer)


def build_hf_engine(cfg: RunConfig, model: torch.nn.Module, tokenizer) -> HFEngine:  # noqa: ANN001
    """An HF engine over ``model`` with the run's rollout settings, whatever ``rollout.engine`` is."""
    return HFEngine(
        model,
        tokenizer,
        max_batch_sequences=cfg.rollout.max_batch_sequences,
        seed=cfg.seed,
        packed_weights=cfg.rollout.packed_weights,
        share_prefix=cfg.rollout.share_prefix,
    )


# Set by the Ray launcher (rlvr.train.scale.ray_launch) in each trainer rank's process: the URL of the vLLM
# server Ray placed beside that rank. An environment variable, not rollout.vllm.url, so that the
# run's saved config.yaml does not name a server that is gone after the run (a --resume places anew).
PLACED_SERVER_URL = "RLVR_VLLM_PLACED_URL"


def weight_transfer_of(cfg: RunConfig, on_cuda: bool) -> str:
    """``rollout.vllm.weight_transfer`` resolved: ``auto`` is NCCL for a policy on CUDA with a server
    on a GPU of its own (``rollout.vllm.gpus``), else shm (NCCL cannot join two ranks on one GPU)."""
    v = cfg.rollout.vllm
    if v.weight_transfer != "auto":
        return v.weight_transfer
    return "nccl" if on_cuda and v.gpus is not None else "shm"


def vllm_server_args(cfg: RunConfig, transfer: str, on_gpu: bool) -> list[str]:
    """The server file's arguments (``rlvr/rollout/vllm_server.py``) for ``cfg``'s model; ``on_gpu``:
    the server has a GPU (GPU memory fraction), else the CPU backend (KV cache in bytes)."""
    from rlvr.models import resolve_model_path

    v = cfg.rollout.vllm
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
    if on_gpu:
        args += ["--gpu-memory-utilization", str(v.gpu_memory_utilization)]
    else:
        args += ["--kv-cache-bytes", str(int(v.kv_cache_gib * 2**30))]
    if cfg.model.lora.r and v.lora_sync == "adapter":  # the server takes the policy's adapters
        args += ["--max-lora-rank", str(cfg.model.lora.r)]
    if v.llm_kwargs:
        args += ["--llm-kwargs", json.dumps(v.llm_kwargs)]
    return args


def build_vllm_engine(cfg: RunConfig, model: torch.nn.Module, tokenizer, log_dir: Path | None = None):
    """A :class:`~rlvr.rollout.vllm_engine.VLLMEngine`: on the server at ``rollout.vllm.url`` (or the
    one Ray placed for this rank: :data:`PLACED_SERVER_URL`), given this policy at once; else on a
    server started here, as a child process, with its log in ``log_dir``."""
    from rlvr.rollout.vllm_engine import VLLMEngine
    from rlvr.rollout.vllm_process import VLLMServer, find_vllm_python

    v = cfg.rollout.vllm
    device = next(model.parameters()).device
    transfer = weight_transfer_of(cfg, device.type == "cuda")
    url = v.url or os.environ.get(PLACED_SERVER_URL)
    if url:
        server = VLLMServer.connect(url, timeout_s=v.request_timeout_s)
    else:
        server = VLLMServer.start(
            find_vllm_python(v.python),
            vllm_server_args(cfg, transfer, on_gpu=device.type != "cpu" or v.gpus is not None),
            log_dir,
            startup_timeout_s=v.startup_timeout_s,
            timeout_s=v.request_timeout_s,
            env={"CUDA_VISIBLE_DEVICES": v.gpus} if v.gpus is not None else None,
            log_name=_server_log_name(),
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
        if url:  # a running server holds whatever it was given last: give it this policy
            _check_lora(engine, cfg, url)
            engine.load_policy(model, 0)
        return engine
    except BaseException:
        server.close()
        raise


def _server_log_name() -> str:
    """Under torchrun every rank starts a server of its own: one log each (rank 0's keeps the name)."""
    rank = int(os.environ.get("RANK", 0))
    return f"vllm_server.rank{rank}.log" if rank else "vllm_server.log"


def _check_lora(engine, cfg: RunConfig, url: str) -> None:
    """A server reached by URL must take adapters of the policy's rank when they are to be pushed."""
    if not cfg.model.lora.r or cfg.rollout.vllm.lora_sync != "adapter":
        return
    served = int(engine.server.health().get("max_lora_rank") or 0)
    if served < cfg.model.lora.r:
        raise RlvrError(
            f"the vLLM server at {url} serves LoRA adapters up to rank {served}, and "
            f"model.lora.r={cfg.model.lora.r}: start that server with --max-lora-rank "
            f"{cfg.model.lora.r}, or set rollout.vllm.lora_sync=merged"
        )
