"""Text games: seeded boards, scripted optimal and random policies through the text interface, and
a game episode through the multi-turn loop and the trainer."""

from __future__ import annotations

import json
import random
from concurrent.futures import ThreadPoolExecutor

import pytest
from env_fixtures import TwoTurns  # noqa: F401  (registers the fixture environments)
from test_rollout_episodes import ScriptedEngine
from tiny import TINY_RUN

from rlvr import api
from rlvr.config import load_config
from rlvr.data.from_config import build_datasets
from rlvr.envs import frozen_lake, guess_number, make_env
from rlvr.errors import RlvrError
from rlvr.log import read_jsonl
from rlvr.models import load_tokenizer
from rlvr.rollout import SamplingParams
from rlvr.rollout.episodes import EpisodeLimits, EpisodeStats, run_episodes


def play(env, example, policy, max_turns: int = 50) -> tuple[float, dict, int]:
    """Play an episode through the text interface: the policy sees the conversation, writes a turn."""
    messages = env.reset(example, random.Random(0))
    total = 0.0
    for turn in range(1, max_turns + 1):
        text = policy(messages)
        step = env.step(text)
        total += step.reward
        if step.done:
            return total, env.outcome(), turn
        messages = [*messages, {"role": "assistant", "content": text}, *step.messages]
    raise AssertionError("the game never ended")


GAMES = {
    "frozenlake": (frozen_lake.frozenlake_examples, frozen_lake.optimal_policy, frozen_lake.random_policy),
    "guess_number": (
        guess_number.guess_number_examples,
        guess_number.optimal_policy,
        guess_number.random_policy,
    ),
}


@pytest.mark.parametrize("game", GAMES)
def test_the_optimal_policy_solves_every_game_and_random_play_rarely_does(game):
    examples_of, optimal, random_policy = GAMES[game]
    examples = examples_of(100, 0, "eval")
    solved = [play(make_env(game), e, optimal)[1]["solved"] for e in examples]
    assert solved == [1.0] * 100
    rng = random.Random(0)
    lucky = sum(play(make_env(game), e, random_policy(rng))[0] for e in examples_of(300, 1))
    # measured: 2/300 on frozenlake 4x4 with 3 holes, 25/300 on guess_number 1..100 with 7 guesses
    assert lucky / 300 < 0.12


def test_boards_are_seeded_and_solvable():
    boards = [frozen_lake.make_board(seed) for seed in range(200)]
    assert boards[:5] == [frozen_lake.make_board(seed) for seed in range(5)]  # same seed, same board
    assert len(set(boards)) > 150  # different seeds, different boards
    assert all(frozen_lake.shortest_path(b, (0, 0)) is not None for b in boards)
    assert all(sum(row.count("H") for row in b) == 3 for b in boards)
    big = frozen_lake.make_board(7, size=6, holes=10)
    assert len(big) == 6 and sum(row.count("H") for row in big) == 10
    assert guess_number.secret_number(3, 100) == guess_number.secret_number(3, 100)
    assert len({guess_number.secret_number(s, 100) for s in range(100)}) > 50
    train, held_out = (frozen_lake.frozenlake_examples(50, 0, split) for split in ("train", "eval"))
    assert not {e.metadata["seed"] for e in train} & {e.metadata["seed"] for e in held_out}


def test_the_game_rules_the_policies_rely_on():
    example = frozen_lake.frozenlake_examples(1, 0)[0]
    env = make_env("frozenlake")
    opening = env.reset(example, random.Random(0))
    assert "P" in opening[-1]["content"] and "<move>" in opening[0]["content"]
    board = env.board
    # walking off the board keeps the player in place; a turn without a move is counted
    assert env.step("<move>up</move>").messages[0]["content"].splitlines()[0].startswith("P")
    invalid = env.step("I will go north")
    assert invalid.info == {"invalid_actions": 1.0} and not invalid.done
    path = frozen_lake.shortest_path(board, (0, 0))
    steps = [env.step(f"<move> {m.upper()} </move>") for m in path]  # case and spaces tolerated
    assert (
        steps[-1].done
        and steps[-1].reward == 1.0
        and env.outcome() == {"solved": 1.0, "moves": len(path) + 1}
    )
    # a hole ends the game unsolved
    hole = next((r, c) for r, row in enumerate(board) for c, x in enumerate(row) if x == "H")
    env.reset(example, random.Random(0))
    env.at = (hole[0] - 1, hole[1]) if hole[0] else (hole[0], hole[1] - 1)
    fell = env.step("<move>down</move>" if hole[0] else "<move>right</move>")
    assert fell.done and fell.reward == 0.0 and fell.info["fell"] == 1.0

    game = make_env("guess_number", {"high": 100})
    game.reset(guess_number.guess_number_examples(1, 0)[0], random.Random(0))
    secret = game.secret
    low = game.step(f"<guess>{secret - 1}</guess>") if secret > 1 else game.step("<guess>2</guess>")
    assert low.messages[0]["content"].startswith("Higher" if secret > 1 else "Lower")
    assert game.step("<guess>500</guess>").info == {"invalid_actions": 1.0}
    assert game.step(f"<guess>{secret}</guess>").reward == 1.0


def test_a_game_through_the_episode_loop():
    tok = load_tokenizer("tiny-random")
    example = frozen_lake.frozenlake_examples(1, 3)[0]
    path = frozen_lake.shortest_path(frozen_lake.make_board(example.metadata["seed"]), (0, 0))
    engine = ScriptedEngine(tok, [f"<move>{m}</move>" for m in path for _ in range(2)])  # 2 messages a turn
    stats = EpisodeStats()
    with ThreadPoolExecutor(2) as threads:
        (episode,) = run_episodes(
            engine,
            tok,
            [(0, example)],
            lambda e: make_env("frozenlake"),
            SamplingParams(n=1, max_new_tokens=8),
            EpisodeLimits(max_turns=20),
            threads,
            stats,
        )[0]
    assert episode.finish_reason == "stop" and sum(episode.turn_rewards) == 1.0
    assert stats.counters["turns"] == len(path) and episode.rewards["env/solved"] == 1.0


def test_games_train_from_yaml_and_mix_with_single_turn_examples(tmp_path):
    """data.source: env with a game's generator; a file dataset routes each row to its own
    environment or to a single-turn completion."""
    cfg = load_config(
        "recipes/frozenlake.yaml",
        [
            *TINY_RUN,
            f"output_dir={tmp_path}",
            "name=g",
            "train.steps=1",
            "data.train_size=8",
            "data.eval_size=2",
            "rewards.functions=[]",
            "train.log_samples=-1",
        ],
    )
    api.train(cfg, quiet=True)
    rows = [r for r in read_jsonl(tmp_path / "g" / "metrics.jsonl") if r["phase"] == "train"]
    assert rows and rows[0]["env/turns"] >= 8
    # a file that mixes rows played in an environment with single-turn rows
    data = tmp_path / "mixed.jsonl"
    rows = [{"question": f"q{i}", "answer": "a", "env": "fixture_two_turns"} for i in range(4)]
    rows += [{"question": f"p{i}", "answer": "a"} for i in range(4)]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    mixed = load_config(
        None,
        [
            *TINY_RUN,
            f"output_dir={tmp_path}",
            "name=mix",
            "data.source=file",
            f"data.path={data}",
            "data.eval_size=0",
            "train.steps=2",
            "rollout.prompts_per_step=4",
            "train.log_trajectories=true",
            "data.few_shot=[]",
        ],
    )
    api.train(mixed, quiet=True)
    kinds = {}
    for r in read_jsonl(tmp_path / "mix" / "trajectories.jsonl"):
        kinds.setdefault(r["example_id"], {len(r["segments"])})
        kinds[r["example_id"]].add(len(r["segments"]))
    assert {3} in kinds.values() and {1} in kinds.values()  # two turns with context; one turn
    with pytest.raises(RlvrError, match="data.task_config for 'guess_number'"):
        build_datasets(
            load_config(
                None, ["data.source=env", "data.task=guess_number", "data.task_config={high: 1}"]
            ).data
        )
