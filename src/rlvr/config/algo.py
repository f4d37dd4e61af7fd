"""The RL algorithm's config (``algo.*``): estimator, loss, clipping, KL, the critic, PRIME and the
reference; part of :class:`rlvr.config.schema.RunConfig`, which re-exports both classes."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from rlvr.config.credit import PrimeConfig
from rlvr.config.reference import ReferenceConfig
from rlvr.config.section import Section


class CriticConfig(Section):
    kind: Literal["none", "head", "separate"] = Field(
        "none",
        description="Value function for estimators that take `values` (gae): none; head = a linear head on "
        "the policy's final hidden states (shared backbone); separate = its own model with its own AdamW.",
    )
    model: str | None = Field(
        None,
        description="Backbone of a separate critic (built-in name, directory or hub id); None: model.name.",
    )
    lr: float = Field(
        1e-4,
        gt=0,
        description="Learning rate of the critic's parameters: the value head (head) or the whole critic "
        "(separate); follows optim's warmup and schedule.",
    )
    vf_coef: float = Field(
        0.1, ge=0, description="Weight of the value loss added to the policy loss (it shares the backbone)."
    )
    value_clip: float = Field(
        0.2, gt=0, description="Values move at most this far from the rollout's values."
    )
    warmup_steps: int = Field(
        0,
        ge=0,
        description="Value warm-up (VAPO's value pre-training): for the first N steps only the critic "
        "trains; the policy's weights stay as they are (its optimizer skips them).",
    )

    @model_validator(mode="after")
    def _check(self) -> CriticConfig:
        if self.model is not None and self.kind != "separate":
            raise ValueError("algo.critic.model applies only to algo.critic.kind: separate")
        if self.warmup_steps > 0 and self.kind == "none":
            raise ValueError(
                "algo.critic.warmup_steps trains a critic: set algo.critic.kind to head or separate"
            )
        if self.warmup_steps > 0 and self.vf_coef == 0:
            raise ValueError(
                "algo.critic.warmup_steps trains the critic alone: it needs algo.critic.vf_coef > 0"
            )
        return self


class AlgoConfig(Section):
    advantage: str = Field("grpo", description="Advantage estimator (rlvr.algo.ADVANTAGE_ESTIMATORS).")
    advantage_params: dict[str, Any] = Field(default_factory=dict, description="Its keyword arguments.")
    turn_advantage: Literal["trajectory", "turn"] = Field(
        "trajectory",
        description="Multi-turn credit: 'trajectory' (one advantage per episode, every model token) or "
        "'turn' (each model turn's discounted return from it on, against the group's episode returns; "
        "with advantage grpo or dr_grpo).",
    )
    turn_discount: float = Field(
        1.0, ge=0, le=1, description="Discount per model turn of the 'turn' advantage's returns."
    )
    loss: str = Field("ppo_clip", description="Policy loss (rlvr.algo.POLICY_LOSSES).")
    clip_low: float = Field(0.2, ge=0, description="PPO ratio clip below 1.")
    clip_high: float = Field(
        0.28, ge=0, description="PPO ratio clip above 1 (DAPO clip-higher when > clip_low)."
    )
    loss_params: dict[str, Any] = Field(
        default_factory=dict, description="Extra keyword arguments of the loss."
    )
    loss_agg: Literal[
        "token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm", "token-sum"
    ] = Field("token-mean", description="How per-token losses become one number.")
    kl_coef: float = Field(
        0.0, ge=0, description="Weight of KL(policy‖reference); 0 skips the reference model."
    )
    kl_estimator: Literal["k1", "k2", "k3"] = Field("k3", description="Per-token KL estimator.")
    kl_in_reward: bool = Field(
        False,
        description="Charge kl_coef * KL (k1 of the sampled tokens) in the reward instead of the loss.",
    )
    kl_target: float | None = Field(
        None,
        gt=0,
        description="Adapt kl_coef towards this KL (aggregated like the loss: per token for token-mean); "
        "None: fixed.",
    )
    kl_horizon: int = Field(
        10000, ge=1, description="Completions over which the adaptive KL coefficient moves by up to 20%."
    )
    entropy_target: float | None = Field(
        None,
        gt=0,
        description="Adapt the entropy coefficient offered to the loss (entropy_coef) to hold the mean "
        "entropy at this value; None: off.",
    )
    entropy_coef_init: float = Field(0.0, ge=0, description="Starting adaptive entropy coefficient.")
    entropy_coef_step: float = Field(5e-4, gt=0, description="Change of the entropy coefficient per step.")
    entropy_coef_min: float = Field(0.0, ge=0, description="Lower bound of the entropy coefficient.")
    entropy_coef_max: float = Field(1e-2, ge=0, description="Upper bound of the entropy coefficient.")
    critic: CriticConfig = Field(default_factory=CriticConfig)
    prime: PrimeConfig = Field(default_factory=PrimeConfig)
    reference: ReferenceConfig = Field(default_factory=ReferenceConfig)
    lowprob_isolation: float | None = Field(
        None,
        gt=0,
        lt=1,
        description="Lopti (docs/algorithms.md): each minibatch is trained in two optimizer steps, first "
        "on the tokens whose probability before the update is below this threshold, then on the rest; "
        "None: one step over all tokens.",
    )
    epochs: int = Field(1, ge=1, description="Passes over each rollout batch.")
    minibatches: int = Field(1, ge=1, description="Optimizer steps per pass.")
    micro_batch_size: int = Field(16, ge=1, description="Sequences per forward/backward (memory bound).")
    packing: bool = Field(
        True,
        description="Put several completions of a prompt in one row of the training forward where that "
        "removes padding (the same numbers up to float rounding; docs/performance.md); false: one row each.",
    )
    dynamic_sampling: bool = Field(True, description="Drop groups whose rewards are all equal (DAPO).")
    loss_norm: Literal["kept", "sampled"] = Field(
        "kept",
        description="What the loss is averaged over when dynamic sampling drops groups: 'kept' (the "
        "trained groups, as DAPO with a refilled batch) or 'sampled' (every sampled completion, as if "
        "the dropped zero-advantage groups were trained on: fewer informative groups, smaller step).",
    )
    refill: bool = Field(False, description="Sample more prompts to refill dropped groups.")
    max_refills: int = Field(2, ge=0, description="Extra sampling rounds per step when refilling.")

    @model_validator(mode="after")
    def _check(self) -> AlgoConfig:
        if self.kl_target is not None and self.kl_coef <= 0:
            raise ValueError("algo.kl_target needs algo.kl_coef > 0 (the starting coefficient)")
        if self.reference.critical_kl > 0 and (self.kl_coef <= 0 or self.kl_in_reward):
            raise ValueError(
                "algo.reference.critical_kl weights the KL loss term per token: it needs algo.kl_coef > 0 "
                "and algo.kl_in_reward false"
            )
        if not self.entropy_coef_min <= self.entropy_coef_init <= self.entropy_coef_max:
            raise ValueError(
                "algo.entropy_coef_init must lie within [algo.entropy_coef_min, algo.entropy_coef_max]"
            )
        return self
