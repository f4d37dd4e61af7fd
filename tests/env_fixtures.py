"""Environments for the multi-turn tests, registered by name (importable, like reward_fixtures)."""

from __future__ import annotations

from rlvr.envs import Environment, Step, register_env


@register_env("fixture_two_turns")
class TwoTurns(Environment):
    """Answers the first model turn with "Go on." and ends after the second; each turn earns a
    reward of a hundredth of its length, so rewards vary within a group."""

    def __init__(self) -> None:
        self.turns = 0

    def step(self, text: str) -> Step:
        self.turns += 1
        reward = 0.01 * len(text)
        if self.turns >= 2:
            return Step(done=True, reward=reward)
        return Step([{"role": "user", "content": "Go on."}], reward=reward)


@register_env("fixture_one_turn")
class OneTurn(Environment):
    """Ends the episode at the model's first turn with no reward of its own: the one-turn case of
    a multi-turn rollout, which must train exactly as a single-turn task does."""

    def step(self, text: str) -> Step:
        return Step(done=True)
