"""Which reward a data row may route itself to (the ``verifier`` column), checked before any import.

A dataset is untrusted input (docs/data.md, "Threat model"): its ``verifier`` column may name a
registered reward (:func:`rlvr.rewards.register_reward`), or one of the import paths the run's config
lists for the routing ``verifier`` reward (its ``default`` and the keys of its ``reward_params``).
Any other import path in a row is refused, naming the row, when the run starts
(:func:`check_routes`) and again at each call (:func:`routed_reward`), so a row can never make
rlvr import and call an object of its choosing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from rlvr.data.example import Example
from rlvr.rewards.registry import get_reward, is_group_reward, list_rewards

RewardFn = Callable[..., Any]


def config_listed(params: dict[str, Any]) -> set[str]:
    """The reward names the routing reward's own params list: ``default`` and ``reward_params``'s keys."""
    listed = set((params.get("reward_params") or {}).keys())
    if params.get("default"):
        listed.add(params["default"])
    return listed


def routed_name(example: Example, default: str | None, listed: set[str]) -> str:
    """The reward ``example`` routes to, refused (``ValueError``) when a row names an import path
    the config does not list, or when it names nothing and there is no default."""
    name = example.verifier or default
    if name is None:
        raise ValueError(f"{example.where} names no verifier and the verifier reward has no default")
    if name == "verifier":
        raise ValueError(f"{example.where}: verifier 'verifier' would route to itself")
    if ":" in name and name not in listed:
        raise ValueError(
            f"{example.where}: column 'verifier' names {name!r}, an import path; a data row may name "
            "only a registered reward or an import path the config lists (the verifier reward's "
            "default or reward_params)"
        )
    return name


def routed_reward(example: Example, default: str | None, listed: set[str]) -> tuple[str, RewardFn]:
    """``(name, function)`` of the reward ``example`` routes to (see :func:`routed_name`)."""
    name = routed_name(example, default, listed)
    fn = get_reward(name)
    if is_group_reward(fn):
        raise ValueError(f"{example.where}: {name!r} is a group reward; name it in its own spec")
    return name, fn


def check_routes(params: dict[str, Any], examples: Sequence[Example]) -> None:
    """The routing reward's data check: every example routes to a reward that exists and may be named.

    Runs at start-up (``check_examples`` of the ``verifier`` reward); the first bad row fails the
    run with its file and row, before any worker starts or any module a row names is imported.
    """
    listed = config_listed(params)
    registered = set(list_rewards())
    for example in examples:
        name = routed_name(example, params.get("default"), listed)
        if ":" not in name and name not in registered:
            raise ValueError(
                f"{example.where}: column 'verifier' names {name!r}, which is not a registered reward; "
                f"registered: {', '.join(sorted(registered))}"
            )
        if ":" not in name and is_group_reward(get_reward(name)):
            raise ValueError(f"{example.where}: {name!r} is a group reward; name it in its own spec")
