"""Reward functions looked up by name.

A reward is a plain function ``fn(completion, example, **params) -> float | dict[str, float]``.
Rewards run inside worker processes (see :mod:`rlvr.rewards.pool`), so the pool never ships the
function object itself: it ships a *name*, and each worker resolves that name again. That is why
the registry also records the module that defined each function — a worker that does not know a
name yet imports that module, whose ``@register_reward`` decorators then fill the worker's registry.

Names of the form ``"package.module:function"`` are import paths: they need no registration and
work for any function defined at the top level of an importable module.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from rlvr.errors import RlvrError

RewardFn = Callable[..., Any]

_REWARDS: dict[str, RewardFn] = {}
_PRELOAD: dict[str, tuple[str, ...]] = {}


def register_reward(name: str, *, preload: tuple[str, ...] = ()) -> Callable[[RewardFn], RewardFn]:
    """Register the decorated function as the reward called ``name``.

    ``preload`` names heavy modules the reward imports lazily (e.g. ``"reasoning_gym"``): worker
    processes import them *before* they accept work, so the import time is never charged to the
    first call's wall-clock timeout.

    Registering the same function again (a re-imported module, a re-run notebook cell) replaces the
    entry; registering a *different* function under a taken name is an error.
    """
    if ":" in name:
        raise RlvrError(f"reward name {name!r} must not contain ':' (that form is an import path)")

    def decorator(fn: RewardFn) -> RewardFn:
        previous = _REWARDS.get(name)
        if previous is not None and _origin(previous) != _origin(fn):
            raise RlvrError(
                f"reward name {name!r} is already registered by {_origin(previous)}; "
                f"pick another name for {_origin(fn)}"
            )
        _REWARDS[name] = fn
        _PRELOAD[name] = tuple(preload)
        return fn

    return decorator


def _origin(fn: RewardFn) -> str:
    module = getattr(fn, "__module__", "?")
    # A script's rewards are seen as "__main__" in the parent and "__mp_main__" in workers.
    if module in ("__main__", "__mp_main__"):
        module = "__main__"
    return f"{module}.{getattr(fn, '__qualname__', repr(fn))}"


def list_rewards() -> list[str]:
    """Names of all registered rewards, sorted."""
    _ensure_builtins()
    return sorted(_REWARDS)


def get_reward(name: str) -> RewardFn:
    """The reward function called ``name``, or the function an import path ``"mod:fn"`` names.

    Raises :class:`RlvrError` naming the unknown reward and listing the registered ones.
    """
    if ":" in name:
        return _import_reward(name)
    _ensure_builtins()
    try:
        return _REWARDS[name]
    except KeyError:
        raise RlvrError(
            f"unknown reward {name!r}; registered rewards: {', '.join(sorted(_REWARDS))} "
            "(or give an import path 'package.module:function')"
        ) from None


def reward_preload(name: str) -> tuple[str, ...]:
    """Modules that workers should import before running the reward ``name``."""
    return _PRELOAD.get(name, ())


def _import_reward(path: str) -> RewardFn:
    module_name, _, attr = path.partition(":")
    if not module_name or not attr:
        raise RlvrError(f"reward import path {path!r} must look like 'package.module:function'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise RlvrError(f"reward import path {path!r}: cannot import module {module_name!r} ({exc})") from exc
    fn = getattr(module, attr, None)
    if not callable(fn):
        public = sorted(n for n, v in vars(module).items() if callable(v) and not n.startswith("_"))
        raise RlvrError(
            f"reward import path {path!r}: module {module_name!r} has no function {attr!r}; "
            f"its functions: {', '.join(public) or '(none)'}"
        )
    return fn


def _ensure_builtins() -> None:
    # Imported here, not at module top, because builtin.py imports this module to register itself.
    importlib.import_module("rlvr.rewards.builtin")
