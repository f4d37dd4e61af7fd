"""What a data row may say about its environment: which one (a registered name), and a few safe params.

A dataset is untrusted input (docs/data.md, "Threat model"). An example's ``metadata.env`` routes it
to an environment and ``metadata.env_params`` gives that environment keyword arguments; both come
from data rows. So:

- ``metadata.env`` may name only a registered environment (:func:`rlvr.envs.register_env`) or the
  one the config names (``env.name``, which may be an import path: the config is code). An import
  path written in a row is refused before anything is imported.
- ``metadata.env_params`` may set only the parameters the environment declares safe for data, in
  its ``data_params`` class attribute (a name → :class:`DataParam`), each within its declared range.
  Everything else (a sandbox opt-in, a tool's timeout or memory) comes from the config's
  ``env.params``, which a row's params extend but never replace. An environment that declares
  nothing takes no params from data.

Both checks run over every example when the collector starts (errors name the file and row), and
again each time an episode's environment is built.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rlvr.data.example import Example
from rlvr.envs.base import ENVIRONMENTS, env_factory
from rlvr.errors import RlvrError


@dataclass(frozen=True)
class DataParam:
    """One environment parameter a data row may set: its type and the values allowed.

    ``kind`` is ``bool``, ``int``, ``float`` or ``str``; ``low`` / ``high`` bound numbers
    (inclusive); ``choices`` lists the allowed strings.
    """

    kind: type
    low: float | None = None
    high: float | None = None
    choices: tuple[str, ...] | None = None

    def problem(self, value: Any) -> str | None:
        """Why ``value`` is not allowed, or None when it is."""
        if self.kind is bool:
            return None if isinstance(value, bool) else "must be true or false"
        if self.kind is str:
            if not isinstance(value, str):
                return "must be text"
            if self.choices is not None and value not in self.choices:
                return f"must be one of {', '.join(self.choices)}"
            return None
        numeric = (int,) if self.kind is int else (int, float)
        if isinstance(value, bool) or not isinstance(value, numeric):
            return f"must be {'an integer' if self.kind is int else 'a number'}"
        if not math.isfinite(value):
            return "must be finite"
        if (self.low is not None and value < self.low) or (self.high is not None and value > self.high):
            return f"must be between {self.low:g} and {self.high:g}"
        return None


def is_import_path(name: str) -> bool:
    """``"package.module:attribute"`` rather than a registered name."""
    return ":" in name


def data_params_of(name: str) -> Mapping[str, DataParam]:
    """The parameters environment ``name`` lets a data row set (none unless it declares them)."""
    return getattr(env_factory(name), "data_params", {})


def route_env(example: Example, config_env: str | None) -> str | None:
    """The environment ``example`` plays out in (``metadata.env``, else ``config_env``), after
    checking that a row's name is registered or is the config's own; None for a single-turn example."""
    name = example.metadata.get("env")
    if name is None or name == "":
        return config_env
    if not isinstance(name, str):
        raise RlvrError(
            f"{example.where}: column 'env' must be an environment name, got {type(name).__name__}"
        )
    if name == config_env:
        return name
    if is_import_path(name):
        raise RlvrError(
            f"{example.where}: column 'env' names {name!r}, an import path; a data row may name only a "
            "registered environment (@register_env) or the config's env.name. Import paths belong in the "
            "config, which is code."
        )
    import rlvr.envs  # noqa: F401  (the built-in environments register themselves)

    if name not in ENVIRONMENTS:
        raise RlvrError(
            f"{example.where}: column 'env' names {name!r}, which is not a registered environment; "
            f"registered: {', '.join(ENVIRONMENTS.names())}"
        )
    return name


def env_params(example: Example, name: str, config_env: str | None, config_params: Mapping[str, Any]) -> dict:
    """Keyword arguments of ``example``'s environment ``name``: the config's ``env.params`` (when
    ``name`` is the config's environment) extended by the row's ``env_params``, each of which must
    be one the environment declares safe for data, within its range."""
    base = dict(config_params) if name == config_env else {}
    row = example.metadata.get("env_params")
    if row is None:
        return base
    if not isinstance(row, dict):
        raise RlvrError(f"{example.where}: column 'env_params' must be an object, got {type(row).__name__}")
    allowed = data_params_of(name)
    for key, value in row.items():
        if key not in allowed:
            declared = ", ".join(sorted(allowed)) or "none"
            raise RlvrError(
                f"{example.where}: env_params.{key} cannot be set by a data row; environment {name!r} "
                f"lets data set only: {declared}. Safety settings and other parameters come from the "
                "config (env.params)."
            )
        problem = allowed[key].problem(value)
        if problem is not None:
            raise RlvrError(f"{example.where}: env_params.{key} {problem}, got {value!r:.80}")
    return {**base, **row}


def check_env_examples(
    examples: Sequence[Example], config_env: str | None, config_params: Mapping[str, Any]
) -> None:
    """Route every example and check its params now, so a bad row fails at start naming the row."""
    for example in examples:
        name = route_env(example, config_env)
        if name is not None:
            env_params(example, name, config_env, config_params)
