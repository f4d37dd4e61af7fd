"""Examples from reasoning-gym's procedural task generators (offline, seeded, verifiable).

reasoning-gym reports a bad task name or config with bare ``ValueError``/``TypeError``/
``AssertionError`` tracebacks; here they become :class:`RlvrError` messages that name the task and
the key, and list what is allowed, because a config typo is the commonest way to get this wrong.
"""

from __future__ import annotations

import dataclasses
import difflib
import pickle
from typing import Any

from rlvr.data.example import Example
from rlvr.data.prompts import ANSWER_TAG_INSTRUCTION, build_messages
from rlvr.errors import RlvrError

# Passed as arguments of their own; letting the task config carry them too would make it
# ambiguous which one wins.
_RESERVED_CONFIG_KEYS = ("size", "seed")


def _registry() -> dict[str, tuple[type, type]]:
    """reasoning-gym's ``name -> (dataset class, config class)`` table (imported lazily: slow)."""
    import reasoning_gym.factory

    return reasoning_gym.factory.DATASETS


def list_reasoning_gym_tasks() -> list[str]:
    """Names of all reasoning-gym tasks, sorted (what ``rlvr tasks`` prints)."""
    return sorted(_registry())


def _check_task(task: str) -> tuple[type, type]:
    registry = _registry()
    if task in registry:
        return registry[task]
    close = difflib.get_close_matches(task, list(registry), n=5, cutoff=0.6)
    hint = f" Did you mean: {', '.join(close)}?" if close else ""
    raise RlvrError(
        f"Unknown reasoning-gym task {task!r}.{hint} Run `rlvr tasks` to list all {len(registry)} tasks."
    )


def _config_fields(config_cls: type) -> list[str]:
    return [f.name for f in dataclasses.fields(config_cls) if f.name not in _RESERVED_CONFIG_KEYS]


def _check_config_keys(task: str, config: dict[str, Any], config_cls: type) -> None:
    allowed = _config_fields(config_cls)
    for key in config:
        if key in _RESERVED_CONFIG_KEYS:
            raise RlvrError(
                f"reasoning-gym task {task!r}: config key {key!r} is not allowed in the task config; "
                f"set the dataset {key} on its own instead."
            )
        if key not in allowed:
            close = difflib.get_close_matches(key, allowed, n=3, cutoff=0.6)
            hint = f" Did you mean: {', '.join(close)}?" if close else ""
            raise RlvrError(
                f"reasoning-gym task {task!r} has no config key {key!r}.{hint} "
                f"Allowed keys: {', '.join(allowed) or '(none)'}."
            )


def _make_picklable(value: Any) -> Any:
    """Return ``value`` with every part that cannot be pickled replaced by its ``repr``.

    Rewards run in worker processes, so ``Example.metadata`` must survive pickling. No task in
    reasoning-gym 0.1.25 needs this, but a future task holding a generator or lambda would
    otherwise break the reward pool far from here.
    """
    if isinstance(value, dict):
        return {k: _make_picklable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_make_picklable(v) for v in value)
    try:
        pickle.dumps(value)
    except Exception:
        return repr(value)
    return value


def _picklable_entry(entry: dict[str, Any]) -> dict[str, Any]:
    try:
        pickle.dumps(entry)
    except Exception:
        return _make_picklable(entry)
    return entry


def load_reasoning_gym(
    task: str,
    size: int,
    seed: int,
    config: dict[str, Any] | None = None,
    system_prompt: str | None = None,
    answer_format: str | None = ANSWER_TAG_INSTRUCTION,
    verifier: str | None = "reasoning_gym",
) -> list[Example]:
    """Generate ``size`` examples of a reasoning-gym task; the same seed gives the same examples.

    Each example keeps the whole reasoning-gym entry in ``metadata["rg_entry"]`` because the
    task's own ``score_answer`` needs it (many tasks score against metadata, not the answer).
    The reference is ``str(entry["answer"])``, or ``None`` for tasks whose entries have no single
    answer (e.g. ``graph_color``: any valid colouring scores, so only ``score_answer`` can tell).
    """
    dataset_cls, config_cls = _check_task(task)
    config = dict(config or {})
    _check_config_keys(task, config, config_cls)
    if size < 1:
        raise RlvrError(f"reasoning-gym task {task!r}: size must be at least 1, got {size}.")

    import reasoning_gym

    try:
        dataset = reasoning_gym.create_dataset(task, size=size, seed=seed, **config)
    except (TypeError, ValueError, AssertionError) as error:
        raise RlvrError(
            f"reasoning-gym task {task!r} rejected its config {config}: {error or type(error).__name__}"
        ) from error

    examples: list[Example] = []
    for i in range(size):
        try:
            entry = dataset[i]
        except (TypeError, ValueError, AssertionError) as error:
            raise RlvrError(
                f"reasoning-gym task {task!r} failed to generate item {i} with config {config}: "
                f"{error or type(error).__name__}. Check the config values."
            ) from error
        answer = entry.get("answer")
        examples.append(
            Example(
                id=f"{task}-{seed}-{i}",
                prompt=build_messages(entry["question"], system_prompt, answer_format),
                reference=None if answer is None else str(answer),
                data_source=task,
                verifier=verifier,
                metadata={"rg_entry": _picklable_entry(entry)},
            )
        )
    return examples
