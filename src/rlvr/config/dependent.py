"""Settings whose value depends on another setting: followed when left out, refused when they disagree.

A preset written for ``rollout.max_new_tokens=24`` that hard-codes an overlong penalty at 24 tokens
punishes every completion past 24 once a user raises the limit to 256: the preset silently stopped
meaning what it says. Rewards declare such params (``register_reward(..., follows={"max_tokens":
"rollout.max_new_tokens"})``); here a config that leaves the param out gets the setting's value (so
the resolved config shows the number), and one that sets a different value is refused with a
message naming both keys. Trainer-supplied context (``max_new_tokens`` offered to estimators and
shapers) cannot be overridden to a different value in params either.
"""

from __future__ import annotations

from typing import Any

from rlvr.config.schema import AFTER_VALIDATION, RunConfig
from rlvr.errors import RlvrError


def setting(cfg: RunConfig, key: str) -> Any:
    """The value of the dotted config ``key`` (e.g. ``rollout.max_new_tokens``)."""
    value: Any = cfg
    for part in key.split("."):
        value = getattr(value, part)
    return value


def resolve_dependent(cfg: RunConfig) -> None:
    """Fill followed reward params and refuse disagreeing ones (mutates ``cfg`` in place)."""
    _check_context_params(cfg)
    if cfg.env.name or cfg.data.source == "env":
        # Episodes count tokens over several turns (env.max_tokens), not one completion: there a
        # length param is the user's own number, required and not compared with the per-turn limit.
        return
    from rlvr.rewards.registry import reward_check, reward_follows

    for i, item in enumerate(cfg.rewards.functions):
        follows = {} if ":" in item.name else reward_follows(item.name)
        if not follows:
            continue
        params = dict(item.params)
        for param, key in follows.items():
            value = setting(cfg, key)
            if param not in params:
                params = {param: value, **params}
            elif params[param] != value:
                raise RlvrError(
                    f"rewards.functions[{i}].params.{param}={params[param]} disagrees with {key}={value}: "
                    f"the {item.name} reward's {param} must be {key}; leave "
                    f"rewards.functions[{i}].params.{param} out to follow {key}, or set both to the "
                    "same value"
                )
        check = reward_check(item.name)
        if check is not None:
            try:
                check(params)
            except (ValueError, TypeError) as err:
                followed = ", ".join(
                    f"{param} follows {key}={setting(cfg, key)}" for param, key in follows.items()
                )
                raise RlvrError(f"rewards.functions[{i}].params ({item.name}): {err} ({followed})") from err
        item.params = params


def _check_context_params(cfg: RunConfig) -> None:
    limit = cfg.rollout.max_new_tokens
    places = [
        ("algo.advantage_params", cfg.algo.advantage_params),
        ("algo.loss_params", cfg.algo.loss_params),
    ]
    places += [(f"rewards.shaping[{i}].params", s.params) for i, s in enumerate(cfg.rewards.shaping)]
    for where, params in places:
        if "max_new_tokens" in params and params["max_new_tokens"] != limit:
            raise RlvrError(
                f"{where}.max_new_tokens={params['max_new_tokens']} disagrees with "
                f"rollout.max_new_tokens={limit}; the trainer passes rollout.max_new_tokens itself, so "
                f"leave {where}.max_new_tokens out"
            )


AFTER_VALIDATION.append(resolve_dependent)
