"""Wordle as a text game: find a secret five-letter word, told after each guess which letters sit
in the right place, which are in the word elsewhere, and which are not in it.

The secret is one of the :data:`~rlvr.envs.wordle_words.WORDS` shipped with the package, drawn from
the example's seed (``metadata["seed"]``), so the same seed is the same game. Each turn the model
writes ``<guess>crane</guess>`` (case and spaces inside the tag do not matter; the turn ends where
``</guess>`` completes). The game answers, as a ``user`` message, one line per guess, each letter
marked the way Wordle colours it::

    crane: c=absent r=present a=correct n=absent e=absent
    5 guesses left.

``correct``: that letter is in that place; ``present``: the word has the letter elsewhere;
``absent``: the word has no more of it (a repeated letter is marked ``present`` only as often as
the secret holds it beyond its ``correct`` places, as in Wordle). The secret ends the episode with
reward 1; running out of guesses (``max_guesses``, default 6) ends it with 0. A turn whose guess is
not five letters (or, with ``words_only``, not in the list) is answered with the rules, counted
(``invalid_actions``), and uses up a guess. By default any five letters are a guess: a 135M model
learns the format before it learns the vocabulary, and every guess still gets feedback.

**Hints** (``hints``, default 0: none): after each valid guess's feedback the game adds how many
words of its list still fit all the feedback so far, and lists them (alphabetically) when there are
at most ``hints`` of them::

    3 words in my list fit: hello, jelly, belly.

The list does the deduction for the player, so with hints the game tests reading and copying, not
spelling or logic: an easy mode for models too small to play the real game (SmolLM2-135M writes
words that are not five letters after its first guess). Guessing any listed word wins almost every
game of the shipped list within six guesses.

**Demonstration** (``demonstrate``, default on): the opening is the rules (system), then one example
game for the fixed training word :data:`DEMO_WORD` (never a held-out secret) as real chat turns: the
guesses of :func:`optimal_policy` and the game's own feedback lines (three guesses, with the
game's ``max_guesses`` counting down), then a user message that says the example is over
(:data:`EXAMPLE_OVER`) and opens the real game as the game without a demonstration does. With fewer
than 3 ``max_guesses`` the opening has no demonstration. The scripted players read only what follows
that message (:func:`real_game`). There is no shaped reward: a win is 1, anything else 0.

:func:`optimal_policy` keeps the words consistent with every line of feedback so far and guesses
the one that leaves the fewest candidates in the worst case; it wins every game of the shipped list
within five guesses. :func:`random_policy` guesses words from the list at random. Both read and
write only the conversation's text, as the model does.
"""

from __future__ import annotations

import functools
import random
import re
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from rlvr.data.example import Example
from rlvr.envs.base import Environment, Message, Step, register_env
from rlvr.envs.data_params import DataParam
from rlvr.envs.game_split import split_seeds
from rlvr.envs.scripted import play_scripted
from rlvr.envs.wordle_words import WORDS

CORRECT, PRESENT, ABSENT = "correct", "present", "absent"
Marks = tuple[str, ...]

_GUESS = re.compile(r"<guess>\s*([^<]*?)\s*</guess>", re.IGNORECASE)
_FEEDBACK = re.compile(r"^([a-z]{5}):((?: [a-z]=(?:correct|present|absent)){5})\s*$", re.MULTILINE)
_MARK = re.compile(r"[a-z]=(correct|present|absent)")
_WORDS = frozenset(WORDS)
# starts the user message that ends the demonstration and opens the real game
EXAMPLE_OVER = "The example game is over."
# the demonstration's secret: a training word that the optimal player finds in three guesses
DEMO_WORD = "angel"


def rules(max_guesses: int) -> str:
    return (
        f"Find my secret five-letter English word in at most {max_guesses} guesses. Each turn, write one "
        "guess as <guess>crane</guess>. After each guess I mark every letter: correct (right letter, right "
        "place), present (the word has it in another place) or absent (the word does not have it)."
    )


def secret_word(seed: int) -> str:
    return random.Random(f"rlvr-wordle:{seed}").choice(WORDS)


def score(guess: str, secret: str) -> Marks:
    """Wordle's marks for ``guess`` against ``secret``: exact places first, then each remaining
    letter is ``present`` while the secret has unmatched copies of it left."""
    marks = [ABSENT] * len(guess)
    unmatched = Counter(s for g, s in zip(guess, secret) if g != s)
    for i, (g, s) in enumerate(zip(guess, secret)):
        if g == s:
            marks[i] = CORRECT
    for i, g in enumerate(guess):
        if marks[i] != CORRECT and unmatched[g] > 0:
            marks[i] = PRESENT
            unmatched[g] -= 1
    return tuple(marks)


def render_feedback(guess: str, marks: Marks) -> str:
    return f"{guess}: " + " ".join(f"{letter}={mark}" for letter, mark in zip(guess, marks))


def held_out_words() -> frozenset[str]:
    """The secrets of the held-out split: a fixed fifth of the list, never a training secret."""
    return frozenset(random.Random("rlvr-wordle-held-out").sample(sorted(WORDS), round(len(WORDS) / 5)))


def real_game(messages: Sequence[Message]) -> Sequence[Message]:
    """The messages of the game being played: from the user message that ends a demonstration
    (:data:`EXAMPLE_OVER`) on, or all of them when there was none."""
    starts = [i for i, m in enumerate(messages) if m["role"] == "user" and EXAMPLE_OVER in m["content"]]
    return messages[starts[-1] :] if starts else messages


def parse_feedback(messages: Sequence[Message]) -> list[tuple[str, Marks]]:
    """Every ``(guess, marks)`` line the game has written in the user messages of the real game
    (a demonstration's lines are not this game's)."""
    found = []
    for message in real_game(messages):
        if message["role"] == "user":
            for guess, marks in _FEEDBACK.findall(message["content"]):
                found.append((guess, tuple(_MARK.findall(marks))))
    return found


def candidates(history: Sequence[tuple[str, Marks]]) -> tuple[str, ...]:
    """The words of the list that would have produced every line of ``history``."""
    return _candidates(tuple(history))


@functools.lru_cache(maxsize=4096)
def _candidates(history: tuple[tuple[str, Marks], ...]) -> tuple[str, ...]:
    # each line filters what the lines before it left (cached: games that open alike share the work)
    if not history:
        return WORDS
    guess, marks = history[-1]
    return tuple(w for w in _candidates(history[:-1]) if score(guess, w) == marks)


@functools.lru_cache(maxsize=4096)
def best_guess(remaining: tuple[str, ...]) -> str:
    """The candidate whose feedback splits ``remaining`` best in the worst case (the smallest
    largest group of words left; ties to the alphabetically first). The opening guess over the whole
    list is the costly one (a second or so) and is cached."""
    if len(remaining) <= 2:
        return remaining[0]

    def worst_case(guess: str) -> int:
        return max(Counter(score(guess, w) for w in remaining).values())

    return min(remaining, key=lambda guess: (worst_case(guess), guess))


def optimal_policy(messages: list[Message]) -> str:
    """The best guess among the words consistent with all the feedback in the conversation."""
    remaining = candidates(parse_feedback(messages))
    if not remaining:
        raise ValueError("wordle: no word in the list fits the feedback in the conversation")
    return f"<guess>{best_guess(remaining)}</guess>"


def random_policy(rng: random.Random) -> Callable[[list[Message]], str]:
    """A policy that guesses a word of the list uniformly at random (``messages -> text``)."""
    return lambda messages: f"<guess>{rng.choice(WORDS)}</guess>"


@register_env("wordle")
class Wordle(Environment):
    """One secret word (see the module docstring). ``Step.info`` counts ``guesses`` (valid ones)
    and ``invalid_actions``; :meth:`outcome` has the episode's ``solved``, ``moves`` (valid
    guesses) and ``invalid_actions``."""

    stop_strings = ("</guess>",)
    expert = staticmethod(optimal_policy)  # the SFT demonstrations of sft.player: optimal
    # what a data row's env_params may set (rlvr.envs.data_params)
    data_params = {
        "max_guesses": DataParam(int, 1, 100),
        "words_only": DataParam(bool),
        "demonstrate": DataParam(bool),
        "hints": DataParam(int, 0, len(WORDS)),
    }

    def __init__(
        self, max_guesses: int = 6, words_only: bool = False, demonstrate: bool = True, hints: int = 0
    ) -> None:
        if max_guesses < 1:
            raise ValueError(f"wordle: max_guesses must be at least 1, got {max_guesses}")
        if not isinstance(words_only, bool):
            raise ValueError(f"wordle: words_only must be true or false, got {words_only!r}")
        if not isinstance(demonstrate, bool):
            raise ValueError(f"wordle: demonstrate must be true or false, got {demonstrate!r}")
        if isinstance(hints, bool) or not isinstance(hints, int) or not 0 <= hints <= len(WORDS):
            raise ValueError(f"wordle: hints must be a whole number from 0 to {len(WORDS)}, got {hints!r}")
        self.max_guesses, self.words_only, self.demonstrate = max_guesses, words_only, demonstrate
        self.hints = hints
        self.history: list[tuple[str, Marks]] = []  # (guess, marks) of every valid guess so far
        self.secret = ""
        self.guesses = self.invalid = 0
        self.solved = False
        self.tried: set[str] = set()  # the valid guesses so far (their feedback follows from the secret)

    def reset(self, example: Example, rng: random.Random) -> list[Message]:
        seed = int(example.metadata.get("seed", rng.randrange(2**31)))
        self.secret, self.guesses, self.invalid, self.solved = secret_word(seed), 0, 0, False
        self.tried, self.history = set(), []
        system = {"role": "system", "content": rules(self.max_guesses)}
        demo = demonstration(self.max_guesses, self.hints) if self.demonstrate else ()
        if not demo:
            return [system, {"role": "user", "content": first_question(self.max_guesses)}]
        return [system, *(dict(m) for m in demo)]

    def step(self, text: str) -> Step:
        if not self.secret:
            raise RuntimeError("wordle: step() before reset()")
        found = _GUESS.findall(text)
        guess = found[-1].lower() if found else ""
        left = self.max_guesses - self.guesses - self.invalid - 1
        problem = self._problem(guess)
        if problem:
            self.invalid += 1
            info = {"invalid_actions": 1.0}
            if left <= 0:
                return Step(done=True, info=info)
            reply = f"{problem} Write one guess as <guess>crane</guess>. {_left(left)}"
            return Step([{"role": "user", "content": reply}], info=info)
        self.guesses += 1
        self.tried.add(guess)
        if guess == self.secret:
            self.solved = True
            return Step(reward=1.0, done=True, info={"guesses": 1.0})
        if left <= 0:
            return Step(done=True, info={"guesses": 1.0})
        marks = score(guess, self.secret)
        self.history.append((guess, marks))
        feedback = render_feedback(guess, marks) + self._hint()
        return Step([{"role": "user", "content": f"{feedback}\n{_left(left)}"}], info={"guesses": 1.0})

    def _hint(self) -> str:
        """The line of words still fitting the feedback (``hints``), or nothing."""
        if not self.hints:
            return ""
        fit = candidates(self.history)
        if len(fit) > self.hints:
            return f"\n{len(fit)} words in my list fit."
        if len(fit) == 1:
            return f"\n1 word in my list fits: {fit[0]}."
        return f"\n{len(fit)} words in my list fit: {', '.join(fit)}."

    def state(self) -> str | None:
        """The words tried so far, in any order: the secret is the group's own, so they fix what
        the feedback has told."""
        return ",".join(sorted(self.tried)) if self.secret else None

    def _problem(self, guess: str) -> str:
        if len(guess) != 5 or not guess.isascii() or not guess.isalpha():
            return "That is not a five-letter word." if guess else "No guess found."
        if self.words_only and guess not in _WORDS:
            return f"{guess} is not in my word list."
        return ""

    def outcome(self) -> dict[str, float]:
        return {
            "solved": float(self.solved),
            "moves": float(self.guesses),
            "invalid_actions": float(self.invalid),
        }


def first_question(max_guesses: int) -> str:
    return f"{max_guesses} guesses left. Your first guess?"


@functools.lru_cache(maxsize=16)
def demonstration(max_guesses: int, hints: int = 0) -> tuple[Message, ...]:
    """The example game's turns after the system message, for :data:`DEMO_WORD` played by the game
    itself with :func:`optimal_policy`, and the message that starts the real game; empty when
    ``max_guesses`` is too few for it (the first call computes the opening guess: a second)."""
    if max_guesses < 3:
        return ()
    game = Wordle(max_guesses, demonstrate=False, hints=hints)
    game.secret, game.guesses, game.invalid, game.solved = DEMO_WORD, 0, 0, False
    system = {"role": "system", "content": rules(max_guesses)}
    turns = play_scripted(
        game, system, {"role": "user", "content": first_question(max_guesses)}, optimal_policy
    )
    if not game.solved:
        raise AssertionError(f"wordle: the demonstration does not find {DEMO_WORD}")
    over = f"Right, it was {DEMO_WORD}. {EXAMPLE_OVER} Now I have a new word. {first_question(max_guesses)}"
    return (*turns, {"role": "user", "content": over})


def _left(n: int) -> str:
    return f"{n} guess{'es' if n != 1 else ''} left."


def wordle_examples(count: int, seed: int, split: str = "train", **config: Any) -> list[Example]:
    """``count`` games: training games from even seeds, held-out ones from odd seeds, and each
    secret is in one split only (:func:`held_out_words`)."""
    Wordle(**config)  # unknown or bad parameters fail here, before any episode
    held_out = held_out_words()
    seeds = split_seeds("wordle", count, seed, split, lambda s: secret_word(s) in held_out)
    return [
        Example(
            id=f"wordle-{game_seed}",
            prompt=[{"role": "user", "content": "Guess the word."}],
            data_source="wordle",
            verifier="environment",  # the game scores itself (rewards.builtin.environment_reward)
            metadata={"env": "wordle", "env_params": dict(config), "seed": game_seed},
        )
        for game_seed in seeds
    ]
