"""Reward pools built from the run config, and scoring of rollout completions with them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from rlvr.config.schema import RewardItem, RewardsConfig
from rlvr.data.example import Example
from rlvr.errors import RlvrError
from rlvr.rewards.pool import RewardPool, RewardResult
from rlvr.rewards.registry import reward_example_check
from rlvr.rewards.spec import RewardSpec


def spec_from_item(item: RewardItem, **override: Any) -> RewardSpec:
    fields = item.model_dump(exclude_none=True)
    return RewardSpec(**{**fields, **override})


def check_reward_examples(rewards: RewardsConfig | Sequence[RewardSpec], examples: Sequence[Example]) -> None:
    """Run each reward's data check (if it registered one) on ``examples``, before any worker starts
    (the routing ``verifier`` reward's refuses a row's import path). Errors name the config key
    (``rewards.functions[1] (verifier)``), or the reward for specs given directly (``rlvr reward``)."""
    if isinstance(rewards, RewardsConfig):
        items = [(f"rewards.functions[{i}] ({item.name})", item) for i, item in enumerate(rewards.functions)]
    else:
        items = [(f"reward {spec.name}", spec) for spec in rewards]
    for where, item in items:
        check = None if ":" in item.name else reward_example_check(item.name)
        if check is None:
            continue
        try:
            check(item.params, list(examples))
        except ValueError as err:
            raise RlvrError(f"{where}: {err}") from err


def training_pool(cfg: RewardsConfig) -> RewardPool:
    specs = [spec_from_item(item) for item in cfg.functions]
    return RewardPool(
        specs, workers=cfg.workers, timeout_s=cfg.timeout_s, batch_deadline_s=cfg.batch_deadline_s
    )


def eval_item(cfg: RewardsConfig) -> RewardItem:
    """The reward held-out accuracy is judged by: the first (correctness) reward, read leniently
    for reasoning-gym.

    Held-out accuracy counts an answer wherever the model put it (tags, ``\\boxed{}``, an
    ``Answer:`` line, the last number), so a "before" number measures the model, not its format;
    format use is reported separately (``eval/answer_tag_rate``).
    """
    first = cfg.functions[0]
    params = {**first.params, "extract": "auto"} if first.name == "reasoning_gym" else first.params
    return first.model_copy(update={"weight": 1.0, "params": params, "gate": None})


def eval_pool(cfg: RewardsConfig) -> RewardPool:
    """A pool of :func:`eval_item` alone."""
    spec = spec_from_item(eval_item(cfg))
    return RewardPool(
        [spec], workers=cfg.workers, timeout_s=cfg.timeout_s, batch_deadline_s=cfg.batch_deadline_s
    )


def score_completions(
    pool: RewardPool,
    completions: Sequence[Any],
    examples: Sequence[Example],
    group_sizes: list[int] | None = None,
) -> list[RewardResult]:
    """Score rollout completions or trajectories (anything with ``text``, a length in sampled tokens,
    ``logprobs`` of them, ``finish_reason``); a trajectory's ``text`` is its final model turn.

    ``group_sizes`` lets group rewards (majority vote, …) see each prompt's completions together.
    Per-token self-certainty is passed when every completion carries it (the engine computes it
    when the sampling params ask: :func:`wants_self_certainty`).
    """
    certainty = [getattr(c, "self_certainty", None) for c in completions]
    # a prompt's images stay here: rewards check answers, and pickling pixels to the workers once
    # per completion would cost more than scoring
    plain = {id(e): replace(e, images=[]) for e in examples if getattr(e, "images", None)}
    return pool.score(
        [c.text for c in completions],
        [plain.get(id(e), e) for e in examples],
        [len(c) for c in completions],
        [c.finish_reason for c in completions],
        group_sizes=group_sizes,
        token_logprobs=[list(c.logprobs) for c in completions],
        token_self_certainty=certainty if certainty and None not in certainty else None,
    )


def wants_self_certainty(pool: RewardPool | None) -> bool:
    """Whether a reward of ``pool`` takes ``token_self_certainty`` (the engine then computes it)."""
    return pool is not None and any("token_self_certainty" in s.call_spec().pool_kwargs for s in pool.specs)
