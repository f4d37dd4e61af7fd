"""The sections of the run config for scale-out and logging: ``rollout.vllm``, ``cluster`` and ``log``
(re-exported by :mod:`rlvr.config.schema`, where the rest of the config lives)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator

from rlvr.config.section import Section


class VLLMConfig(Section):
    """The vLLM engine (``rollout.engine: vllm``): a server process in vLLM's own environment."""

    url: str | None = Field(
        None,
        description="A running rlvr vLLM server (http://host:port, started with python "
        "src/rlvr/rollout/vllm_server.py) to use instead of starting one; it must serve the same model. "
        "None: rlvr starts its own and stops it at exit.",
    )
    python: str | None = Field(
        None,
        description="Python of the environment with vLLM; None: $RLVR_VLLM_PYTHON, else "
        ".venv-vllm/bin/python in the current directory or the rlvr checkout (`make vllm` creates it).",
    )
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        "auto", description="vLLM's weight and compute dtype; auto: model.dtype."
    )
    max_model_len: int = Field(2048, ge=16, description="Longest prompt + completion vLLM accepts.")
    kv_cache_gib: float = Field(0.5, gt=0, description="KV-cache memory on CPU, GiB (vLLM's CPU backend).")
    gpu_memory_utilization: float = Field(
        0.3, gt=0, le=1, description="On GPU: the fraction of GPU memory vLLM takes (weights + KV cache)."
    )
    enforce_eager: bool = Field(
        True, description="No CUDA graphs / compilation (faster start; CPU needs it)."
    )
    gpus: str | None = Field(
        None,
        description="CUDA_VISIBLE_DEVICES of the server (e.g. '1': a GPU other than the learner's); "
        "None: inherited.",
    )

    @field_validator("gpus", mode="before")
    @classmethod
    def _gpu_ids_as_text(cls, value: Any) -> Any:
        """``rollout.vllm.gpus=1`` on the command line arrives as the number 1: one GPU id."""
        return str(value) if isinstance(value, int) and not isinstance(value, bool) else value

    weight_transfer: Literal["auto", "shm", "nccl"] = Field(
        "auto",
        description="How updated weights reach vLLM: shm (a file in rollout.vllm.shm_dir, same host, any "
        "device), nccl (a broadcast from the learner's GPU to the server's, which must be another GPU; "
        "not yet run on a GPU); auto: nccl when the policy is on CUDA and rollout.vllm.gpus is set, "
        "else shm.",
    )
    shm_dir: str = Field(
        "/dev/shm", description="Directory for the shm weight and adapter hand-over (memory-backed)."
    )
    lora_sync: Literal["adapter", "merged"] = Field(
        "adapter",
        description="With model.lora.r > 0, what reaches vLLM after an update: adapter (only the LoRA "
        "adapters, loaded by vLLM's add_lora; the server is started with LoRA on) or merged (the base "
        "weights with the adapters added, through rollout.vllm.weight_transfer).",
    )
    startup_timeout_s: float = Field(
        600.0, gt=0, description="Longest wait for the server to load the model."
    )
    request_timeout_s: float = Field(1800.0, gt=0, description="Longest wait for one generate or update.")
    llm_kwargs: dict[str, Any] = Field(
        default_factory=dict, description="Further keyword arguments of vllm.LLM (e.g. tensor_parallel_size)."
    )


class WandbConfig(Section):
    project: str = Field(..., min_length=1, description="Weights & Biases project the run is logged to.")
    mode: Literal["offline", "online"] = Field(
        "offline",
        description="offline: write the wandb run directory under the run directory, no network (upload "
        "later with `wandb sync`); online: stream to the wandb server.",
    )
    entity: str | None = Field(None, description="wandb entity (user or team); None: wandb's default.")


class LogConfig(Section):
    """Where metrics go besides metrics.jsonl, which is always written and stays the record."""

    tokens: bool = Field(
        True,
        description="samples.jsonl rows also hold each response token's text and sampling logprob (and "
        "its advantage where advantages differ by token): what `rlvr report` colours tokens by.",
    )
    tensorboard: bool = Field(
        False, description="Also write every metric as a TensorBoard scalar under <run>/tensorboard/."
    )
    wandb: WandbConfig | None = Field(
        None, description="Also log every metric to Weights & Biases, e.g. {project: rlvr, mode: offline}."
    )
    every_steps: int = Field(
        1,
        ge=1,
        description="Without a terminal (a batch job, output to a file): print a line every N training "
        "steps (step, reward, accuracy, tokens/s, elapsed, ETA) in place of the progress bar.",
    )

    @field_validator("tensorboard")
    @classmethod
    def _tensorboard_installed(cls, on: bool) -> bool:
        from rlvr.config.extras import require

        if on:
            require("tensorboard")
        return on

    @field_validator("wandb")
    @classmethod
    def _wandb_installed(cls, value: WandbConfig | None) -> WandbConfig | None:
        from rlvr.config.extras import require

        if value is not None:
            require("wandb")
        return value


class ClusterConfig(Section):
    ray: bool = Field(
        False,
        description="Place the trainer ranks as Ray actors (cluster.ranks of them) on a Ray cluster, "
        "each running the torchrun path (torch.distributed, train.distributed); with rollout.engine=vllm "
        "(and no rollout.vllm.url) also one vLLM server per rank, on the rank's node. Needs the ray "
        "extra. docs/scale.md.",
    )
    ranks: int = Field(2, ge=1, description="Trainer ranks (Ray actors) with cluster.ray.")
    cpus_per_rank: int = Field(1, ge=1, description="CPUs Ray reserves for each rank's actor.")
    vllm_cpus: int = Field(
        2,
        ge=1,
        description="CPUs Ray reserves for each rank's vLLM server (cluster.ray with rollout.engine=vllm): "
        "its engine and HTTP threads beside a GPU; on a CPU-only node the cores it generates with. The "
        "server also gets one GPU when model.device is CUDA.",
    )
    address: str | None = Field(
        None, description="Address of a running Ray cluster; None starts a local one for the run."
    )
    start_timeout_s: float = Field(
        300.0, gt=0, description="How long the ranks' actors may take to start before the run fails."
    )
