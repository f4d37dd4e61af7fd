"""The learner: policy (+ reference, critic) + algorithm + optimizer → one update from trajectories.

It knows nothing of engines, environments or rewards: its input is scored groups of
trajectories (:mod:`rlvr.trajectory`) from whatever produced them — the live collector, a file
written by ``rlvr collect``, a replay buffer — and its output is new weights with a higher
:attr:`Learner.version`. One :meth:`Learner.update`:

1. lays the groups out as a batch (each prompt once, the response ledger with its loss mask);
2. turns sequence rewards into advantages: shapers, then the in-reward KL penalty, then the
   estimator, each offered the context it names (:mod:`rlvr.train.learn.estimate`); a critic's values
   are offered as ``values``, a greedy baseline's rewards as ``baseline_rewards``, each reward's own
   score as ``reward_components``, and a stateful estimator's state (checkpointed) as ``estimator_state``;
3. runs the policy update (:func:`rlvr.train.learn.update.policy_update`) and moves the adaptive
   coefficients; during the critic's warm-up (``algo.critic.warmup_steps``) only the critic trains.

The method being trained enters only through the registries in :mod:`rlvr.algo`.
"""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import Any

import torch

from rlvr.algo import ADVANTAGE_ESTIMATORS, token_weights
from rlvr.algo.gigpo import step_group_metrics
from rlvr.config import RunConfig
from rlvr.errors import RlvrError
from rlvr.models import load_model
from rlvr.models.precision import grad_scaler, precision_of
from rlvr.train.learn.batch import TrainBatch, build_batch
from rlvr.train.learn.controllers import Coefficients
from rlvr.train.learn.critic import build_critic, value_metrics
from rlvr.train.learn.estimate import (
    Estimate,
    estimate_advantages,
    kl_token_rewards,
    reward_components,
    sampled_kl,
    shape_rewards,
    takes,
)
from rlvr.train.learn.optim import build_optimizer, build_scheduler
from rlvr.train.learn.packing import set_packing
from rlvr.train.learn.reference import ReferenceMover
from rlvr.train.learn.turns import (
    TURN_MODE_ESTIMATORS,
    SampledLayout,
    check_step_rewards,
    has_turn_rewards,
    outcome_rewards,
    step_token_rewards,
    turn_advantages,
    turn_context,
    turn_end_rewards,
)
from rlvr.train.learn.update import policy_update, split_logprobs
from rlvr.trajectory import TrajectoryGroup


def loss_scale(cfg: RunConfig, kept: list[TrajectoryGroup], sampled: list[TrajectoryGroup]) -> float:
    """1, or with ``algo.loss_norm=sampled`` the kept share of what the loss would average over
    had every sampled group been trained on (tokens for token-mean, sequences otherwise).

    A dropped group has zero advantage everywhere, so it adds nothing to the gradient, only to
    the denominator: scaling by this share gives that gradient without computing those groups.
    """
    if cfg.algo.loss_norm == "kept" or cfg.algo.loss_agg == "token-sum":  # a sum has no denominator
        return 1.0
    by_tokens = cfg.algo.loss_agg == "token-mean"

    def size(groups: list[TrajectoryGroup]) -> int:
        return sum(len(t) if by_tokens else 1 for g in groups for t in g.trajectories)

    return size(kept) / max(size(sampled), 1)


class Learner:
    """Owns the trainable state: policy, reference, critic, optimizer, schedule, coefficients."""

    def __init__(self, cfg: RunConfig, policy: torch.nn.Module, pad_id: int) -> None:
        self.cfg, self.model, self.pad_id = cfg, policy, pad_id
        set_packing(policy, cfg.algo.packing)
        self.precision = precision_of(cfg)  # autocast for every forward pass; fp16's loss scaler
        self.scaler = grad_scaler(self.precision)
        self.ref_model = None
        # no reference model at all when KL is off, unless the estimator reads it (grpo_care)
        if cfg.algo.kl_coef > 0 or takes(ADVANTAGE_ESTIMATORS.get(cfg.algo.advantage), "reference_logprobs"):
            self.ref_model = self.load_reference()
        self.prime = None  # PRIME's implicit process reward model (rlvr.train.learn.prime)
        if cfg.algo.prime.coef > 0:
            from rlvr.train.learn.prime import ImplicitPRM

            self.prime = ImplicitPRM(
                cfg, self.ref_model if self.ref_model is not None else self.load_reference()
            )
        total_updates = cfg.train.steps * cfg.algo.epochs * cfg.algo.minibatches
        total_updates *= 2 if cfg.algo.lowprob_isolation is not None else 1  # Lopti: two steps each
        self.critic = build_critic(cfg, self.model, total_updates)
        self.optimizer = build_optimizer(self.model, cfg.optim)
        for group in self.critic.policy_param_groups(cfg.algo.critic.lr) if self.critic else []:
            self.optimizer.add_param_group(group)  # a value head trains with the policy
        self.scheduler = build_scheduler(self.optimizer, total_updates, cfg.optim)
        self.coefs = Coefficients.from_config(cfg.algo)  # adaptive KL / entropy coefficients
        self.estimator_state: dict[str, Any] = {}  # a stateful estimator's (aapo), checkpointed
        self.reference_mover = ReferenceMover(cfg.algo.reference)  # fixed, reset (ProRL) or EMA
        self.generator = torch.Generator().manual_seed(cfg.seed + 1)  # minibatch shuffling
        self.version = 0  # updates applied; trajectories carry the version that sampled them
        # Under torchrun (rlvr.train.scale.distributed): the DDP/FSDP2 module the update runs through, and
        # this rank's share of each minibatch. One process: the policy itself, no shard.
        self.train_model: torch.nn.Module = policy
        self.shard = None
        # a stage's objective (SFT, preference, distillation: rlvr.train.stages); None: RL's policy loss
        from rlvr.train.stages import build_objective

        self.objective = build_objective(cfg, self)
        if cfg.stage == "distill" and cfg.distill.mode == "on_policy":  # the teacher loads now, not mid-step
            from rlvr.train.stages.distill import teacher_of

            teacher_of(self)

    def load_reference(self) -> torch.nn.Module:
        """The frozen reference model: ``model.reference``, or the starting policy (``model.name``)."""
        name = self.cfg.model.reference or self.cfg.model.name
        model = load_model(name, self.cfg.model.dtype, self.cfg.model.device).eval()
        set_packing(model, self.cfg.algo.packing)
        return model.requires_grad_(False)

    @property
    def critic_warming(self) -> bool:
        """Whether this update is one of the critic's warm-up steps (``algo.critic.warmup_steps``):
        the critic trains on it and the policy does not (VAPO's value pre-training)."""
        return self.critic is not None and self.version < self.cfg.algo.critic.warmup_steps

    @property
    def needs_greedy_baseline(self) -> bool:
        """Whether the estimator asks for ``baseline_rewards`` (groups must carry ``baseline_reward``)."""
        return takes(ADVANTAGE_ESTIMATORS.get(self.cfg.algo.advantage), "baseline_rewards")

    # ----------------------------------------------------------------------------- one update
    def update(
        self, groups: list[TrajectoryGroup], sampled: list[TrajectoryGroup] | None = None
    ) -> dict[str, float]:
        """One update from the kept ``groups`` (``sampled``: every group collected with them, for
        ``algo.loss_norm=sampled``). Fills each trajectory's ``advantage``; returns metrics.
        A stage's objective (SFT, DPO, offline distillation) makes the update instead."""
        if self.objective is not None:
            metrics = self.objective.update(self, groups)
            self.version += 1
            return metrics
        for g in groups:
            if None in g.rewards:
                raise ValueError(
                    f"group of example {g.example_index} has a trajectory without a reward (a reward "
                    "error): the collector drops such groups or scores them 0 (rewards.on_error)"
                )
        warming = self.critic_warming
        if warming and self.shard is not None:
            raise RlvrError("algo.critic.warmup_steps does not run under torchrun yet: train in one process")
        batch, metrics = self.prepare_batch(groups)
        self._keep_advantages(groups, batch)
        metrics.update(self.coefs.metrics(self.cfg.algo))  # the coefficients this update uses
        metrics["update/loss_scale"] = loss_scale(self.cfg, groups, groups if sampled is None else sampled)
        if self.cfg.algo.critic.warmup_steps > 0:
            metrics["critic/warmup"] = float(warming)  # 1: only the critic trained this step
        aux_loss, main_weight = None, 1.0
        if self.cfg.mix.demos == "chord" and not warming:  # (1 − μ)·RL + μ·SFT (rlvr.train.stages.mix)
            from rlvr.train.stages.mix import chord_step

            main_weight, aux_loss, mix_metrics = chord_step(self, groups)
            metrics.update(mix_metrics)
        # value warm-up: the policy's weights take no gradient, so its optimizer skips them (a value
        # head, not part of the policy module, and a separate critic still train)
        frozen = [p for p in self.model.parameters() if p.requires_grad] if warming else []
        for p in frozen:
            p.requires_grad_(False)
        try:
            update_metrics = policy_update(
                self.train_model,
                self.optimizer,
                self.scheduler,
                batch,
                self.cfg.algo,
                self.cfg.optim.grad_clip,
                self.cfg.rollout.temperature,
                self.cfg.rollout.max_new_tokens,
                self.ref_model,
                self.generator,
                critic=self.critic,
                kl_coef=self.coefs.kl,
                loss_context=self.coefs.loss_context(),
                loss_scale=metrics["update/loss_scale"],
                precision=self.precision,
                scaler=self.scaler,
                shard=self.shard,
                aux_loss=aux_loss,
                main_weight=main_weight,
                replay_cap=self.cfg.data.replay.cap,
            )
        finally:
            for p in frozen:
                p.requires_grad_(True)
        metrics.update(update_metrics)
        self.coefs.update(self.cfg.algo, metrics, len(batch))
        if self.ref_model is not None:
            metrics.update(self.reference_mover.after_update(self.model, self.ref_model, self.optimizer))
        self.version += 1
        return metrics

    def prepare_batch(self, groups: list[TrajectoryGroup]) -> tuple[TrainBatch, dict[str, float]]:
        """The update's batch for ``groups``: advantages (and a critic's targets), on the device."""
        cfg, a = self.cfg, self.cfg.algo
        temperature, max_new = cfg.rollout.temperature, cfg.rollout.max_new_tokens
        count = sum(len(g) for g in groups)
        batch = build_batch([g.trajectories for g in groups], [0.0] * count, self.pad_id)
        on_device, mask, index = batch.to(cfg.model.device), batch.completion_mask, batch.group_index
        rewards = torch.tensor([x for g in groups for x in g.rewards], dtype=torch.float32)
        trajectories = [t for g in groups for t in g.trajectories]
        # token-level estimators see the sampled tokens only, as a prefix (identity for one turn)
        layout = SampledLayout(mask)
        context: dict[str, Any] = {"lengths": mask.sum(dim=1), "max_new_tokens": max_new}
        metrics: dict[str, float] = {}
        turn_rewards = None
        estimator = ADVANTAGE_ESTIMATORS.get(a.advantage)
        if has_turn_rewards(trajectories):  # on each turn's last token; the sequence keeps the outcome
            rewards, turn_rewards = (
                outcome_rewards(trajectories),
                turn_end_rewards(trajectories, layout.width),
            )
        if any(t.step_rewards for t in trajectories):  # a reward's per-step rewards, on their tokens
            check_step_rewards(a, estimator)
            steps = layout.compact(step_token_rewards(trajectories, mask.shape[1]))
            rewards = rewards - steps.sum(dim=1)
            turn_rewards = steps if turn_rewards is None else turn_rewards + steps
        if self.prime is not None:  # PRIME: the implicit PRM's per-token rewards (algo.prime.update)
            if self.shard is not None:
                raise RlvrError("algo.prime does not run under torchrun yet: train in one process")
            implicit, prime_metrics = self.prime.process(on_device, trajectories)
            metrics.update(prime_metrics)
            implicit = layout.compact(implicit.cpu())
            turn_rewards = implicit if turn_rewards is None else turn_rewards + implicit
        if cfg.rewards.shaping:
            rewards = shape_rewards(rewards, index, cfg.rewards.shaping, context)
            metrics["reward/shaped_mean"] = float(rewards.mean())
        if a.kl_in_reward and self.ref_model is not None:
            autocast, micro = self.precision.autocast, a.micro_batch_size
            ref = split_logprobs(self.ref_model, on_device, micro, temperature, autocast, self.shard).cpu()
            kl = sampled_kl(batch.sampling_logprobs, ref, mask)
            context["token_rewards"] = layout.compact(kl_token_rewards(kl, mask, self.coefs.kl))
            metrics["reward/kl"] = float((kl * token_weights(mask, a.loss_agg, max_new)).sum())
            metrics["reward/kl_penalty"] = float(-context["token_rewards"].sum(dim=1).mean())
        if turn_rewards is not None:
            context["token_rewards"] = context.get("token_rewards", 0.0) + turn_rewards
        if takes(estimator, "reward_components"):  # each reward's own score (gdpo)
            components = reward_components(trajectories, cfg.rewards.functions)
            context["reward_components"], context["reward_weights"] = components
        if takes(estimator, "turn_states"):  # per-turn credit from the environment's states (gigpo)
            context.update(turn_context(trajectories))
            if not any(x is not None for row in context["turn_states"] for x in row):
                raise RlvrError(
                    f"algo.advantage: '{a.advantage}' groups turns by the environment's state, but no "
                    "episode of this batch reported one: use an environment whose state() returns a "
                    "string (frozenlake, guess_number, wordle), or another estimator"
                )
            metrics.update(step_group_metrics(index, context["turn_states"]))
        if takes(estimator, "mc_values"):  # VinePPO: values the collector measured (rlvr.collect.vine)
            context["mc_values"] = [t.mc_values for t in trajectories]
            context["mc_ends"] = [t.mc_ends for t in trajectories]
        if takes(estimator, "sampling_logprobs"):  # the rollout's, per sampled token, as a prefix (lens)
            context["sampling_logprobs"] = layout.compact(batch.sampling_logprobs)
        if takes(estimator, "reference_logprobs"):  # the reference's, of the sampled tokens (grpo_care)
            autocast, micro = self.precision.autocast, a.micro_batch_size
            ref = split_logprobs(self.ref_model, on_device, micro, temperature, autocast, self.shard).cpu()
            context["reference_logprobs"] = layout.compact(ref)
        if takes(estimator, "token_ids"):  # each row's sampled token ids, as a prefix (tempo, trepo)
            context["token_ids"] = layout.compact(batch.completion_ids)
        if takes(estimator, "example_ids"):
            context["example_ids"] = [t.example_id or f"index:{t.example_index}" for t in trajectories]
        if takes(estimator, "estimator_state"):  # read and updated in place by the estimator
            context["estimator_state"] = self.estimator_state
        if self.needs_greedy_baseline:
            if any(g.baseline_reward is None for g in groups):
                raise ValueError(f"the estimator '{a.advantage}' needs each group's baseline_reward")
            context["baseline_rewards"] = torch.tensor([g.baseline_reward for g in groups])[index]
        old_values = None
        if self.critic is not None:
            old_values = self._batch_values(on_device)
            context["values"] = layout.compact(old_values := old_values.cpu())
        if a.turn_advantage == "turn":
            params = a.advantage_params
            normalize = TURN_MODE_ESTIMATORS[a.advantage] and params.get("normalize_std", True)
            advantages = turn_advantages(
                trajectories, index, mask.shape[1], a.turn_discount, normalize, params.get("eps", 1e-6)
            )
            estimate = Estimate(advantages, {}, rewards)
        else:
            estimate = estimate_advantages(a.advantage, a.advantage_params, rewards, index, context)
            estimate.advantages = layout.expand(estimate.advantages)
            estimate.targets = {k: layout.expand(v) for k, v in estimate.targets.items()}
        if any(g.loss_weight != 1.0 for g in groups):  # role games: each role's loss weight
            weights = torch.tensor([g.loss_weight for g in groups for t in g.trajectories])
            advantages = estimate.advantages
            weights = (weights[:, None] if advantages.dim() == 2 else weights).to(advantages)
            estimate.advantages = advantages * weights
        if cfg.stage == "distill":  # on-policy / self-distillation: the teacher's per-token advantages
            from rlvr.train.stages.distill import distill_advantages

            estimate.advantages = distill_advantages(self, groups, on_device, estimate.advantages, metrics)
        returns = estimate.targets.get("returns") if self.critic is not None else None
        if returns is not None:
            metrics.update(value_metrics(old_values, returns, mask))
        batch = replace(batch, advantages=estimate.advantages, returns=returns, old_values=old_values)
        return batch.to(cfg.model.device), metrics

    def _batch_values(self, batch: TrainBatch) -> torch.Tensor:
        """The critic's values of ``batch`` without gradient; under torchrun each rank computes its
        groups' rows and every rank gets them all (:meth:`rlvr.train.scale.shard.Shard.split_pass`)."""
        micro, temperature = self.cfg.algo.micro_batch_size, self.cfg.rollout.temperature

        def values(rows: TrainBatch) -> torch.Tensor:
            with self.precision.autocast():
                return self.critic.batch_values(self.model, rows, micro, temperature)

        if self.shard is None:
            return values(batch)
        # a head runs the policy's forward: a collective when the policy is sharded (FSDP2)
        sharded = self.critic.shares_policy and self.shard.mode == "fsdp2"
        return self.shard.split_pass(batch, micro, values, collective=sharded)

    @staticmethod
    def _keep_advantages(groups: list[TrajectoryGroup], batch: TrainBatch) -> None:
        """Each trajectory's advantage for the logs (token-level ones: the mean over its trained tokens)."""
        advantages, mask = batch.advantages.cpu(), batch.completion_mask.cpu()
        per_token = None
        if advantages.dim() == 2:
            per_token = (advantages * mask).tolist()
            advantages = (advantages * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1)
        flat = advantages.tolist()
        for row, (t, value) in enumerate(zip((t for g in groups for t in g.trajectories), flat, strict=True)):
            t.advantage = value
            if per_token is not None:
                t.token_advantages = per_token[row][: len(t.response_ids)]

    # ----------------------------------------------------------------------------- state
    def weights(self) -> torch.nn.Module:
        """The module whose weights a :class:`~rlvr.train.loop.weight_sync.WeightSync` publishes."""
        return self.model

    def state_dict(self) -> dict[str, Any]:
        """Optimizer, schedule, critic and estimator state (the weights are saved as an HF model beside
        it)."""
        state: dict[str, Any] = {
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
        }
        if self.critic is not None:
            state["critic"] = self.critic.state_dict()
        if self.scaler is not None:
            state["grad_scaler"] = self.scaler.state_dict()
        if self.estimator_state:
            state["estimator"] = copy.deepcopy(self.estimator_state)
        if self.prime is not None:
            state["prime"] = self.prime.state_dict()
        if self.reference_mover.moves:
            state["reference"] = self.reference_mover.state_dict(self.ref_model)
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        if self.critic is not None:
            self.critic.load_state_dict(state["critic"])
        if self.scaler is not None and "grad_scaler" in state:
            self.scaler.load_state_dict(state["grad_scaler"])
        self.estimator_state = copy.deepcopy(state.get("estimator", {}))
        if self.prime is not None and "prime" in state:
            self.prime.load_state_dict(state["prime"])
        self.reference_mover.load_state_dict(state.get("reference", {}), self.ref_model)
