"""Reward functions looked up by name.

A reward is a plain function ``fn(completion, example, **params) -> float | dict[str, float]``.
Rewards run inside worker processes (see :mod:`rlvr.rewards.pool`), so the pool never ships the
function object itself: it ships a *name*, and each worker resolves that name again. That is why
the registry also records the module that defined each function — a worker that does not know a
name yet imports that module, whose ``@register_reward`` decorators then fill the worker's registry.

Names of the form ``"package.module:function"`` are import paths: they need no registration and
work for any function defined at the top level of an importable module, or of a module in the
working directory (:mod:`rlvr.user_code`; reward workers look in the trainer's).

*Group rewards* (:func:`register_group_reward`) see all G completions of one prompt at once —
majority vote needs the group to find its pseudo-label — and return one value per completion. They
share the registry (one namespace of names) and are told apart by a flag on the function, so an
import path to a group function also works.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from typing import Any

from rlvr.errors import RlvrError

RewardFn = Callable[..., Any]

_GROUP_FLAG = "_rlvr_group_reward"
_SETUP_ATTR = "_rlvr_setup"

_REWARDS: dict[str, RewardFn] = {}
_PRELOAD: dict[str, tuple[str, ...]] = {}
_CHECKS: dict[str, Callable[[dict[str, Any]], None]] = {}
_EXAMPLE_CHECKS: dict[str, Callable[[dict[str, Any], list], None]] = {}
_FOLLOWS: dict[str, dict[str, str]] = {}

# Modules whose rewards are known by name without an import by the user. Each keeps its heavy
# imports (torch, transformers, math-verify) inside functions, so loading them all is cheap.
BUILTIN_MODULES = (
    "rlvr.rewards.builtin",
    "rlvr.rewards.shaping",
    "rlvr.rewards.code",
    "rlvr.rewards.ifeval",
    "rlvr.rewards.self_reward",
    "rlvr.rewards.judge",
    "rlvr.rewards.reward_model",
    "rlvr.rewards.process_reward",
    "rlvr.rewards.role_rewards",
)


def register_reward(
    name: str,
    *,
    preload: tuple[str, ...] = (),
    check: Callable[[dict[str, Any]], None] | None = None,
    setup: Callable[[dict[str, Any]], None] | None = None,
    check_examples: Callable[[dict[str, Any], list], None] | None = None,
    follows: dict[str, str] | None = None,
) -> Callable[[RewardFn], RewardFn]:
    """Register the decorated function as the reward called ``name``.

    ``preload`` names heavy modules the reward imports lazily (e.g. ``"reasoning_gym"``): worker
    processes import them *before* they accept work, so the import time is never charged to the
    first call's wall-clock timeout.

    ``check(params)`` runs once in the trainer's process when a spec naming the reward is built:
    the place to fail early on a bad setup (a missing model directory) or to make a one-time
    decision (which sandbox backend works) that workers then inherit.

    ``check_examples(params, examples)`` runs in the trainer's process once the training data is
    built, and raises ``ValueError`` when the data cannot be scored by this reward at all (e.g.
    non-numeric references for a numeric reward): one clear error at start instead of a reward
    error on every call.

    ``setup(params)`` runs in each worker process before it accepts work (so it is never charged
    to a call's timeout): the place to load a model once per worker. It travels with the function,
    so it also runs for an import path to a registered function.

    ``follows`` maps a param to the config setting it must agree with, e.g. ``{"max_tokens":
    "rollout.max_new_tokens"}`` for a length penalty whose scale is the generation limit: a run
    config that leaves the param out gets the setting's value, and one that sets another value is
    refused naming both keys (:mod:`rlvr.config.dependent`), so a preset cannot silently drift
    from the settings it was written for.

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
        if check is not None:
            _CHECKS[name] = check
        if check_examples is not None:
            _EXAMPLE_CHECKS[name] = check_examples
        if follows:
            _FOLLOWS[name] = dict(follows)
        if setup is not None:
            setattr(fn, _SETUP_ATTR, setup)
        return fn

    return decorator


def register_group_reward(
    name: str,
    *,
    preload: tuple[str, ...] = (),
    check: Callable[[dict[str, Any]], None] | None = None,
    setup: Callable[[dict[str, Any]], None] | None = None,
    check_examples: Callable[[dict[str, Any], list], None] | None = None,
    follows: dict[str, str] | None = None,
) -> Callable[[RewardFn], RewardFn]:
    """Register ``fn(completions: list[str], example, **params) -> list[float]`` as a group reward.

    The pool calls it once per group (the completions of one prompt, scored against that prompt's
    example) under the same timeout and error handling as a per-completion reward; it must return
    one finite value (or dict) per completion. Pool-supplied keyword arguments
    (``completion_tokens``, ``finish_reason``, ``token_logprobs``, ``top_logprobs``,
    ``token_self_certainty``) arrive as lists with one entry per completion.
    """
    register = register_reward(
        name, preload=preload, check=check, setup=setup, check_examples=check_examples, follows=follows
    )

    def decorator(fn: RewardFn) -> RewardFn:
        setattr(fn, _GROUP_FLAG, True)
        return register(fn)

    return decorator


def is_group_reward(fn: RewardFn) -> bool:
    """True for functions registered with :func:`register_group_reward`."""
    return bool(getattr(fn, _GROUP_FLAG, False))


def reward_setup(fn: RewardFn) -> Callable[[dict[str, Any]], None] | None:
    """The per-worker set-up registered with ``fn``, if any."""
    return getattr(fn, _SETUP_ATTR, None)


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


def reward_check(name: str) -> Callable[[dict[str, Any]], None] | None:
    """The set-up check registered with the reward ``name``, if any."""
    return _CHECKS.get(name)


def reward_example_check(name: str) -> Callable[[dict[str, Any], list], None] | None:
    """The data check registered with the reward ``name``, if any."""
    _ensure_builtins()
    return _EXAMPLE_CHECKS.get(name)


def reward_follows(name: str) -> dict[str, str]:
    """``{param: config key}`` the reward ``name`` declared with ``follows`` (empty if none)."""
    _ensure_builtins()
    return dict(_FOLLOWS.get(name, {}))


def reward_name_of(fn: RewardFn) -> str:
    """The name by which worker processes find the function ``fn``: its registered name, else the
    import path ``"module:function"`` of a function defined at the top level of a module or of the
    main script. Anything workers cannot import again (a lambda, a nested function, a method, a
    function typed into a notebook or REPL) is refused with what to do instead."""
    for name, registered in _REWARDS.items():
        if registered is fn:
            return name
    qualname = getattr(fn, "__qualname__", None)
    module_name = getattr(fn, "__module__", None)
    shown = qualname or repr(fn)
    if not callable(fn) or not qualname or not module_name or "." in qualname or "<" in qualname:
        raise RlvrError(
            f"reward function {shown}: rewards run in worker processes, which import them again, so a "
            "reward passed from Python must be a function defined at the top level of a module or script "
            "(not a lambda, a nested function, a method or a functools.partial); or register it "
            "(rlvr.rewards.register_reward) and pass its name"
        )
    if module_name == "__mp_main__":
        module_name = "__main__"
    module = sys.modules.get(module_name)
    if module_name == "__main__" and not getattr(module, "__file__", None):
        raise RlvrError(
            f"reward function {qualname}: it was defined in a notebook or an interactive session, which "
            "reward worker processes cannot import; put it in a .py file (e.g. next to the notebook) and "
            "import it from there"
        )
    if getattr(module, qualname, None) is not fn:
        raise RlvrError(
            f"reward function {qualname}: {module_name}.{qualname} is not this function (was it redefined "
            "or wrapped?), so worker processes would not find it; pass the function the module defines"
        )
    return f"{module_name}:{qualname}"


def _import_reward(path: str) -> RewardFn:
    module_name, _, attr = path.partition(":")
    if not module_name or not attr:
        raise RlvrError(f"reward import path {path!r} must look like 'package.module:function'")
    from rlvr.user_code import import_user_module, working_dir

    try:  # a module in the working directory counts too (rlvr.user_code)
        module = import_user_module(module_name)
    except ImportError as exc:
        raise RlvrError(
            f"reward import path {path!r}: cannot import module {module_name!r} ({exc}); looked in the "
            f"installed packages and the working directory {working_dir()}"
        ) from exc
    fn = getattr(module, attr, None)
    if not callable(fn):
        public = sorted(n for n, v in vars(module).items() if callable(v) and not n.startswith("_"))
        raise RlvrError(
            f"reward import path {path!r}: module {module_name!r} has no function {attr!r}; "
            f"its functions: {', '.join(public) or '(none)'}"
        )
    return fn


def _ensure_builtins() -> None:
    # Imported here, not at module top, because those modules import this one to register.
    for module in BUILTIN_MODULES:
        importlib.import_module(module)
