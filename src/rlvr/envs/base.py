"""Environments: what the policy talks to over several turns (tools, games, search).

An :class:`Environment` holds one episode's state. The multi-turn rollout asks it for the
opening conversation (:meth:`Environment.reset`), then alternates: the model writes a turn (its
sampled tokens, decoded only for the environment to read), the environment answers with
:meth:`Environment.step` — messages to append (a tool's result, a game's new state), a reward for
the turn, and whether the episode is over. The model's tokens enter the trajectory exactly as
sampled; the environment's messages enter as context tokens that are attended to but never
trained on (:mod:`rlvr.trajectory`).

Environments are registered by name (:func:`register_env`) and built per episode from
``params`` (YAML), so a dataset can route each example to its own environment.
"""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from rlvr.data.example import Example
from rlvr.registry import Registry

Message = dict[str, str]


@dataclass
class Step:
    """The environment's answer to one model turn.

    ``messages`` are appended to the conversation (role ``tool`` for a tool's result, ``user`` for
    a game's or a person's reply); empty when the episode ends without one. ``reward`` is this
    turn's reward (placed on the turn's last sampled token). ``info`` holds counters the run
    reports summed over episodes (e.g. ``tool_calls``, ``tool_errors``).
    """

    messages: list[Message] = field(default_factory=list)
    reward: float = 0.0
    done: bool = False
    info: dict[str, float] = field(default_factory=dict)


class Environment(ABC):
    """One episode of an interactive task. Subclasses set ``stop_strings`` when a model turn ends
    at a closing tag (``</tool_call>``) rather than at the end of the message."""

    stop_strings: tuple[str, ...] = ()
    # A scripted player (``messages -> text``) that plays the game well: the source of expert
    # demonstrations for SFT (``sft.player: optimal``, :mod:`rlvr.data.env_demos`); None when the
    # environment has none (a tool, a search).
    expert: ClassVar[Callable[[list[Message]], str] | None] = None

    def has_expert(self) -> bool:
        """Whether :meth:`expert_turn` can play this environment (``sft.player: optimal``)."""
        return type(self).expert is not None

    def expert_turn(self, messages: list[Message]) -> str:
        """The expert's next turn in the episode so far (after :meth:`reset`). Default: the class's
        :attr:`expert`, which reads only the conversation. An environment whose expert needs the
        episode itself (a search whose expert knows the example's answer and gold documents)
        overrides this and :meth:`has_expert`."""
        expert = type(self).expert
        if expert is None:
            raise NotImplementedError(f"{type(self).__name__} has no scripted expert")
        return expert(messages)

    def reset(self, example: Example, rng: random.Random) -> list[Message]:
        """The conversation the model answers first (default: the example's prompt)."""
        return list(example.prompt)

    @abstractmethod
    def step(self, text: str) -> Step:
        """React to the model's turn ``text`` (its sampled tokens, decoded)."""

    def outcome(self) -> dict[str, float]:
        """Numbers about the finished episode for the logs (e.g. ``solved``); default none."""
        return {}

    def state(self) -> str | None:
        """The state the model is about to act in, as a short string equal for equal states (a
        game's position, the candidates its feedback left), or None when the environment has no
        discrete state. The rollout records it before every model turn (``Trajectory.turn_states``);
        step-level credit that groups turns by state (``algo.advantage: gigpo``) reads it.
        Default: None."""
        return None

    def limit_step(self, seconds: float) -> None:
        """The rollout says, before each :meth:`step`, how many wall-clock seconds that step may
        take (the step timeout, or less when the episode's own time is running out). An
        environment that runs tools should cap their timeouts by it, so that a slow call ends as
        a tool error the model can read rather than as a timed-out episode. Default: ignored."""
        return None

    def close(self) -> None:
        """Stop whatever this episode still runs (a tool call in flight) and release it. The
        rollout calls it when a step passes its time limit (from another thread, while
        :meth:`step` may still be running) and when the episode is over; it must return quickly
        and may be called more than once. Default: nothing to stop."""
        return None


EnvFactory = Callable[..., Environment]
ENVIRONMENTS: Registry[EnvFactory] = Registry("environment")


def register_env(name: str) -> Callable[[EnvFactory], EnvFactory]:
    """Register an environment class (or any callable taking ``**params``) under ``name``."""
    return ENVIRONMENTS.register(name)


def env_factory(name: str) -> EnvFactory:
    """The environment registered as ``name``, or ``"module:attribute"`` imported (a class or
    function in the user's own code, no registration needed; a module in the working directory
    is found too, :mod:`rlvr.user_code`)."""
    if ":" not in name:
        return ENVIRONMENTS.get(name)
    from rlvr.errors import RlvrError
    from rlvr.user_code import import_user_module, working_dir

    module, _, attribute = name.partition(":")
    try:
        return getattr(import_user_module(module), attribute)
    except ImportError as err:
        raise RlvrError(
            f"environment '{name}': cannot import {attribute} from {module}: {err} (looked in the installed "
            f"packages and the working directory {working_dir()})"
        ) from err
    except AttributeError as err:
        raise RlvrError(f"environment '{name}': cannot import {attribute} from {module}: {err}") from err


def make_env(name: str, params: dict[str, Any] | None = None) -> Environment:
    return env_factory(name)(**(params or {}))
