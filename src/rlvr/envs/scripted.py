"""A game played by a scripted player through its text interface: the example games the openings show."""

from __future__ import annotations

from collections.abc import Callable

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
