"""Number guessing with feedback: find a secret number in 1..N, told "higher" or "lower" after each guess.

The secret is drawn from the example's seed (``metadata["seed"]``), so the same seed is the same
game. Each turn the model writes ``<guess>37</guess>`` (spaces and case in the tag do not matter;
the turn ends where ``</guess>`` completes); the game answers, as a ``user`` message, "Higher." or
"Lower." with the guesses left. The right number ends the episode with reward 1; running out of
guesses (``max_guesses``, by default ⌈log2(N + 1)⌉: what a binary search needs at worst) ends it
with 0. A turn without a number in range is answered with the rules and counted
(``invalid_actions``); it uses up a guess.

**Demonstration** (``demonstrate``, default on): the opening is the rules (system), then one short
example game over the same 1..N as real chat turns (the first question, the binary-search guesses
and the game's own answers, played by :func:`optimal_policy` against a training secret found in
three guesses), then a user message that says the example is over (:data:`EXAMPLE_OVER`) and asks
"Your first guess?" as the game without a demonstration opens. The scripted players read only what
follows that message (:func:`real_game`).

**Shaped progress** (``progress_reward`` = p, default 0: off). Φ = 1 − log2(size of the range still
consistent with the answers) / log2(N): 0 at the start, 1 once one number is left or the secret is
guessed. Each turn earns p × (Φ after − Φ before) on top of the game's reward, so an episode's total
is p × Φ(end) (+1 for a win) and the shaping cannot be collected without narrowing the range:

- a win earns exactly 1 + p (however many guesses it took);
- an episode that runs out of guesses earns p × Φ(end), in [0, p]: more the more it narrowed;
- invalid turns and guesses outside the consistent range (their answer rules nothing out) earn 0;
  no turn ever earns a negative amount.

:func:`optimal_policy` (binary search over what the conversation says so far) always wins within
⌈log2(N + 1)⌉ guesses; :func:`random_policy` guesses uniformly. Both read and write only text.
"""

from __future__ import annotations

import functools
import math
import random
import re
from collections.abc import Callable
from typing import Any

from rlvr.data.example import Example
from rlvr.envs.base import Environment, Message, Step, register_env
from rlvr.envs.data_params import DataParam
from rlvr.envs.game_split import split_seeds
from rlvr.envs.scripted import check_demonstrate, check_progress_reward, play_scripted

_GUESS = re.compile(r"<guess>\s*(-?\d+)\s*</guess>", re.IGNORECASE)
# starts the user message that ends the demonstration and opens the real game
EXAMPLE_OVER = "The example game is over."
FIRST_QUESTION = "Your first guess?"
# above this, the held-out split is not built (it lists every number): see held_out_numbers
HELD_OUT_LIMIT = 10**6


def rules(high: int, guesses: int) -> str:
    return (
        f"I am thinking of a whole number from 1 to {high}. Find it in at most {guesses} guesses. Each "
        "turn, write one guess as <guess>50</guess>; I answer Higher (the number is bigger) or Lower "
        "(it is smaller)."
    )


def secret_number(seed: int, high: int) -> int:
    return random.Random(f"rlvr-guess:{seed}:{high}").randint(1, high)


def real_game(messages: list[Message]) -> list[Message]:
    """The messages of the game being played: from the user message that ends a demonstration
    (:data:`EXAMPLE_OVER`) on, or all of them when there was none."""
    starts = [i for i, m in enumerate(messages) if m["role"] == "user" and EXAMPLE_OVER in m["content"]]
    return messages[starts[-1] :] if starts else messages


def optimal_policy(messages: list[Message]) -> str:
    """Binary search: the middle of the range the answers so far leave open (the real game's
    answers only, not a demonstration's)."""
    high = int(re.search(r"from 1 to (\d+)", messages[0]["content"]).group(1))
    low = 1
    played = real_game(messages)
    for asked, answer in zip(played, played[1:]):
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


def _potential(low: int, top: int, high: int) -> float:
    """Φ: 1 − log2(numbers still possible) / log2(all numbers)."""
    return 1.0 - math.log2(top - low + 1) / math.log2(high)


@register_env("guess_number")
class GuessNumber(Environment):
    """One secret number (see the module docstring). ``Step.info`` counts ``guesses`` (valid ones)
    and ``invalid_actions``; :meth:`outcome` has the episode's ``solved``, ``moves`` (valid guesses),
    ``invalid_actions`` and ``progress`` (Φ at the end, 0..1, also when the shaping is off)."""

    stop_strings = ("</guess>",)
    expert = staticmethod(optimal_policy)  # the SFT demonstrations of sft.player: optimal
    # what a data row's env_params may set (rlvr.envs.data_params)
    data_params = {
        "high": DataParam(int, 2, 10**12),
        "max_guesses": DataParam(int, 1, 100),
        "demonstrate": DataParam(bool),
        "progress_reward": DataParam(float, 0.0, 1.0),
    }

    def __init__(
        self,
        high: int = 100,
        max_guesses: int | None = None,
        demonstrate: bool = True,
        progress_reward: float = 0.0,
    ) -> None:
        if high < 2:
            raise ValueError(f"guess_number: high must be at least 2, got {high}")
        if max_guesses is not None and max_guesses < 1:
            raise ValueError(f"guess_number: max_guesses must be at least 1, got {max_guesses}")
        self.high = high
        self.max_guesses = max_guesses if max_guesses is not None else math.ceil(math.log2(high + 1))
        self.demonstrate = check_demonstrate("guess_number", demonstrate)
        self.progress_reward = check_progress_reward("guess_number", progress_reward)
        self.secret, self.guesses, self.invalid, self.solved = 0, 0, 0, False
        self.low, self.top, self.progress = 1, high, 0.0

    def reset(self, example: Example, rng: random.Random) -> list[Message]:
        seed = int(example.metadata.get("seed", rng.randrange(2**31)))
        self._start(secret_number(seed, self.high))
        system = {"role": "system", "content": rules(self.high, self.max_guesses)}
        demo = demonstration(self.high, self.max_guesses) if self.demonstrate else ()
        if not demo:
            return [system, {"role": "user", "content": FIRST_QUESTION}]
        return [system, *(dict(m) for m in demo)]

    def _start(self, secret: int) -> None:
        self.secret, self.guesses, self.invalid, self.solved = secret, 0, 0, False
        self.low, self.top, self.progress = 1, self.high, 0.0

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
        before = self.progress
        if guess == self.secret:
            self.solved, self.progress = True, 1.0
            return Step(reward=1.0 + self._shaped(before), done=True, info={"guesses": 1.0})
        if guess < self.secret:  # what the answer rules out: nothing when the guess was already ruled out
            self.low = max(self.low, guess + 1)
        else:
            self.top = min(self.top, guess - 1)
        self.progress = _potential(self.low, self.top, self.high)
        reward = self._shaped(before)
        if left <= 0:
            return Step(reward=reward, done=True, info={"guesses": 1.0})
        hint = "Higher" if self.secret > guess else "Lower"
        return Step(
            [{"role": "user", "content": f"{hint}. {left} left."}], reward=reward, info={"guesses": 1.0}
        )

    def state(self) -> str | None:
        """The numbers the answers so far leave possible (guesses outside them tell nothing new)."""
        return f"{self.low}-{self.top}" if self.secret else None

    def _shaped(self, before: float) -> float:
        return self.progress_reward * (self.progress - before)

    def outcome(self) -> dict[str, float]:
        return {
            "solved": float(self.solved),
            "moves": float(self.guesses - self.invalid),
            "invalid_actions": float(self.invalid),
            "progress": self.progress,
        }


def _found_at(low: int, high: int, depth: int) -> list[int]:
    """The numbers of low..high that binary search (:func:`optimal_policy`) finds with its
    ``depth``-th guess."""
    if low > high:
        return []
    middle = (low + high) // 2
    if depth == 1:
        return [middle]
    return _found_at(low, middle - 1, depth - 1) + _found_at(middle + 1, high, depth - 1)


def demonstration_secret(high: int, max_guesses: int) -> int | None:
    """The example game's secret: a training secret (never a held-out one) that binary search finds
    in 3 guesses, else in 2, 4 or 1 (within ``max_guesses``), preferring one whose answers are both
    Higher and Lower; None when there is none. (Above :data:`HELD_OUT_LIMIT` no split exists.)"""
    held_out = held_out_numbers(high) if high <= HELD_OUT_LIMIT else frozenset()
    for depth in (d for d in (3, 2, 4, 1) if d <= max_guesses):
        found = _found_at(1, high, depth)  # first: all answers Lower; last: all Higher
        for n in [*found[1:-1], *found[:1], *found[-1:]]:
            if n not in held_out:
                return n
    return None


@functools.lru_cache(maxsize=64)
def demonstration(high: int, max_guesses: int) -> tuple[Message, ...]:
    """The example game's turns after the system message, played by the game itself with
    :func:`optimal_policy`, and the message that starts the real game; empty when no training
    secret can be shown won within ``max_guesses``."""
    secret = demonstration_secret(high, max_guesses)
    if secret is None:
        return ()
    game = GuessNumber(high, max_guesses, demonstrate=False)
    game._start(secret)
    system = {"role": "system", "content": rules(high, max_guesses)}
    turns = play_scripted(game, system, {"role": "user", "content": FIRST_QUESTION}, optimal_policy)
    if not game.solved:
        raise AssertionError(f"guess_number: the demonstration does not win (high={high})")
    over = f"Right, it was {secret}. {EXAMPLE_OVER} Now I am thinking of a new number. {FIRST_QUESTION}"
    return (*turns, {"role": "user", "content": over})


@functools.lru_cache(maxsize=8)
def held_out_numbers(high: int) -> frozenset[int]:
    """The secrets of the held-out split: a fixed fifth of 1..``high`` (at least one). The split
    lists every number, so ``high`` above :data:`HELD_OUT_LIMIT` has none (ValueError)."""
    if high > HELD_OUT_LIMIT:
        raise ValueError(
            f"guess_number: high={high} is above {HELD_OUT_LIMIT}, too many numbers to split into "
            "training and held-out secrets"
        )
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
