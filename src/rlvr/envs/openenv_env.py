"""OpenEnv environments as rlvr environments (``env.name: openenv``).

OpenEnv (``pip install 'rlvr[openenv]'``, the ``openenv-core`` package) is a Gymnasium-style standard
for agent environments: an ``Environment`` with ``reset(seed=...)`` and ``step(action)``, typed
``Action`` and ``Observation`` models (pydantic), each observation carrying ``done`` and ``reward``.
Environments are usually served (``openenv.core.env_server.create_app``, a Docker image, a Hugging
Face Space) and spoken to over OpenEnv's WebSocket protocol. This adapter plays either kind:

- ``env.params.base_url: http://host:port``: a running OpenEnv server, through OpenEnv's own generic
  client (one session per episode). What the server sends is untrusted: observations are shown as
  text capped at ``max_observation_chars``, rewards must be finite numbers.
- ``env.params.environment: "module:Class"``: an ``Environment`` subclass run in this process (the
  config is trusted code; ``env_kwargs`` are passed to the class). Its action class is read from the
  type hint of its ``step`` method, or named by ``action_class: "module:Class"``.

The model's turn becomes the action ``{action_field: text}`` (default field ``message``). An
observation is shown to the model as its ``observation_field`` (or, when unset, every field but
``done``, ``reward`` and ``metadata``: the value itself when there is one, ``name: value`` lines
otherwise); ``instructions`` (optional) open the first message. Rewards are per turn: each
observation's ``reward`` lands on the turn that caused it (``None`` on a turn that does not end the
episode counts as 0). The observation that ends the episode must carry a reward: one without is an
error the rollout counts, never a 0 (OpenEnv#1025). An episode rlvr cuts at ``env.max_turns``
before the environment ends it has no verdict and scores 0, as every environment's does.

The episode's seed comes from the example (``metadata.seed``; the ``openenv`` dataset makes training
episodes from even seeds and held-out ones from odd seeds); a data row chooses nothing else.
"""

from __future__ import annotations

import json
import math
import random
import typing
from typing import Any

from rlvr.data.example import Example
from rlvr.envs.base import Environment, Message, Step, register_env
from rlvr.errors import RlvrError

RESERVED = ("done", "reward", "metadata")
MAX_MESSAGE_MB = 1.0  # a server's message larger than this is refused by the client


def _openenv() -> Any:
    try:
        import openenv.core
    except ImportError as err:
        raise RlvrError("env.name=openenv needs OpenEnv: pip install 'rlvr[openenv]'") from err
    return openenv.core


def _import(path: str, key: str) -> Any:
    from rlvr.user_code import import_user_module

    module, _, attribute = path.partition(":")
    if not module or not attribute:
        raise RlvrError(f"env.params.{key}: expected 'module:Class', got {path!r}")
    try:
        return getattr(import_user_module(module), attribute)
    except (ImportError, AttributeError) as err:
        raise RlvrError(f"env.params.{key}: cannot import {path!r}: {err}") from err


def _action_class(env_class: type, named: str | None) -> type:
    if named:
        return _import(named, "action_class")
    try:
        hints = typing.get_type_hints(env_class.step)
    except Exception as err:  # unresolvable annotations
        raise RlvrError(
            f"env.params.environment: cannot read the action type of {env_class.__name__}.step ({err}); "
            "name it with env.params.action_class"
        ) from err
    action = hints.get("action")
    if not isinstance(action, type):
        raise RlvrError(
            f"env.params.environment: {env_class.__name__}.step has no action type hint; name it with "
            "env.params.action_class"
        )
    return action


def render_observation(observation: dict[str, Any], field: str | None, limit: int) -> str:
    """The text the model reads for one observation (capped at ``limit`` characters)."""
    if field is not None:
        if field not in observation:
            raise RuntimeError(f"openenv: the observation has no field {field!r} (has {sorted(observation)})")
        shown = {field: observation[field]}
    else:
        shown = {k: v for k, v in observation.items() if k not in RESERVED}

    def text(value: Any) -> str:
        return value if isinstance(value, str) else json.dumps(value, default=str)

    if len(shown) == 1:
        body = text(next(iter(shown.values())))
    else:
        body = "\n".join(f"{key}: {text(value)}" for key, value in shown.items())
    if len(body) > limit:
        body = body[:limit] + f"\n[... {len(body) - limit} characters cut]"
    return body


def _observation(value: Any) -> dict[str, Any]:
    """A server's observation, which must be a JSON object."""
    if not isinstance(value, dict):
        kind = type(value).__name__
        raise RuntimeError(f"openenv: the server sent an observation that is not an object ({kind})")
    return value


def _reward(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return float(value)
    if not isinstance(value, int | float) or not math.isfinite(value):
        raise RuntimeError(f"openenv: the environment sent a reward that is not a finite number: {value!r}")
    return float(value)


@register_env("openenv")
class OpenEnvEnvironment(Environment):
    """One OpenEnv episode. ``outcome()``: ``reward`` (the episode's summed reward), ``solved``
    (the last reward ≥ 1), ``turns``."""

    data_params: dict = {}  # a data row chooses nothing here; its seed is metadata.seed

    def __init__(
        self,
        base_url: str | None = None,
        environment: str | None = None,
        env_kwargs: dict[str, Any] | None = None,
        action_class: str | None = None,
        action_field: str = "message",
        observation_field: str | None = None,
        instructions: str = "",
        reset_kwargs: dict[str, Any] | None = None,
        max_observation_chars: int = 4000,
        connect_timeout_s: float = 10.0,
        message_timeout_s: float = 60.0,
    ) -> None:
        core = _openenv()
        if (base_url is None) == (environment is None):
            raise RlvrError("env.params: give exactly one of base_url (a running server) or environment")
        self.base_url, self.action_field, self.observation_field = base_url, action_field, observation_field
        self.instructions, self.reset_kwargs = instructions, dict(reset_kwargs or {})
        self.limit, self.connect_timeout_s = int(max_observation_chars), float(connect_timeout_s)
        self.message_timeout_s = float(message_timeout_s)
        self.env: Any = None
        self.client: Any = None
        if environment is not None:
            env_class = _import(environment, "environment")
            if not (isinstance(env_class, type) and issubclass(env_class, core.env_server.Environment)):
                raise RlvrError(f"env.params.environment: {environment!r} is not an OpenEnv Environment")
            self.action_type = _action_class(env_class, action_class)
            self.env = env_class(**dict(env_kwargs or {}))
        elif env_kwargs or action_class:
            raise RlvrError("env.params: env_kwargs and action_class go with environment, not base_url")
        self.turns, self.total, self.last = 0, 0.0, 0.0

    def _first(self, text: str) -> list[Message]:
        opening = f"{self.instructions}\n\n{text}" if self.instructions else text
        return [{"role": "user", "content": opening}]

    def reset(self, example: Example, rng: random.Random) -> list[Message]:
        seed = int(example.metadata.get("seed", rng.randrange(2**31)))
        self.turns, self.total, self.last = 0, 0.0, 0.0
        if self.env is not None:
            observation = self.env.reset(seed=seed, **self.reset_kwargs).model_dump()
        else:
            core = _openenv()
            self.client = core.GenericEnvClient(
                base_url=self.base_url,
                connect_timeout_s=self.connect_timeout_s,
                message_timeout_s=self.message_timeout_s,
                max_message_size_mb=MAX_MESSAGE_MB,
                mode="simulation",
            ).sync()
            self.client.connect()
            observation = _observation(self.client.reset(seed=seed, **self.reset_kwargs).observation)
        return self._first(render_observation(observation, self.observation_field, self.limit))

    def step(self, text: str) -> Step:
        if self.env is None and self.client is None:
            raise RuntimeError("openenv: step() before reset()")
        self.turns += 1
        if self.env is not None:
            try:
                action = self.action_type(**{self.action_field: text})
            except Exception as err:  # pydantic's ValidationError: the action class has no such field
                raise RuntimeError(f"openenv: cannot make an action from the model's turn: {err}") from err
            result = self.env.step(action).model_dump()
            observation, reward, done = result, result.get("reward"), bool(result.get("done"))
        else:
            outcome = self.client.step({self.action_field: text})
            observation = _observation(outcome.observation)
            reward, done = outcome.reward, outcome.done
            if not isinstance(done, bool):
                raise RuntimeError(f"openenv: the server sent a done flag that is not a boolean: {done!r}")
        value = _reward(reward)
        if done and value is None:
            raise RuntimeError("openenv: the episode ended without a reward (no verdict)")
        self.last = value or 0.0
        self.total += self.last
        if done:
            return Step(reward=self.last, done=True)
        shown = render_observation(observation, self.observation_field, self.limit)
        return Step([{"role": "user", "content": shown}], reward=self.last)

    def outcome(self) -> dict[str, float]:
        return {"reward": self.total, "solved": float(self.last >= 1.0), "turns": float(self.turns)}

    def close(self) -> None:
        client, self.client = self.client, None
        if client is not None:
            try:
                client.close()
            except Exception:  # a connection already gone
                pass
