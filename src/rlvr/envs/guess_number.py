"""Number guessing with feedback: find a secret number in 1..N, told "higher" or "lower" after each guess.

The secret is drawn from the example's seed (``metadata["seed"]``), so the same seed is the same
game. Each turn the model writes ``<guess>37</guess>`` (spaces and case in the tag do not matter;
the turn ends where ``</guess>`` completes); the game answers, as a ``user`` message, "Higher." or
"Lower." with the guesses left. The right number ends the episode with reward 1; running out of
guesses (``max_guesses``, by default ⌈log2(N + 1)⌉: what a binary search needs at worst) ends it
with 0. A turn without a number in range is answered with the rules and counted
(``invalid_actions``); it uses up a guess.

:func:`optimal_policy` (binary search over what the conversation says so far) always wins within
⌈log2(N + 1)⌉ guesses; :func:`random_policy` guesses uniformly. Both read and write only text.
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Callable
from typing import Any

from rlvr.data.example import Example
from rlvr.envs.base import Environment, Message, Step, register_env
from rlvr.envs.data_params import DataParam
from rlvr.envs.game_split import split_seeds

_GUESS = re.compile(r"<guess>\s*(-?\d+)\s*</guess>", re.IGNORECASE)


def rules(high: int, guesses: int) -> str:
    return (
        f"I am thinking of a whole number from 1 to {high}. Find it in at most {guesses} guesses. Each "
        "turn, write one guess as <guess>50</guess>; I answer Higher (the number is bigger) or Lower "
        "(it is smaller)."
    )


def secret_number(seed: int, high: int) -> int:
    return random.Random(f"rlvr-guess:{seed}:{high}").randint(1, high)


def optimal_policy(messages: list[Message]) -> str:
    """Binary search: the middle of the range the answers so far leave open."""
    high = int(re.search(r"from 1 to (\d+)", messages[0]["content"]).group(1))
    low = 1
    for asked, answer in zip(messages, messages[1:]):
        if asked["role"] != "assistant":
            continue
        found = _GUESS.findall(asked["content"])
        if not found:
            continue
        guess = int(found[-1])
        if answer["content"].startswith("Higher"):
            low = max(low, guess + 1)
        elif answer["content"].startswith("Lower"):
            high = min(high, guess - 1)
    return f"<guess>{(low + high) // 2}</guess>"


def random_policy(rng: random.Random, high: int = 100) -> Callable[[list[Message]], str]:
    """A policy that guesses uniformly in 1..``high`` (``messages -> text``)."""
    return lambda messages: f"<guess>{rng.randint(1, high)}</guess>"


@register_env("guess_number")
class GuessNumber(Environment):
    """One secret number (see the module docstring). ``Step.info`` counts ``guesses`` (valid ones)
    and ``invalid_actions``; :meth:`outcome` has the episode's ``solved``, ``moves`` (valid guesses)
    and ``invalid_actions``."""

    stop_strings = ("</guess>",)
    # what a data row's env_params may set (rlvr.envs.data_params)
    data_params = {"high": DataParam(int, 2, 10**12), "max_guesses": DataParam(int, 1, 100)}

    def __init__(self, high: int = 100, max_guesses: int | None = None) -> None:
        if high < 2:
            raise ValueError(f"guess_number: high must be at least 2, got {high}")
        if max_guesses is not None and max_guesses < 1:
            raise ValueError(f"guess_number: max_guesses must be at least 1, got {max_guesses}")
        self.high = high
        self.max_guesses = max_guesses if max_guesses is not None else math.ceil(math.log2(high + 1))
        self.secret, self.guesses, self.invalid, self.solved = 0, 0, 0, False

    def reset(self, example: Example, rng: random.Random) -> list[Message]:
        seed = int(example.metadata.get("seed", rng.randrange(2**31)))
        self.secret, self.guesses, self.invalid, self.solved = secret_number(seed, self.high), 0, 0, False
        return [
            {"role": "system", "content": rules(self.high, self.max_guesses)},
            {"role": "user", "content": "Your first guess?"},
        ]

    def step(self, text: str) -> Step:
        if not self.secret:
            raise RuntimeError("guess_number: step() before reset()")
        found = _GUESS.findall(text)
        guess = int(found[-1]) if found else None
        self.guesses += 1
        left = self.max_guesses - self.guesses
        if guess is None or not 1 <= guess <= self.high:
            self.invalid += 1
            info = {"invalid_actions": 1.0}
            if left <= 0:
                return Step(done=True, info=info)
            reply = f"That is not a guess from 1 to {self.high}. Write it as <guess>50</guess>. {left} left."
            return Step([{"role": "user", "content": reply}], info=info)
        if guess == self.secret:
            self.solved = True
            return Step(reward=1.0, done=True, info={"guesses": 1.0})
        if left <= 0:
            return Step(done=True, info={"guesses": 1.0})
        hint = "Higher" if self.secret > guess else "Lower"
        return Step([{"role": "user", "content": f"{hint}. {left} left."}], info={"guesses": 1.0})

    def outcome(self) -> dict[str, float]:
        return {
            "solved": float(self.solved),
            "moves": float(self.guesses - self.invalid),
            "invalid_actions": float(self.invalid),
        }


def held_out_numbers(high: int) -> frozenset[int]:
    """The secrets of the held-out split: a fixed fifth of 1..``high`` (at least one)."""
    numbers = list(range(1, high + 1))
    return frozenset(random.Random(f"rlvr-guess-held-out:{high}").sample(numbers, max(1, round(high / 5))))


def guess_number_examples(count: int, seed: int, split: str = "train", **config: Any) -> list[Example]:
    """``count`` games: training games from even seeds, held-out ones from odd seeds, and each
    secret is in one split only (:func:`held_out_numbers`)."""
    env = GuessNumber(**config)  # unknown or bad parameters fail here
    held_out = held_out_numbers(env.high)
    seeds = split_seeds("guess_number", count, seed, split, lambda s: secret_number(s, env.high) in held_out)
    return [
        Example(
            id=f"guess-{game_seed}",
            prompt=[{"role": "user", "content": "Guess the number."}],
            data_source="guess_number",
            verifier="environment",  # the game scores itself (rewards.builtin.environment_reward)
            metadata={"env": "guess_number", "env_params": dict(config), "seed": game_seed},
        )
        for game_seed in seeds
    ]
