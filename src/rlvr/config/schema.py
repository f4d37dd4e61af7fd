"""The one typed config: every knob, its default and what it does (docs/design.md, principle 4).

Unknown keys are errors (``extra="forbid"``), so a typo never silently falls back to a default.
The few defaults that depend on the data source (the default job's chain_sum demonstration and
rewards, a task's config, per-group eval) are filled by :mod:`rlvr.config.defaults` before the
values are validated; settings that must agree with others are checked (or followed) by
:mod:`rlvr.config.dependent` after (it installs itself in :data:`AFTER_VALIDATION`, so this
module never imports it back).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from pydantic import Field, ValidationInfo, model_validator

from rlvr.config.algo import AlgoConfig, CriticConfig  # noqa: F401 - CriticConfig re-exported
from rlvr.config.data_plan import CurriculumConfig, ReplayConfig, SelectionConfig, SourceItem
from rlvr.config.evaluation import EvalConfig
from rlvr.config.exploration import (
    IntentConfig,
    ParamNoiseConfig,
    TemperatureControlConfig,
    check_exploration,
)
from rlvr.config.outer import ClusterConfig, LogConfig, VLLMConfig
from rlvr.config.rewards import RewardItem, RewardsConfig, ShapingItem  # noqa: F401 - re-exported
from rlvr.config.roles import RolesConfig
from rlvr.config.section import Section
from rlvr.config.stages import (
    DistillConfig,
    DpoConfig,
    MixConfig,
    RewardModelConfig,
    RftConfig,
    SftConfig,
    StageItem,
)


class LoraConfig(Section):
    r: int = Field(0, ge=0, description="LoRA rank; 0 trains every weight (no adapters).")
    alpha: float = Field(16.0, gt=0, description="LoRA scaling numerator (the update is alpha/r · BA).")
    dropout: float = Field(0.0, ge=0, lt=1, description="Dropout on the adapters' input.")
    target_modules: list[str] | Literal["all-linear"] = Field(
        "all-linear", description="Module names that get adapters, or every linear layer but the output."
    )


class ModelConfig(Section):
    name: str = Field(
        "smollm2-135m-instruct",
        description="Built-in name, local HF directory or hub id (downloaded unless HF_HUB_OFFLINE=1).",
    )
    precision: Literal["fp32", "bf16-mixed", "fp16-mixed", "bf16", "fp16", "auto"] = Field(
        "fp32",
        description="fp32; bf16-mixed / fp16-mixed: fp32 master weights and optimizer, forward and backward "
        "under autocast (fp16 with loss scaling); bf16 / fp16: the weights themselves in that dtype; auto: "
        "bf16-mixed where the CPU (AMX/AVX512-bf16) or GPU computes bf16 natively, else fp32 "
        "(docs/precision.md).",
    )
    device: str = Field("cpu", description="Torch device for the policy: cpu, cuda, cuda:1, …")
    reference: str | None = Field(
        None,
        description="The KL / DPO reference model when it is not the starting policy: built-in name, "
        "HF directory, hub id or an rlvr checkpoint. None: the starting policy (model.name).",
    )
    threads: int | None = Field(None, ge=1, description="torch intra-op threads; None = all cores.")
    lora: LoraConfig = Field(default_factory=LoraConfig)
    vision_tower: Literal["trained", "frozen"] = Field(
        "trained",
        description="A vision-language policy's image encoder: trained with the rest, or frozen (the "
        "connector and the language side still train; docs/vision.md). Text-only models: trained.",
    )
    text_side: Literal["trained", "frozen"] = Field(
        "trained",
        description="A vision-language policy's language model and LM head: trained, or frozen so that "
        "only the connector (and a trained vision tower) learn, as in LLaVA's first stage (docs/vision.md).",
    )

    @model_validator(mode="before")
    @classmethod
    def _no_dtype(cls, values: Any) -> Any:
        if isinstance(values, dict) and "dtype" in values:
            raise ValueError(
                f"model.dtype={values['dtype']!r} was replaced by model.precision: bf16 (weights and "
                "optimizer in bf16), bf16-mixed (fp32 master weights, bf16 compute), fp16, fp16-mixed or fp32"
            )
        return values

    @property
    def dtype(self) -> str:
        """The dtype name the policy's (master) weights are loaded in."""
        return {"bf16": "bfloat16", "fp16": "float16"}.get(self.precision, "float32")


class DataConfig(Section):
    source: Literal["reasoning_gym", "file", "hf", "env"] = Field(
        "reasoning_gym",
        description="Where prompts come from; env: an environment's own generator (data.task: search, …). "
        "Default: file when data.path names a data file, hf for another data.path, else reasoning_gym.",
    )
    task: str | None = Field(
        "chain_sum",
        description="reasoning-gym task (source=reasoning_gym) or environment dataset (source=env); "
        "unused (null) for files and HF datasets.",
    )
    task_config: dict[str, Any] = Field(
        default_factory=dict,
        description="Keyword arguments of the task's config; default: the task's own, except for the "
        "default job (chain_sum: two terms of one or two digits).",
    )
    eval_task_config: dict[str, Any] | None = Field(
        None,
        description="reasoning_gym: the task config of the held-out problems alone (e.g. harder chain_sum "
        "than training starts from: more terms or digits); None: data.task_config.",
    )
    path: str | None = Field(
        None, description="JSONL/JSON/Parquet/CSV/TSV file (source=file) or dataset dir / hub id (hf)."
    )
    split: str = Field("train", description="Dataset split trained on (source=hf).")
    eval_path: str | None = Field(
        None,
        description="Held-out data apart from the training data (TRL's eval_dataset, verl's val_files): a "
        "data file or an HF dataset dir / hub id, read with the same columns. The training data is then "
        "not split. Files and HF datasets only.",
    )
    eval_split: str | None = Field(
        None,
        description="HF split held out: of data.eval_path when given, else of data.path. Default: the "
        "dataset's 'test' split, else its 'validation' split, when it has one (docs/data.md).",
    )
    question_key: str = Field(
        "question",
        description="Column holding the question text (or a chat message list). With the default, rows "
        "without a 'question' column are read in TRL's and verl's forms: 'prompt' (text or messages), "
        "'messages' (docs/data.md).",
    )
    answer_key: str | None = Field(
        "answer",
        description="Column holding the reference answer; a dotted path reads into a dict column "
        "(reward_model.ground_truth). With the default, rows without 'answer' take verl's "
        "reward_model.ground_truth, TRL's 'completion', or the chat's final assistant turn. "
        "null: no references (label-free rewards).",
    )
    messages_key: str | None = Field(None, description="Column holding a full chat message list instead.")
    id_key: str | None = Field(None, description="Column holding a stable example id.")
    train_size: int = Field(5000, ge=1, description="Training prompts generated (reasoning_gym).")
    eval_size: int | None = Field(
        None,
        ge=0,
        description="Held-out prompts for evaluation (disjoint from training); 0: none. Default: 200 "
        "generated problems (reasoning_gym, env); all of an eval source (data.eval_path / eval_split); "
        "else 10% of a file's or dataset's rows, at most 200 (docs/data.md).",
    )
    seed: int = Field(0, description="Seed for generating/splitting data.")
    system_prompt: str | None = Field(
        None, description="System message; None keeps the chat template's default."
    )
    few_shot: list[tuple[str, str]] = Field(
        default_factory=list,
        description="Demonstrations [question, reply] shown before every question; default: none, "
        "except for the default job (chain_sum: one worked arithmetic problem).",
    )
    answer_format: str | None = Field(
        "answer_tag",
        description="Instruction appended to every text question: answer_tag, boxed, none or literal text. "
        "Default: answer_tag for generated tasks; none for files and HF datasets (prompts as written).",
    )
    selection: SelectionConfig = Field(default_factory=SelectionConfig)
    curriculum: CurriculumConfig = Field(default_factory=CurriculumConfig)
    replay: ReplayConfig = Field(default_factory=ReplayConfig)
    sources: list[SourceItem] = Field(
        default_factory=list,
        description="A weighted mixture of sources, each scored by its own reward (docs/data.md); when "
        "set, data.source/task/path are not read.",
    )

    @model_validator(mode="after")
    def _curriculum_and_eval_config(self) -> DataConfig:
        if self.curriculum.kind != "none" and self.sources:
            raise ValueError(
                f"data.curriculum.kind={self.curriculum.kind} with data.sources (a mixture): the mixture "
                "draws each source by its weight, a curriculum draws by difficulty; use one of them"
            )
        if self.eval_task_config is not None and (self.source != "reasoning_gym" or self.sources):
            what = "data.sources (a mixture)" if self.sources else f"data.source={self.source}"
            raise ValueError(
                f"data.eval_task_config applies to one reasoning-gym task, not to {what}; drop "
                "data.eval_task_config"
            )
        return self


class RolloutConfig(Section):
    engine: Literal["hf", "vllm"] = Field(
        "hf",
        description="Generation engine: hf (transformers in this process, any device) or vllm (a vLLM "
        "server process in its own environment: `make vllm`; rollout.vllm).",
    )
    vllm: VLLMConfig = Field(default_factory=VLLMConfig)
    prompts_per_step: int = Field(4, ge=1, description="Unique prompts sampled per training step.")
    group_size: int = Field(8, ge=1, description="Completions sampled per prompt (G).")
    temperature: float = Field(1.0, ge=0.0, description="Sampling temperature (0 = greedy).")
    top_p: float = Field(1.0, gt=0.0, le=1.0, description="Nucleus sampling mass.")
    max_new_tokens: int = Field(
        256,
        ge=1,
        description="Longest completion; longer ones are cut (finish=length). Default by data source: "
        "256, except for the default job (chain_sum: 24) and environment datasets (24 a turn).",
    )
    ignore_eos: bool = Field(
        False, description="Never stop at EOS (fixed-length completions, for benchmarks)."
    )
    max_batch_sequences: int = Field(64, ge=1, description="Sequences decoded at once (memory bound).")
    weights_dtype: Literal["auto", "policy", "bf16", "fp16"] = Field(
        "auto",
        description="What the engine samples from: policy (the learner's weights as they are, no copy), "
        "bf16 / fp16 (a copy in that dtype, refreshed after every update); auto: a bf16 copy under "
        "model.precision=bf16-mixed, an fp16 copy under fp16-mixed, the policy otherwise.",
    )
    packed_weights: Literal["auto", "on", "off"] = Field(
        "auto",
        description="CPU fp32: decode through MKL-packed copies of the weights, made for each generate "
        "call (Llama models: a fused decode step; a bf16 Llama copy on a CPU with native bf16: the fused "
        "step with oneDNN-packed weights). auto: where it was measured to pay (Llama: at most 64 "
        "sequences and max_new_tokens >= 16, >= 8 in bf16; other models: at most 16 and >= 64).",
    )
    share_prefix: bool = Field(
        True,
        description="HF engine: run the tokens that every prompt of a generate call starts with (a system "
        "prompt, few-shot examples; at least 16) once, and prefill each prompt's rest on top of their cache.",
    )
    temperature_control: TemperatureControlConfig = Field(default_factory=TemperatureControlConfig)
    ifg: IntentConfig = Field(default_factory=IntentConfig)
    param_noise: ParamNoiseConfig = Field(default_factory=ParamNoiseConfig)
    _check_exploration = model_validator(mode="after")(check_exploration)


class EnvConfig(Section):
    name: str | None = Field(
        None,
        description="Registered environment (rlvr.envs) every example plays out in over several turns; "
        "an example's metadata.env overrides it. None: single-turn completions.",
    )
    params: dict[str, Any] = Field(default_factory=dict, description="Keyword arguments of the environment.")
    max_turns: int = Field(4, ge=1, description="Model turns per episode.")
    max_tokens: int = Field(
        512, ge=1, description="Response tokens per episode (model and environment) before it is cut."
    )
    step_timeout_s: float = Field(10.0, gt=0, description="Wall-clock limit of one environment step.")
    episode_timeout_s: float | None = Field(
        None,
        gt=0,
        description="Wall-clock limit of an episode, model and environment turns together; past it the "
        "episode ends cut (finish_reason length, counted in env/episode_timeouts). None: no limit.",
    )
    max_observation_tokens: int | None = Field(
        None,
        ge=1,
        description="An environment message longer than this many tokens is cut (marked ' [...]' and "
        "counted in env/observation_truncated); None: never cut.",
    )
    threads: int = Field(8, ge=1, description="Environment steps run concurrently on this many threads.")
    reuse_kv: bool = Field(
        True,
        description="Keep each episode's KV cache between turns, so a turn prefills only the tokens added "
        "since (the environment's message); false: prefill the whole conversation every turn.",
    )


class OptimConfig(Section):
    lr: float = Field(1e-5, gt=0, description="Peak learning rate (AdamW).")
    weight_decay: float = Field(0.0, ge=0)
    betas: tuple[float, float] = Field((0.9, 0.99))
    eps: float = Field(1e-8, gt=0)
    warmup_steps: int = Field(5, ge=0, description="Optimizer steps of linear warmup.")
    schedule: Literal["constant", "cosine"] = Field("constant", description="LR after warmup.")
    min_lr_ratio: float = Field(0.1, ge=0, le=1, description="Cosine floor as a fraction of lr.")
    grad_clip: float = Field(1.0, gt=0, description="Max global gradient norm.")


class TrainConfig(Section):
    steps: int = Field(70, ge=0, description="Training steps (one rollout batch each).")
    time_limit_s: float | None = Field(
        None,
        gt=0,
        description="Stop training after this many seconds; null: none. Default: none, except for the "
        "default job (chain_sum: 450, to keep the demo under 10 min).",
    )
    time_budget_s: float | None = Field(
        None,
        gt=0,
        description="Whole-run wall-clock budget (model loading and evals included): training stops "
        "early enough for the final eval and checkpoint to fit; null: none. Default: none, except for "
        "the default job (chain_sum: 570).",
    )
    max_staleness: int | None = Field(
        None,
        ge=0,
        description="Asynchronous collection: sample the next batches in a background thread on a copy of "
        "the policy while the learner trains; each batch is sampled by the policy exactly this many updates "
        "older than the one that trains on it (fewer in the first steps; 1 is the overlap, "
        "0: async machinery, synchronous order). Runs under torchrun too. None: the synchronous loop.",
    )
    distributed: Literal["ddp", "fsdp2"] = Field(
        "ddp",
        description="Under torchrun (torchrun --nproc-per-node N -m rlvr train ...), how the policy is "
        "trained over the ranks: ddp (a full copy per rank, gradients summed by all-reduce) or fsdp2 "
        "(fully_shard: parameters, gradients and optimizer state sharded; each rank's engine samples "
        "from a full copy in the rollout dtype, or its own vLLM server, refreshed by an all-gather after "
        "every update; checkpoints gather the master weights). Without torchrun: unused (one process). "
        "docs/scale.md.",
    )
    save_every: int = Field(0, ge=0, description="Checkpoint every N steps (0 = only at the end).")
    keep_checkpoints: int | None = Field(
        2,
        ge=1,
        description="How many of the newest checkpoints to keep (null: all). The newest resumable one "
        "is kept too, so that --resume always has one; older ones are deleted once a new one is written.",
    )
    final_checkpoint: Literal["auto", "full", "model", "none"] = Field(
        "auto",
        description="What the end of training saves. full: model, tokenizer and the optimizer, "
        "scheduler and RNG state (resumable; about three times the model's size with AdamW). model: "
        "model and tokenizer only (for rlvr eval --model and from_pretrained; not resumable). auto: "
        "model when the run reached train.steps (a finished run is evaluated or trained on from, not "
        "resumed), full when a time limit stopped it earlier (--resume with more time continues it). "
        "none: nothing. Periodic checkpoints (save_every) and SIGTERM's are always full.",
    )
    log_samples: int = Field(8, ge=-1, description="Completions per step written to samples.jsonl (-1: all).")
    log_trajectories: bool = Field(
        False,
        description="Write every sampled trajectory of every step to trajectories.jsonl, token-exact "
        "(the format of rlvr collect --out; docs/trajectories.md). About 1.4 kB per trajectory.",
    )


# Checks run on every validated RunConfig after its own; filled by the modules that define them
# (rlvr.config.dependent), which import this one.
AFTER_VALIDATION: list[Callable[[RunConfig], None]] = []


class RunConfig(Section):
    name: str = Field(
        "grpo-chain-sum",
        description="Run name: the run directory is output_dir/name. Default: <algo.advantage>-<data.task "
        "or the data file's name>.",
    )
    output_dir: str = Field("runs", description="Parent directory of runs.")
    seed: int = Field(0, description="Seed for sampling, shuffling and initialisation.")
    model: ModelConfig = Field(default_factory=ModelConfig)
    data: DataConfig = Field(default_factory=DataConfig)
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)
    env: EnvConfig = Field(default_factory=EnvConfig)
    rewards: RewardsConfig = Field(default_factory=RewardsConfig)
    algo: AlgoConfig = Field(default_factory=AlgoConfig)
    optim: OptimConfig = Field(default_factory=OptimConfig)
    eval: EvalConfig = Field(default_factory=EvalConfig)
    train: TrainConfig = Field(default_factory=TrainConfig)
    log: LogConfig = Field(default_factory=LogConfig)
    cluster: ClusterConfig = Field(default_factory=ClusterConfig)
    roles: RolesConfig = Field(default_factory=RolesConfig)
    stage: Literal["rl", "sft", "rft", "dpo", "distill", "rm"] = Field(
        "rl",
        description="What this run trains (docs/stages.md): rl, sft, rft, dpo, distill, or rm (a reward "
        "model, docs/roles.md).",
    )
    sft: SftConfig = Field(default_factory=SftConfig)
    rft: RftConfig = Field(default_factory=RftConfig)
    dpo: DpoConfig = Field(default_factory=DpoConfig)
    distill: DistillConfig = Field(default_factory=DistillConfig)
    rm: RewardModelConfig = Field(default_factory=RewardModelConfig)
    mix: MixConfig = Field(default_factory=MixConfig)
    stages: list[StageItem] = Field(
        default_factory=list,
        description="A pipeline: stages run in order in one run directory, each from the previous "
        "stage's weights (docs/stages.md). Empty: this config is one stage.",
    )

    @model_validator(mode="before")
    @classmethod
    def _source_defaults(cls, tree: Any, info: ValidationInfo) -> Any:
        if not isinstance(tree, dict) or info.field_name is not None:  # not on `cfg.x = ...` assignments
            return tree
        from rlvr.config.defaults import apply_source_defaults

        return apply_source_defaults(tree)

    @model_validator(mode="after")
    def _check(self) -> RunConfig:
        if self.eval.samples and max(self.eval.pass_k) > self.eval.samples:
            raise ValueError(f"eval.pass_k has k={max(self.eval.pass_k)} > eval.samples={self.eval.samples}")
        if not self.rewards.functions and not self.env.name and self.data.source != "env":
            raise ValueError(
                "rewards.functions is empty: give at least one reward, or an environment (env.name) "
                "whose turn rewards score the episodes"
            )
        if self.model.precision == "fp16-mixed" and self.algo.critic.kind == "separate":
            raise ValueError(
                "model.precision=fp16-mixed with algo.critic.kind=separate is not supported (the loss "
                "scaler covers the policy's optimizer only): use bf16-mixed, or algo.critic.kind=head"
            )
        adapters_to_vllm = self.rollout.engine == "vllm" and self.rollout.vllm.lora_sync == "adapter"
        if adapters_to_vllm and self.model.lora.r > 512:
            raise ValueError(
                f"model.lora.r={self.model.lora.r} is above the largest LoRA rank vLLM serves (512): "
                "set rollout.vllm.lora_sync=merged to send merged weights instead"
            )
        if self.cluster.ray and self.rollout.engine == "vllm" and not self.rollout.vllm.url:
            if self.rollout.vllm.gpus is not None:
                raise ValueError(
                    "rollout.vllm.gpus with cluster.ray: Ray places each rank's vLLM server and gives it "
                    "its own GPU; leave rollout.vllm.gpus out (or give rollout.vllm.url to use a server "
                    "of your own)"
                )
        if self.data.source in ("file", "hf") and not self.data.path:
            raise ValueError(f"data.path is required when data.source={self.data.source}")
        for check in AFTER_VALIDATION:  # rlvr.config.dependent's, installed by importing rlvr.config
            check(self)
        return self
