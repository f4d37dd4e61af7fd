"""Text games (frozenlake, guess_number, wordle): seeded games, the rules, scripted optimal and random
players through the text interface. The games through the episode loop, the collector and the
trainer: tests/test_envs_games_wiring.py."""

from __future__ import annotations

import random
import re

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


@pytest.mark.parametrize("demonstrate", [True, False])
@pytest.mark.parametrize("game", GAMES)
def test_the_optimal_policy_wins_every_game(game, demonstrate):
    # with a demonstration in the opening, the players read only the real game that follows it
    for example in examples(game, 60, 0, "eval") + examples(game, 60, 5, "train"):
        env = make_env(game, {"demonstrate": demonstrate})
        reward, outcome, turns = play(env, example, GAMES[game].optimal_policy)
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
    env = make_env("frozenlake", {"demonstrate": False})
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
    assert env.outcome() == {"solved": 1.0, "moves": len(path) + 1, "invalid_actions": 2.0, "progress": 1.0}
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
        "progress": 0.0,
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
    assert game.outcome() == {"solved": 1.0, "moves": 2.0, "invalid_actions": 3.0, "progress": 1.0}
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
    assert "<guess>" in opening[0]["content"] and "6 guesses left" in opening[-1]["content"]
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
    bads = [{"max_guesses": 0}, {"words_only": "yes"}, {"demonstrate": "yes"}, {"hints": -1}, {"hints": True}]
    for bad in bads:
        with pytest.raises(ValueError, match="wordle"):
            make_env("wordle", bad)


_HINT = re.compile(r"^(\d+) words? in my list fits?(?:: ([a-z, ]+))?\.$", re.MULTILINE)


def test_wordle_hints_list_exactly_the_words_that_fit_and_copying_one_wins():
    env = make_env("wordle", {"hints": 20, "demonstrate": False})
    listed_some = hidden_some = False
    wins = 0
    for game in examples("wordle", 60, 0):
        env.reset(game, random.Random(0))
        history, guess = [], "arise"
        while True:
            step = env.step(f"<guess>{guess}</guess>")
            if step.done:
                wins += int(step.reward == 1.0)
                break
            text = step.messages[0]["content"]
            history.append((guess, wordle.score(guess, env.secret)))
            fit = wordle.candidates(history)
            count, words = _HINT.search(text).groups()
            assert int(count) == len(fit) and env.secret in fit
            if len(fit) <= 20:
                listed_some = True
                assert tuple(words.split(", ")) == fit  # every word that fits, none that does not
            else:
                hidden_some = True
                assert words is None
            # the player copies the last listed word (or, with no list, guesses a word of the list)
            guess = fit[-1] if words else next(w for w in wordle.WORDS if w not in dict(history))
    assert listed_some and hidden_some
    assert wins >= 57  # copying a listed word wins (almost) every game
    # without hints no such line, and the expert reads through hint lines unchanged
    plain = make_env("wordle", {"demonstrate": False})
    plain.reset(examples("wordle", 1, 0)[0], random.Random(0))
    assert not _HINT.search(plain.step("<guess>zzzzz</guess>").messages[0]["content"])
    opening = env.reset(examples("wordle", 1, 0)[0], random.Random(0))
    messages = list(opening)
    for _ in range(6):
        text = wordle.optimal_policy(messages)
        step = env.step(text)
        if step.done:
            break
        messages += [{"role": "assistant", "content": text}, *step.messages]
    assert step.reward == 1.0


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


# ---- the demonstration that opens each game ----

TAG = {"frozenlake": frozen_lake._MOVE, "guess_number": guess_number._GUESS, "wordle": wordle._GUESS}


def _opening(game: str, seed: int = 2, **params) -> list[dict[str, str]]:
    return make_env(game, params).reset(Example(id="x", prompt=[], metadata={"seed": seed}), random.Random(0))


@pytest.mark.parametrize("game", GAMES)
def test_the_opening_demonstrates_one_won_game_as_chat_turns(game):
    opening = _opening(game)
    demo, start = opening[1:-1], opening[-1]
    assert opening[0]["role"] == "system" and len(demo) >= 5
    # user, assistant, user, ..., assistant: the example game, ended by the message that starts the real one
    assert [m["role"] for m in demo] == ["user", "assistant"] * (len(demo) // 2) and start["role"] == "user"
    assert GAMES[game].EXAMPLE_OVER in start["content"]
    assert not any(GAMES[game].EXAMPLE_OVER in m["content"] for m in opening[:-1])
    # the example replays as a real game: each action is valid, each reply the game's own, the last wins
    env = make_env(game, {"demonstrate": False})
    env.reset(Example(id="x", prompt=[], metadata={"seed": 2}), random.Random(0))
    if game == "frozenlake":
        env._start(frozen_lake.DEMO_BOARD)
    elif game == "guess_number":
        env._start(guess_number.demonstration_secret(env.high, env.max_guesses))
    else:
        env.secret = wordle.DEMO_WORD
    for action, reply in zip(demo[1::2], [*demo[2::2], None]):
        assert TAG[game].fullmatch(action["content"]), action
        step = env.step(action["content"])
        assert step.info.get("invalid_actions", 0.0) == 0.0
        assert step.done == (reply is None) and (reply is None or step.messages == [reply])
    assert env.solved and env.outcome()["invalid_actions"] == 0.0
    # it is the optimal player's game, two to four actions long
    assert 2 <= len(demo) // 2 <= 4
    for k in range(1, len(demo), 2):
        assert demo[k]["content"] == GAMES[game].optimal_policy([opening[0], *demo[:k]])


def test_the_demonstrations_are_short_and_start_the_real_game_in_the_usual_words():
    assert _opening("guess_number")[-1]["content"].endswith(". Your first guess?")
    assert _opening("wordle")[-1]["content"].endswith(". 6 guesses left. Your first guess?")
    plain = _opening("frozenlake", demonstrate=False)[-1]["content"]
    assert _opening("frozenlake")[-1]["content"].endswith(f":\n{plain}")
    for game in GAMES:
        extra = sum(len(m["content"]) for m in _opening(game)) - sum(
            len(m["content"]) for m in _opening(game, demonstrate=False)
        )
        assert 0 < extra < 500, game  # about 100-170 tokens of SmolLM2's tokenizer


def test_without_demonstration_the_opening_is_the_rules_and_the_first_question():
    rules = {"role": "system", "content": frozen_lake.RULES}
    board = frozen_lake.render(frozen_lake.make_board(2), (0, 0))
    assert _opening("frozenlake", demonstrate=False) == [
        rules,
        {"role": "user", "content": f"{board}\n12 moves left. Your move?"},
    ]
    assert _opening("guess_number", demonstrate=False) == [
        {"role": "system", "content": guess_number.rules(100, 7)},
        {"role": "user", "content": "Your first guess?"},
    ]
    assert _opening("wordle", demonstrate=False) == [
        {"role": "system", "content": wordle.rules(6)},
        {"role": "user", "content": "6 guesses left. Your first guess?"},
    ]
    # a budget too small for the example's game: no demonstration rather than a lost example
    one = _opening("guess_number", max_guesses=1)
    assert [m["content"] for m in one if m["role"] == "assistant"] == ["<guess>50</guess>"]  # won at once
    held_middle = next(h for h in range(2, 100) if (1 + h) // 2 in guess_number.held_out_numbers(h))
    alone = _opening("guess_number", high=held_middle, max_guesses=1)
    assert alone == _opening("guess_number", high=held_middle, max_guesses=1, demonstrate=False)
    assert _opening("wordle", max_guesses=2) == _opening("wordle", max_guesses=2, demonstrate=False)
    small = {"size": 2, "holes": 0, "max_moves": 3}
    assert _opening("frozenlake", **small) == _opening("frozenlake", **small, demonstrate=False)


def test_the_demonstrated_game_is_never_a_held_out_one():
    assert not frozen_lake.is_held_out(frozen_lake.DEMO_BOARD)
    assert len(frozen_lake.shortest_path(frozen_lake.DEMO_BOARD, (0, 0))) == 4
    assert wordle.DEMO_WORD in wordle.WORDS and wordle.DEMO_WORD not in wordle.held_out_words()
    for high in [*range(2, 300), 1000, 10**6]:
        for max_guesses in (1, 2, 3, guess_number.GuessNumber(high).max_guesses):
            secret = guess_number.demonstration_secret(high, max_guesses)
            assert secret is None or secret not in guess_number.held_out_numbers(high), (high, max_guesses)
        assert guess_number.demonstration_secret(high, 7) is not None
    assert guess_number.demonstration_secret(100, 7) == 37  # answers Lower, then Higher
    # above the limit no held-out split exists (building it would list every number), so any is fine
    assert _opening("guess_number", high=10**12)[-1]["content"].endswith("Your first guess?")
    with pytest.raises(ValueError, match="too many numbers"):
        guess_number.guess_number_examples(1, 0, high=10**7)


def test_the_scripted_players_ignore_the_demonstration():
    assert guess_number.optimal_policy(_opening("guess_number")) == "<guess>50</guess>"
    opening = _opening("wordle")
    assert wordle.parse_feedback(opening) == [] and wordle.parse_feedback(opening[:-1])
    assert wordle.optimal_policy(opening) == wordle.optimal_policy(_opening("wordle", demonstrate=False))
    board = frozen_lake.make_board(2)
    first = frozen_lake.shortest_path(board, (0, 0))[0]
    assert frozen_lake.optimal_policy(_opening("frozenlake")) == f"<move>{first}</move>"


@pytest.mark.parametrize("game", GAMES)
def test_demonstrate_and_progress_reward_are_checked(game):
    params = GAMES[game]
    env_class = type(make_env(game))
    assert env_class.data_params["demonstrate"].problem(False) is None
    assert env_class.data_params["demonstrate"].problem("no") is not None
    with pytest.raises(ValueError, match=f"{game}: demonstrate"):
        make_env(game, {"demonstrate": 1})
    if game == "wordle":
        assert "progress_reward" not in env_class.data_params
        return
    assert env_class.data_params["progress_reward"].problem(0.5) is None
    assert env_class.data_params["progress_reward"].problem(1.5) is not None
    for bad in (-0.1, 1.5, "0.5", True, float("nan")):
        with pytest.raises(ValueError, match=f"{game}: progress_reward"):
            make_env(game, {"progress_reward": bad})
    assert params.real_game([]) == []
