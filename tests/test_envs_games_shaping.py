"""Shaped progress in frozenlake and guess_number (``progress_reward``), against hand-played episodes:
the optimum earns the most, doing nothing earns 0, a random or losing episode less than any win, a
losing episode that got closer more than one that did nothing, a hole nothing; progress cannot be
collected by going back and forth. The games' rules and demonstrations: tests/test_envs_games.py."""

from __future__ import annotations

import math
import random
from collections.abc import Callable

import pytest

from rlvr.data.example import Example
from rlvr.envs import frozen_lake, guess_number, make_env

P = 0.5
# a hand-drawn board: the shortest path (6 moves) runs down the left, then along the bottom
BOARD = (
    "S.H.",
    ".H..",
    "..H.",
    "H..G",
)


def _lake(p: float = P, max_moves: int = 12, board=BOARD):
    env = make_env("frozenlake", {"progress_reward": p, "max_moves": max_moves})
    env.reset(Example(id="x", prompt=[], metadata={"seed": 0}), random.Random(0))
    env._start(board)
    return env


def _number(p: float = P, secret: int = 37, high: int = 100, max_guesses: int | None = None):
    env = make_env("guess_number", {"progress_reward": p, "high": high, "max_guesses": max_guesses})
    env.reset(Example(id="x", prompt=[], metadata={"seed": 0}), random.Random(0))
    env._start(secret)
    return env


def _play(env, turns: list[str]) -> tuple[list[float], dict[str, float]]:
    """The turn rewards of playing ``turns`` (until the episode ends) and the outcome."""
    rewards = []
    for text in turns:
        step = env.step(text)
        rewards.append(step.reward)
        if step.done:
            return rewards, env.outcome()
    raise AssertionError("the episode did not end")


def _play_policy(env, policy: Callable, opening: list[dict[str, str]]) -> float:
    messages, total = opening, 0.0
    while True:
        text = policy(messages)
        step = env.step(text)
        total += step.reward
        if step.done:
            return total
        messages = [*messages, {"role": "assistant", "content": text}, *step.messages]


def moves(*names: str) -> list[str]:
    return [f"<move>{n}</move>" for n in names]


# ---- frozenlake ----


def test_frozenlake_shortest_walk_earns_one_plus_p_in_equal_steps():
    path = frozen_lake.shortest_path(BOARD, (0, 0))
    assert len(path) == 6
    rewards, outcome = _play(_lake(), moves(*path))
    assert rewards[:-1] == pytest.approx([P / 6] * 5) and rewards[-1] == pytest.approx(1 + P / 6)
    assert sum(rewards) == pytest.approx(1 + P) and outcome["solved"] == 1.0 and outcome["progress"] == 1.0
    # a detour still wins, and earns what the shortest walk earns: every win is worth the same
    detour = ["right", "left", *path]
    assert sum(_play(_lake(), moves(*detour))[0]) == pytest.approx(1 + P)
    # shaping off: the game's own 0 / 1
    assert _play(_lake(0.0), moves(*path))[0] == [0.0] * 5 + [1.0]


def test_frozenlake_doing_nothing_earns_nothing():
    rewards, outcome = _play(_lake(), ["I would rather not."] * 12)
    assert rewards == [0.0] * 12 and outcome == {
        "solved": 0.0,
        "moves": 0.0,
        "invalid_actions": 12.0,
        "progress": 0.0,
    }
    # walking into the edge stays put: no progress either
    assert _play(_lake(), moves(*["up", "left"] * 6))[0] == [0.0] * 12


def test_frozenlake_losing_after_progress_earns_less_than_any_win_more_than_nothing():
    # five of the six moves, then into the edge until the moves run out: one step short of G
    rewards, outcome = _play(_lake(), moves("down", "down", "right", "down", "right", *["down"] * 7))
    total = sum(rewards)
    assert outcome["solved"] == 0.0 and outcome["progress"] == pytest.approx(5 / 6)
    assert total == pytest.approx(P * 5 / 6) and 0.0 < total < P < 1 + P
    # even at the largest shaping allowed, no losing walk reaches a win's total
    near = sum(_play(_lake(1.0), moves("down", "down", "right", "down", "right", *["down"] * 7))[0])
    assert near < 1.0 + 1.0


def test_frozenlake_a_hole_pays_back_the_progress():
    # three moves of progress, then into the hole at (2, 2)
    rewards, outcome = _play(_lake(), moves("down", "down", "right", "right"))
    assert rewards[:3] == pytest.approx([P / 6] * 3) and rewards[3] == pytest.approx(-3 * P / 6)
    assert sum(rewards) == pytest.approx(0.0) and outcome["progress"] == 0.0 and outcome["solved"] == 0.0
    # one step, then into the hole at (1, 1): the step's progress is paid back, as much as doing nothing
    rewards, _ = _play(_lake(), moves("down", "right"))
    assert rewards == pytest.approx([P / 6, -P / 6])
    # shaping off: a hole is the game's 0
    assert _play(_lake(0.0), moves("down", "down", "right", "right"))[0] == [0.0] * 4


def test_frozenlake_progress_cannot_be_farmed_and_walking_away_is_not_punished_below_zero():
    # back and forth between two cells for the whole episode: what it keeps is where it stopped
    rewards, outcome = _play(_lake(), moves(*["down", "up"] * 6))
    assert sum(rewards) == pytest.approx(0.0) and outcome["progress"] == 0.0
    assert sum(_play(_lake(), moves(*["down", "up"] * 5, "down", "down"))[0]) == pytest.approx(2 * P / 6)
    # a cell farther from G than the start counts as no progress (never below 0)
    far = ("S...", ".H..", "H.H.", "...G")  # (1, 0) is a dead end: 7 from G, the start 6
    assert frozen_lake.distances_to_goal(far)[(1, 0)] == frozen_lake.distances_to_goal(far)[(0, 0)] + 1 == 7
    rewards, outcome = _play(_lake(board=far), moves("down", *["left"] * 11))
    assert rewards == [0.0] * 12 and outcome["progress"] == 0.0


def test_frozenlake_optimal_beats_random_on_every_board():
    examples = frozen_lake.frozenlake_examples(40, 0)
    rng = random.Random(0)
    for example in examples:
        best = make_env("frozenlake", {"progress_reward": P})
        won = _play_policy(best, frozen_lake.optimal_policy, best.reset(example, random.Random(0)))
        assert won == pytest.approx(1 + P)
        other = make_env("frozenlake", {"progress_reward": P})
        total = _play_policy(other, frozen_lake.random_policy(rng), other.reset(example, random.Random(0)))
        assert total < won - 1e-9 or other.solved
        assert other.solved or -1e-9 <= total < P


# ---- guess_number ----


def _phi(size: int, high: int = 100) -> float:
    return 1 - math.log2(size) / math.log2(high)


def test_guess_number_binary_search_earns_one_plus_p():
    rewards, outcome = _play(_number(secret=37), [f"<guess>{n}</guess>" for n in (50, 25, 37)])
    # 50: Lower leaves 1..49; 25: Higher leaves 26..49; 37: the secret, full progress
    assert rewards[0] == pytest.approx(P * _phi(49))
    assert rewards[1] == pytest.approx(P * (_phi(24) - _phi(49)))
    assert sum(rewards) == pytest.approx(1 + P) and outcome["progress"] == 1.0
    # a lucky first guess and a slow linear search are wins worth the same
    assert _play(_number(secret=37), ["<guess>37</guess>"])[0] == [pytest.approx(1 + P)]
    slow = _number(secret=5, max_guesses=10)
    assert sum(_play(slow, [f"<guess>{n}</guess>" for n in range(1, 11)])[0]) == pytest.approx(1 + P)
    assert _play(_number(0.0, secret=37), ["<guess>50</guess>", "<guess>37</guess>"])[0] == [0.0, 1.0]


def test_guess_number_doing_nothing_earns_nothing():
    bad = ["<guess>0</guess>", "<guess>101</guess>", "fifty", "<guess>x</guess>", "", "50", "<guess></guess>"]
    rewards, outcome = _play(_number(), bad)
    assert rewards == [0.0] * 7 and outcome == {
        "solved": 0.0,
        "moves": 0.0,
        "invalid_actions": 7.0,
        "progress": 0.0,
    }


def test_guess_number_ruled_out_guesses_earn_nothing_and_no_turn_is_negative():
    env = _number(secret=37)
    rewards, _ = _play(env, [f"<guess>{n}</guess>" for n in (50, 25, 90, 10, 50, 20, 1)])
    # 50 (Lower) and 25 (Higher) leave 26..49; the rest were ruled out already, above and below
    assert rewards[0] > 0 and rewards[1] > 0 and rewards[2:] == [0.0] * 5
    assert sum(rewards) == pytest.approx(P * _phi(24))


def test_guess_number_losing_after_progress_earns_less_than_any_win_more_than_nothing():
    # binary search for 4 guesses (50, 25, 12, 6: all Lower), then ruled-out ones: 1..5 left, unwon
    env = _number(secret=2)
    messages = [{"role": "system", "content": guess_number.rules(100, 7)}]
    rewards = []
    for _ in range(4):
        text = guess_number.optimal_policy(messages)
        step = env.step(text)
        assert not step.done
        rewards.append(step.reward)
        messages = [*messages, {"role": "assistant", "content": text}, *step.messages]
    rewards += _play(env, ["<guess>100</guess>"] * 3)[0]
    total = sum(rewards)
    assert env.outcome()["solved"] == 0.0 and rewards[-3:] == [0.0] * 3
    assert total == pytest.approx(P * _phi(5)) and 0.0 < total < P < 1.0 + P
    # narrowed to one number without guessing it: full progress, still less than a win
    env = _number(secret=3, high=3, max_guesses=1)  # 2: Higher leaves only 3
    assert _play(env, ["<guess>2</guess>"])[0] == [pytest.approx(P)] and env.outcome()["progress"] == 1.0


def test_guess_number_optimal_beats_random():
    rng = random.Random(0)
    for example in guess_number.guess_number_examples(40, 0, progress_reward=P):
        best = make_env("guess_number", {"progress_reward": P})
        won = _play_policy(best, guess_number.optimal_policy, best.reset(example, random.Random(0)))
        assert won == pytest.approx(1 + P)
        other = make_env("guess_number", {"progress_reward": P})
        total = _play_policy(other, guess_number.random_policy(rng), other.reset(example, random.Random(0)))
        assert other.solved or -1e-9 <= total <= P
