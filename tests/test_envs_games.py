"""Text games (frozenlake, guess_number, wordle): seeded games, the rules, scripted optimal and random
players through the text interface. The games through the episode loop, the collector and the
trainer: tests/test_envs_games_wiring.py."""

from __future__ import annotations

import random

import pytest

from rlvr.config import load_config
from rlvr.data.example import Example
from rlvr.data.from_config import build_datasets
from rlvr.envs import frozen_lake, guess_number, make_env, wordle
from rlvr.errors import RlvrError

GAMES = {
    "frozenlake": frozen_lake,
    "guess_number": guess_number,
    "wordle": wordle,
}


def examples(game: str, count: int, seed: int, split: str = "train", **config) -> list[Example]:
    generate = {
        "frozenlake": frozen_lake.frozenlake_examples,
        "guess_number": guess_number.guess_number_examples,
        "wordle": wordle.wordle_examples,
    }[game]
    return generate(count, seed, split, **config)


def play(env, example, policy, max_turns: int = 50) -> tuple[float, dict, int]:
    """Play an episode through the text interface: the policy sees the conversation, writes a turn.
    Returns the summed reward, the env's outcome and the number of turns."""
    messages = env.reset(example, random.Random(0))
    total = 0.0
    for turn in range(1, max_turns + 1):
        text = policy(messages)
        step = env.step(text)
        total += step.reward
        if step.done:
            return total, env.outcome(), turn
        assert step.messages and all(m["role"] == "user" for m in step.messages)
        messages = [*messages, {"role": "assistant", "content": text}, *step.messages]
    raise AssertionError("the game never ended")


@pytest.mark.parametrize("game", GAMES)
def test_the_optimal_policy_wins_every_game(game):
    for example in examples(game, 60, 0, "eval") + examples(game, 60, 5, "train"):
        reward, outcome, turns = play(make_env(game), example, GAMES[game].optimal_policy)
        assert reward == 1.0 and outcome["solved"] == 1.0 and outcome["moves"] == turns, example.id


def test_the_wordle_solver_wins_every_word_of_the_list_within_five_guesses():
    env = make_env("wordle")
    most = 0
    for word in wordle.WORDS:
        env.reset(wordle.wordle_examples(1, 0)[0], random.Random(0))
        env.secret = word  # every secret of the list, not only the ones some seed draws
        reward, _, turns = _play_set(env)
        assert reward == 1.0, word
        most = max(most, turns)
    assert most <= 5


def _play_set(env) -> tuple[float, dict, int]:
    """``play`` for an environment already reset (its secret set by hand)."""
    messages = [{"role": "system", "content": wordle.rules(env.max_guesses)}]
    for turn in range(1, env.max_guesses + 1):
        text = wordle.optimal_policy(messages)
        step = env.step(text)
        if step.done:
            return step.reward, env.outcome(), turn
        messages = [*messages, {"role": "assistant", "content": text}, *step.messages]
    raise AssertionError("the game never ended")


# measured with these seeds (random.Random(0), 200 training games each): frozenlake 3/200 (4x4, 3
# holes, 12 moves); guess_number 12/200, where 7 random guesses among 100 numbers hit with
# probability 1 - 0.99**7 = 6.8%; wordle 2/200 (6 guesses among 597 words: about 1%)
RANDOM_WINS_AT_MOST = {"frozenlake": 0.03, "guess_number": 0.10, "wordle": 0.02}


@pytest.mark.parametrize("game", GAMES)
def test_random_play_rarely_wins(game):
    rng = random.Random(0)
    policy = GAMES[game].random_policy(rng)
    wins = [play(make_env(game), e, policy)[0] for e in examples(game, 200, 1)]
    assert set(wins) <= {0.0, 1.0}
    assert sum(wins) / 200 <= RANDOM_WINS_AT_MOST[game]


def _game_of(game: str, seed: int):
    """What a seed decides: the board, the secret number, the secret word."""
    env = make_env(game)
    env.reset(Example(id="x", prompt=[], metadata={"seed": seed}), random.Random(0))
    return {
        "frozenlake": lambda: env.board,
        "guess_number": lambda: env.secret,
        "wordle": lambda: env.secret,
    }[game]()


@pytest.mark.parametrize("game", GAMES)
def test_the_seed_decides_the_game(game):
    first = [_game_of(game, seed) for seed in range(100)]
    assert first == [_game_of(game, seed) for seed in range(100)]  # same seed, same game
    assert len(set(first)) >= 40  # different seeds, different games
    train, held_out = examples(game, 200, 0, "train"), examples(game, 50, 0, "eval")
    assert examples(game, 200, 0, "train") == train
    train_seeds, held_out_seeds = {e.metadata["seed"] for e in train}, {e.metadata["seed"] for e in held_out}
    assert len(train_seeds) == 200 and not train_seeds & held_out_seeds
    # a held-out board or secret is never a training one
    assert not {_game_of(game, s) for s in train_seeds} & {_game_of(game, s) for s in held_out_seeds}
    assert {e.metadata["env"] for e in train} == {game}


def test_boards_are_solvable_within_their_moves_and_have_their_holes():
    # (6, 10, 10): detours are common but not allowed; (6, 25, 10), (8, 49, 14): so many holes that
    # random draws never leave a path, and the holes go beside a staircase path instead
    cases = [(4, 3, 12), (6, 10, 20), (6, 10, 10), (4, 9, 6), (6, 25, 10), (8, 49, 14), (2, 1, 2), (8, 0, 14)]
    for size, holes, max_moves in cases:
        for seed in range(30):
            board = frozen_lake.make_board(seed, size, holes, max_moves)
            assert len(board) == size and all(len(row) == size for row in board)
            assert board[0][0] == "S" and board[-1][-1] == "G"
            assert sum(row.count("H") for row in board) == holes
            path = frozen_lake.shortest_path(board, (0, 0))
            assert path is not None and len(path) <= max_moves, (size, holes, seed)
    # some boards need a detour (the path is longer than the staircase), so the BFS matters
    assert any(
        len(frozen_lake.shortest_path(frozen_lake.make_board(s, 6, 10, 30), (0, 0))) > 10 for s in range(50)
    )
    for bad in [{"size": 1}, {"holes": 10}, {"holes": -1}, {"max_moves": 5}]:
        with pytest.raises(ValueError, match="frozenlake"):
            make_env("frozenlake", bad)


def test_frozenlake_rules():
    env = make_env("frozenlake")
    opening = env.reset(examples("frozenlake", 1, 0)[0], random.Random(0))
    assert [m["role"] for m in opening] == ["system", "user"] and "<move>" in opening[0]["content"]
    assert opening[1]["content"].startswith("P") and "12 moves left" in opening[1]["content"]
    board = env.board
    # walking off the board keeps the player in place
    assert env.step("<move>up</move>").messages[0]["content"].splitlines()[0].startswith("P")
    invalid = env.step("I will go north")
    assert invalid.info == {"invalid_actions": 1.0} and not invalid.done
    assert "Not a move" in invalid.messages[0]["content"] and "P" in invalid.messages[0]["content"]
    assert env.step("<move>north</move>").info == {"invalid_actions": 1.0}
    path = frozen_lake.shortest_path(board, (0, 0))
    steps = [env.step(f"<move> {m.upper()} </move>") for m in path]  # case and spaces tolerated
    assert [s.done for s in steps] == [False] * (len(path) - 1) + [True]
    assert steps[-1].reward == 1.0 and sum(s.reward for s in steps) == 1.0
    assert env.outcome() == {"solved": 1.0, "moves": len(path) + 1, "invalid_actions": 2.0}
    # a hole ends the game unsolved
    hole = next((r, c) for r, row in enumerate(board) for c, x in enumerate(row) if x == "H")
    env.reset(examples("frozenlake", 1, 0)[0], random.Random(0))
    env.at = (hole[0] - 1, hole[1]) if hole[0] else (hole[0], hole[1] - 1)
    fell = env.step("<move>down</move>" if hole[0] else "<move>right</move>")
    assert fell.done and fell.reward == 0.0 and fell.info["fell"] == 1.0 and env.outcome()["solved"] == 0.0
    # the moves run out, invalid turns included
    env = make_env("frozenlake", {"max_moves": 6})
    env.reset(examples("frozenlake", 1, 0)[0], random.Random(0))
    ends = [env.step("hm" if i % 2 else "<move>up</move>").done for i in range(6)]
    assert ends == [False] * 5 + [True] and env.outcome() == {
        "solved": 0.0,
        "moves": 3.0,
        "invalid_actions": 3.0,
    }


def test_guess_number_rules():
    game = make_env("guess_number", {"high": 100})
    opening = game.reset(examples("guess_number", 1, 0)[0], random.Random(0))
    assert "from 1 to 100" in opening[0]["content"] and "7 guesses" in opening[0]["content"]
    secret = game.secret
    below = game.step(f"<guess>{secret - 1}</guess>" if secret > 1 else "<guess>2</guess>")
    assert below.messages[0]["content"].startswith("Higher" if secret > 1 else "Lower")
    assert below.messages[0]["content"].endswith("6 left.")
    for bad in ["<guess>500</guess>", "<guess>fifty</guess>", "50"]:
        step = game.step(bad)
        assert step.info == {"invalid_actions": 1.0} and "not a guess" in step.messages[0]["content"]
    won = game.step(f"<GUESS> {secret} </GUESS>")
    assert won.done and won.reward == 1.0
    assert game.outcome() == {"solved": 1.0, "moves": 2.0, "invalid_actions": 3.0}
    # the guesses run out
    game = make_env("guess_number", {"high": 100, "max_guesses": 2})
    game.reset(examples("guess_number", 1, 0, high=100, max_guesses=2)[0], random.Random(0))
    wrong = 1 if game.secret != 1 else 2
    assert not game.step(f"<guess>{wrong}</guess>").done
    last = game.step(f"<guess>{wrong}</guess>")
    assert last.done and last.reward == 0.0 and game.outcome()["solved"] == 0.0
    with pytest.raises(ValueError, match="max_guesses"):
        make_env("guess_number", {"max_guesses": 0})


def test_wordle_marks_letters_like_wordle():
    c, p, a = wordle.CORRECT, wordle.PRESENT, wordle.ABSENT
    assert wordle.score("crane", "crane") == (c,) * 5
    assert wordle.score("crane", "react") == (p, p, c, a, p)
    # a repeated letter is present only as often as the secret has it beyond its exact places
    assert wordle.score("geese", "those") == (a, a, a, c, c)
    assert wordle.score("level", "hello") == (p, c, a, a, p)
    assert wordle.score("eerie", "there") == (p, a, p, a, c)
    line = wordle.render_feedback("level", wordle.score("level", "hello"))
    assert line == "level: l=present e=correct v=absent e=absent l=present"
    assert wordle.parse_feedback([{"role": "user", "content": f"{line}\n3 guesses left."}]) == [
        ("level", (p, c, a, a, p))
    ]
    assert wordle.candidates([("level", (p, c, a, a, p))]) == ("hello", "jelly")


def test_wordle_rules():
    assert len(wordle.WORDS) == len(set(wordle.WORDS)) > 500
    assert all(len(w) == 5 and w.isalpha() and w.islower() for w in wordle.WORDS)
    env = make_env("wordle")
    opening = env.reset(examples("wordle", 1, 0)[0], random.Random(0))
    assert "<guess>" in opening[0]["content"] and "6 guesses left" in opening[1]["content"]
    secret = env.secret
    wrong = "zzzzz"
    step = env.step(f"<guess>{wrong}</guess>")
    assert (
        step.messages[0]["content"]
        == f"{wordle.render_feedback(wrong, wordle.score(wrong, secret))}\n5 guesses left."
    )
    for bad in ["<guess>cat</guess>", "<guess>cr4ne</guess>", "crane"]:
        step = env.step(bad)
        assert (
            step.info == {"invalid_actions": 1.0}
            and not step.done
            and "<guess>" in step.messages[0]["content"]
        )
    won = env.step(f"<Guess> {secret.upper()} </Guess>")
    assert won.done and won.reward == 1.0
    assert env.outcome() == {"solved": 1.0, "moves": 2.0, "invalid_actions": 3.0}
    # words_only: a guess outside the list is refused (and counted); the guesses run out
    env = make_env("wordle", {"words_only": True, "max_guesses": 2})
    env.reset(examples("wordle", 1, 0)[0], random.Random(0))
    refused = env.step("<guess>zzzzz</guess>")
    assert (
        refused.info == {"invalid_actions": 1.0} and "not in my word list" in refused.messages[0]["content"]
    )
    last = env.step(f"<guess>{next(w for w in wordle.WORDS if w != env.secret)}</guess>")
    assert (
        last.done
        and last.reward == 0.0
        and env.outcome() == {"solved": 0.0, "moves": 1.0, "invalid_actions": 1.0}
    )
    for bad in [{"max_guesses": 0}, {"words_only": "yes"}]:
        with pytest.raises(ValueError, match="wordle"):
            make_env("wordle", bad)


@pytest.mark.parametrize("game", GAMES)
def test_a_step_before_reset_is_an_error_not_a_crash_later(game):
    with pytest.raises(RuntimeError, match="before reset"):
        make_env(game).step("<move>up</move>")


@pytest.mark.parametrize(
    ("task", "config", "match"),
    [
        ("guess_number", "{high: 1}", "high must be at least 2"),
        ("frozenlake", "{holes: 20}", "holes"),
        ("frozenlake", "{colour: red}", "colour"),
        ("wordle", "{max_guesses: 0}", "max_guesses"),
        ("frozenlake", "{size: 2, holes: 0}", "too few (train|eval) games"),
    ],
)
def test_bad_task_config_names_the_task(task, config, match):
    cfg = load_config(None, ["data.source=env", f"data.task={task}", f"data.task_config={config}"])
    with pytest.raises(RlvrError, match=rf"data.task_config for '{task}'.*{match}"):
        build_datasets(cfg.data)
