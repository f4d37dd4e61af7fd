"""From the sequence rewards of the kept groups to advantages: shaping, KL in the reward, the estimator.

The trainer gathers the inputs (rewards, lengths, a critic's values, the reference's logprobs) and
these functions turn them into advantages. Which method runs is decided by the registered
functions' signatures, never by their names:

- a shaper or estimator receives the context entries its signature names
  (:func:`rlvr.registry.accepted_context`);
- ``token_rewards`` (a per-token KL penalty) goes to an estimator that takes it; for one that does
  not, the penalty is summed per sequence and subtracted from the sequence reward instead;
- an estimator may return ``(advantages, targets)``; ``targets["returns"]`` trains the critic.

:func:`check_algorithm` finds config errors that need the registries before any model is loaded.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any

import torch

from rlvr.algo import ADVANTAGE_ESTIMATORS, POLICY_LOSSES, REWARD_SHAPERS, kl_penalized_rewards
from rlvr.algo.kl import kl_k1
from rlvr.config import RunConfig
from rlvr.config.schema import RewardItem, ShapingItem
from rlvr.errors import RlvrError
from rlvr.registry import accepted_context
from rlvr.trajectory import Trajectory


def takes(fn: Any, name: str) -> bool:
    """Whether ``fn``'s signature names ``name`` (a context entry it asks for)."""
    return name in inspect.signature(fn).parameters


def _check_values_file(advantage: str, path: str | None) -> None:
    """An estimator that reads V* from a file (A*-PO) gets one that reads back, or an error naming the key."""
    from rlvr.algo.astar_po import read_values

    if not path:
        raise RlvrError(
            f"algo.advantage_params.values_path: the '{advantage}' estimator reads each prompt's V* from "
            "a file; write it first with rlvr.algo.astar_po.collect_values (docs/algorithms.md), then give "
            "its path"
        )
    try:
        read_values(path)
    except ValueError as err:
        raise RlvrError(f"algo.advantage_params.values_path: {err}") from err


def check_algorithm(cfg: RunConfig) -> None:
    """Raise :class:`RlvrError` naming the key for combinations only the registries can judge."""
    a = cfg.algo
    try:
        estimator = ADVANTAGE_ESTIMATORS.get(a.advantage)
    except RlvrError as err:
        raise RlvrError(f"algo.advantage: {err}") from err
    accepted_context(estimator, {}, a.advantage_params, "algo.advantage_params")
    if takes(estimator, "k"):  # pass@k: subsets of k of a group's completions
        k = a.advantage_params.get("k", inspect.signature(estimator).parameters["k"].default)
        if isinstance(k, int) and k > cfg.rollout.group_size:
            raise RlvrError(
                f"algo.advantage_params.k={k} exceeds rollout.group_size={cfg.rollout.group_size}: the "
                f"'{a.advantage}' estimator scores subsets of k completions of a group; lower "
                "algo.advantage_params.k or raise rollout.group_size"
            )
    if takes(estimator, "values_path"):  # A*-PO: the offline V* file must exist before a model loads
        _check_values_file(a.advantage, a.advantage_params.get("values_path"))
    reads_reference = takes(estimator, "reference_logprobs")
    if a.reference.update != "fixed" and a.kl_coef <= 0 and not reads_reference:
        raise RlvrError(
            f"algo.reference.update={a.reference.update} moves the reference, but nothing uses one: set "
            f"algo.kl_coef > 0, or an estimator that reads the reference (grpo_care)"
        )
    if takes(estimator, "values") and a.critic.kind == "none":
        raise RlvrError(
            f"algo.critic.kind: the estimator '{a.advantage}' needs values from a critic; "
            "set algo.critic.kind to head (a value head on the policy) or separate (its own model)"
        )
    if not takes(estimator, "values") and a.critic.kind != "none":
        raise RlvrError(
            f"algo.critic.kind: the estimator '{a.advantage}' takes no values, so the critic would "
            "never be used; set algo.critic.kind: none"
        )
    if a.turn_advantage == "turn":
        from rlvr.train.learn.turns import TURN_MODE_ESTIMATORS

        if a.advantage not in TURN_MODE_ESTIMATORS:
            raise RlvrError(
                f"algo.turn_advantage: 'turn' computes group-relative returns per turn, so it needs "
                f"algo.advantage grpo or dr_grpo, not '{a.advantage}'; token-level estimators (gae) "
                "already credit each turn from the turn rewards placed on its last token"
            )
        if cfg.rewards.shaping or a.kl_in_reward:
            raise RlvrError(
                "algo.turn_advantage: 'turn' takes the rewards as the environment gave them; drop "
                "rewards.shaping and algo.kl_in_reward, or use turn_advantage: trajectory"
            )
    if a.prime.coef > 0 and (not takes(estimator, "token_rewards") or a.turn_advantage == "turn"):
        raise RlvrError(
            f"algo.prime: PRIME's process rewards are per token, but algo.advantage '{a.advantage}'"
            f"{' with algo.turn_advantage: turn' if a.turn_advantage == 'turn' else ''} takes one reward "
            "per sequence; use algo.advantage: step_returns (or gae)"
        )
    if takes(estimator, "turn_states") and (cfg.rewards.shaping or a.kl_in_reward):
        raise RlvrError(
            f"algo.advantage: '{a.advantage}' computes its returns from the environment's turn rewards "
            "and outcome as they were given; drop rewards.shaping and algo.kl_in_reward (a KL penalty "
            "belongs in the loss: algo.kl_coef)"
        )
    try:
        loss = POLICY_LOSSES.get(a.loss)
    except RlvrError as err:
        raise RlvrError(f"algo.loss: {err}") from err
    if a.entropy_target is not None and not takes(loss, "entropy_coef"):
        raise RlvrError(
            f"algo.entropy_target: the loss '{a.loss}' takes no entropy_coef, so the adaptive "
            "coefficient would do nothing; use a loss that does (e.g. entropy_bonus)"
        )
    for i, item in enumerate(cfg.rewards.shaping):
        try:
            shaper = REWARD_SHAPERS.get(item.name)
        except RlvrError as err:
            raise RlvrError(f"rewards.shaping[{i}].name: {err}") from err
        accepted_context(shaper, {}, item.params, f"rewards.shaping[{i}].params")


def shape_rewards(
    rewards: torch.Tensor,
    group_index: torch.Tensor,
    shaping: list[ShapingItem],
    context: dict[str, Any],
) -> torch.Tensor:
    """Apply the shapers in order; each gets ``group_index`` and the ``context`` entries it names."""
    for i, item in enumerate(shaping):
        fn = REWARD_SHAPERS.get(item.name)
        offered = {"group_index": group_index, **context}
        rewards = fn(rewards, **accepted_context(fn, offered, item.params, f"rewards.shaping[{i}].params"))
    return rewards


def sampled_kl(
    sampling_logprobs: torch.Tensor, ref_logprobs: torch.Tensor, mask: torch.Tensor
) -> torch.Tensor:
    """Per-token KL estimate [N, T] of the sampled tokens (k1: log π_sampling − log π_ref), 0 on padding."""
    kl = kl_k1(sampling_logprobs, ref_logprobs)
    return torch.where(mask > 0, kl, torch.zeros_like(kl))


def kl_token_rewards(kl: torch.Tensor, mask: torch.Tensor, coef: float) -> torch.Tensor:
    """The in-reward KL penalty ``−coef · kl_t`` [N, T] on every valid token (no sequence reward)."""
    return kl_penalized_rewards(torch.zeros(kl.shape[0], dtype=kl.dtype), kl, mask, coef)


def component_score(rewards: dict[str, float], key: str) -> float:
    """One configured reward's unweighted score in a trajectory's ``rewards`` (NaN: none).

    A reward that returns a dict is stored as ``key/sub`` entries; its score is then ``key/score``
    or, without one, the sum of its entries (what it added to the total, before its weight:
    :func:`rlvr.rewards.results.scalar`).
    """
    if key in rewards:
        return float(rewards[key])
    parts = {k: v for k, v in rewards.items() if k.startswith(f"{key}/")}
    if not parts:
        return float("nan")  # its reward failed (rewards.on_error=zero) or never scored this sample
    return float(parts.get(f"{key}/score", sum(parts.values())))


def reward_components(
    trajectories: list[Trajectory], functions: list[RewardItem]
) -> tuple[torch.Tensor, torch.Tensor]:
    """``reward_components`` [N, K] (each of ``rewards.functions``' unweighted scores per trajectory,
    NaN where it has none) and ``reward_weights`` [K]: what a multi-reward estimator (gdpo) names."""
    keys = [f.label or f.name for f in functions]
    scores = [[component_score(t.rewards, key) for key in keys] for t in trajectories]
    components = torch.tensor(scores, dtype=torch.float32).reshape(len(trajectories), len(keys))
    return components, torch.tensor([f.weight for f in functions], dtype=torch.float32)


@dataclass
class Estimate:
    advantages: torch.Tensor  # [N] or [N, T]
    targets: dict[str, torch.Tensor] = field(default_factory=dict)  # e.g. "returns" [N, T]
    rewards: torch.Tensor | None = None  # the sequence rewards the estimator saw


def estimate_advantages(
    name: str,
    params: dict[str, Any],
    rewards: torch.Tensor,
    group_index: torch.Tensor,
    context: dict[str, Any],
) -> Estimate:
    """Run the estimator ``name``, offered ``context``; see the module docstring for ``token_rewards``."""
    estimator = ADVANTAGE_ESTIMATORS.get(name)
    token_rewards = context.get("token_rewards")
    if token_rewards is not None and not takes(estimator, "token_rewards"):
        rewards = rewards + token_rewards.sum(dim=1).to(rewards.dtype)
    out = estimator(
        rewards, group_index, **accepted_context(estimator, context, params, "algo.advantage_params")
    )
    advantages, targets = out if isinstance(out, tuple) else (out, {})
    if takes(estimator, "values") and "returns" not in targets:
        raise RlvrError(
            f"the estimator '{name}' takes values but returned no value targets; it must return "
            "(advantages, {'returns': returns [N, T]}) for the critic to learn from"
        )
    return Estimate(advantages.float(), dict(targets), rewards)
