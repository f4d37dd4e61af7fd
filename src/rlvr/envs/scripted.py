"""A game played by a scripted player through its text interface (the example games the openings show),
and the checks of the games' shared options."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rlvr.envs.base import Environment, Message

Policy = Callable[[list[Message]], str]


def play_scripted(game: Environment, system: Message, first: Message, policy: Policy) -> list[Message]:
    """The conversation after ``system`` of ``game`` (already started) played by ``policy``: ``first``,
    then each action and the game's answer, ending at the action that ends the game. ``policy``
    sees the whole conversation, ``system`` included, as a model would."""
    turns: list[Message] = [first]
    while True:
        text = policy([system, *turns])
        step = game.step(text)
        turns.append({"role": "assistant", "content": text})
        if step.done:
            return turns
        turns.extend(step.messages)


def check_demonstrate(game: str, demonstrate: Any) -> bool:
    if not isinstance(demonstrate, bool):
        raise ValueError(f"{game}: demonstrate must be true or false, got {demonstrate!r}")
    return demonstrate


def check_progress_reward(game: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
        raise ValueError(f"{game}: progress_reward must be a number from 0 to 1, got {value!r}")
    return float(value)
