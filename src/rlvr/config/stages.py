"""The config of the stages around RL: what a stage trains on and with which objective.

``stage`` picks the kind (docs/stages.md): ``rl`` (the default: sampled groups, a policy loss),
``sft`` (demonstrations from a chat-data file, cross-entropy on assistant tokens), ``rft``
(rejection-sampling fine-tuning: the policy's own samples that the verifier accepts, cross-entropy),
``dpo`` (chosen/rejected pairs from a file or built from verifier-scored groups, a preference loss),
``rm`` (a Bradley-Terry reward model on such pairs, a sequence classifier that the
``reward_model`` reward loads) and ``distill`` (a teacher's token distribution: offline KD on fixed
data, on-policy distillation, self-distillation). Each kind reads its own section below; the
others are ignored. ``stages`` runs several in order in one run directory
(:mod:`rlvr.train.stages.pipeline`).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from rlvr.config.section import Section

STAGE_KINDS = ("rl", "sft", "rft", "dpo", "distill", "rm")


class ChatDataConfig(Section):
    """Where demonstrations or pairs come from: a JSONL / Parquet file or a Hugging Face dataset."""

    path: str | None = Field(
        None, description="Chat data: a .jsonl / .parquet file, or a Hugging Face dataset id."
    )
    split: str = Field("train", description="The split of a Hugging Face dataset.")
    eval_path: str | None = Field(
        None, description="Held-out chat data for the held-out loss (file or dataset id); None: none."
    )
    eval_split: str | None = Field(None, description="Held-out split of a Hugging Face dataset.")
    messages_key: str = Field("messages", description="Column holding a list of chat messages.")
    prompt_key: str = Field("prompt", description="Column of a prompt (string or messages).")
    completion_key: str = Field("completion", description="Column of a completion (string or messages).")
    tools_key: str = Field("tools", description="Column of tool schemas passed to the chat template.")
    limit: int | None = Field(None, ge=1, description="Use only the first N rows.")


class SftConfig(ChatDataConfig):
    train_on: Literal["last_assistant", "all_assistant", "all"] = Field(
        "all_assistant",
        description="Which tokens the loss covers: the last assistant turn, every assistant turn, or "
        "every token of the conversation.",
    )
    packing: bool = Field(
        True,
        description="Pack several examples into one sequence (positions restart, no attention across "
        "examples) instead of padding each.",
    )
    max_length: int = Field(1024, ge=8, description="Longest example (and packed row) in tokens.")
    batch_size: int = Field(8, ge=1, description="Examples per optimizer step.")
    eval_every: int = Field(0, ge=0, description="Held-out loss every N steps (0: before and after only).")
    player: Literal["optimal"] | None = Field(
        None,
        description="Instead of chat data (sft.path): data.*'s training games played by the "
        "environment's scripted expert (frozenlake, guess_number, wordle, search), the won ones; held-out "
        "games give sft/eval_loss. None: chat data.",
    )


class RftConfig(Section):
    min_reward: float = Field(
        1.0, description="Keep sampled trajectories whose reward is at least this (the verifier accepts)."
    )
    keep: Literal["all", "shortest", "best"] = Field(
        "all",
        description="Per prompt, keep every accepted trajectory, only the shortest, or only the "
        "highest-reward one.",
    )
    epochs: int = Field(1, ge=1, description="Passes of cross-entropy over each round's kept data.")
    keep_truncated: bool = Field(
        False,
        description="Also accept completions cut at rollout.max_new_tokens (finish_reason length); off: "
        "they have no end-of-turn token, so training on them teaches the model not to stop.",
    )


class DpoConfig(ChatDataConfig):
    loss: str = Field("dpo", description="Preference loss, registered in rlvr.algo.preference: dpo, ipo, …")
    beta: float = Field(0.1, gt=0, description="Strength of the implicit KL to the reference.")
    loss_params: dict[str, Any] = Field(
        default_factory=dict, description="Extra parameters of the loss (label_smoothing, gamma, …)."
    )
    pairs: Literal["on_policy", "file"] = Field(
        "on_policy",
        description="on_policy: sample groups and pair the best-scored completion with the worst "
        "(ties skipped); file: chosen/rejected columns of the chat data.",
    )
    chosen_key: str = Field("chosen", description="Column of the preferred completion.")
    rejected_key: str = Field("rejected", description="Column of the dispreferred completion.")
    sft_weight: float = Field(0.0, ge=0, description="Weight of an added cross-entropy term on chosen.")
    max_length: int = Field(
        1024, ge=8, description="pairs=file: longest prompt + completion of a pair member, in tokens."
    )


class RewardModelConfig(ChatDataConfig):
    """A reward model trained on chosen/rejected pairs (``stage=rm``, ``rlvr rm``; docs/roles.md)."""

    pairs: Literal["sampled", "file"] = Field(
        "sampled",
        description="sampled: the policy (model.name) samples rollout.group_size completions of "
        "rm.prompts training prompts and of rm.eval_prompts held-out prompts; within a group a "
        "higher-reward completion is chosen over a lower one (verifier-built pairs); file: "
        "prompt/chosen/rejected columns of rm.path (TRL's preference format).",
    )
    chosen_key: str = Field("chosen", description="Column of the preferred completion.")
    rejected_key: str = Field("rejected", description="Column of the dispreferred completion.")
    base: str | None = Field(
        None,
        description="The model the reward model starts from (a sequence-classification head is put "
        "on it): built-in name, HF directory or hub id. None: model.name.",
    )
    prompts: int = Field(256, ge=1, description="pairs=sampled: training prompts sampled for pairs.")
    eval_prompts: int = Field(
        64, ge=0, description="pairs=sampled: held-out prompts (data's held-out set) sampled for pairs."
    )
    pairs_per_group: int = Field(
        4, ge=1, description="pairs=sampled: at most this many pairs from one prompt's group."
    )
    max_length: int = Field(
        512, ge=8, description="Longest rendered prompt + completion in tokens; longer pairs are left out."
    )
    batch_size: int = Field(16, ge=1, description="Pairs per optimizer step.")
    epochs: int = Field(2, ge=1, description="Passes over the training pairs.")
    margin: float = Field(
        0.0, ge=0, description="Bradley-Terry loss on (score_chosen - score_rejected - margin)."
    )
    eval_every: int = Field(
        0, ge=0, description="Held-out pair accuracy every N steps (0: before and after only)."
    )


class DistillConfig(ChatDataConfig):
    mode: Literal["on_policy", "offline", "self"] = Field(
        "on_policy",
        description="on_policy: the student samples, the teacher scores each sampled token, the "
        "per-token reverse KL is the advantage; offline: KD on the chat data's assistant tokens; self: "
        "the teacher is the live policy given privileged context (the reference answer) in its prompt.",
    )
    teacher: str | None = Field(
        None,
        description="Teacher model: built-in name, HF directory or hub id, an rlvr run directory (its "
        "newest checkpoint), checkpoint or pipeline directory (its last stage's); its tokenizer must be "
        "the student's. Required for on_policy and offline; refused for self (the policy is the teacher).",
    )
    divergence: str = Field(
        "reverse_kl", description="Offline KD divergence (rlvr.algo.distill): forward_kl, reverse_kl, jsd."
    )
    divergence_params: dict[str, Any] = Field(default_factory=dict, description="e.g. {beta: 0.5} for jsd.")
    coef: float = Field(1.0, ge=0, description="Weight of the per-token distillation advantage.")
    task_weight: float = Field(
        0.0,
        ge=0,
        description="on_policy / self: weight of the task reward's advantage added to the distillation "
        "advantage (0: distillation alone).",
    )
    hint: str = Field(
        "The correct final answer is {answer}. Solve the problem and end with that answer.",
        description="mode=self: the privileged context appended to the teacher's system prompt; "
        "{answer} is the example's reference answer.",
    )


class MixConfig(Section):
    """SFT + RL in one update: demonstrations inside RL groups (LUFFY) or an SFT term (CHORD)."""

    demos: Literal["none", "luffy", "chord"] = Field(
        "none",
        description="luffy: one member of each group is the example's demonstration, trained with a "
        "shaped importance ratio (algo.loss=luffy); chord: (1−μ)·RL + μ·SFT on demonstrations.",
    )
    demo_field: str = Field(
        "solution",
        description="Example metadata key holding a worked solution; without one, the reference answer "
        "in the task's answer format.",
    )
    mu_peak: float = Field(0.5, ge=0, le=1, description="chord: the SFT weight μ after warm-up.")
    mu_end: float = Field(0.05, ge=0, le=1, description="chord: μ at the last step (cosine decay).")
    warmup_steps: int = Field(5, ge=0, description="chord: steps of linear warm-up of μ from 0.")
    sft_batch_size: int = Field(
        4,
        ge=1,
        description="chord: demonstrations per step for the SFT term: the step's examples first, then "
        "training examples drawn at random (seeded by seed and the update number).",
    )


class StageItem(Section):
    """One stage of a pipeline: a name (its sub-directory), a kind, and settings over the base config."""

    name: str = Field(description="The stage's name: its sub-directory of the run.")
    stage: Literal["rl", "sft", "rft", "dpo", "distill", "rm"] = Field(description="What the stage trains.")
    set: dict[str, Any] = Field(
        default_factory=dict,
        description="Dotted keys over the pipeline's config for this stage (e.g. {train.steps: 20}).",
    )
