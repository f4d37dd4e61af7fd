"""The text games through the multi-turn episode loop, the collector (the game's reward is the
trained-on reward) and tiny-random collection, alone and in a dataset that mixes them with
single-turn problems. The games' own rules and players: tests/test_envs_games.py."""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch
from test_rollout_episodes import ScriptedEngine
from tiny import TINY_RUN

from rlvr import api
from rlvr.collect.collector import Collector
from rlvr.config import load_config
from rlvr.data.example import Example
from rlvr.envs import frozen_lake, guess_number, make_env, wordle
from rlvr.log import read_jsonl
from rlvr.models import load_tokenizer
from rlvr.rollout import Completion, SamplingParams
from rlvr.rollout.episodes import EpisodeLimits, EpisodeStats, run_episodes
from rlvr.trajectory import read_trajectory_groups

Policy = Callable[[list[dict[str, str]]], str]
_MESSAGE = re.compile(r"<\|im_start\|>(\w+)\n(.*?)<\|im_end\|>", re.DOTALL)


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer("tiny-random")


def oracle(messages: list[dict[str, str]]) -> str:
    """The scripted optimal player of whichever game the conversation is (its rules say which); a
    single-turn problem gets the answer 42."""
    rules = messages[0]["content"]
    if "frozen lake" in rules:
        return frozen_lake.optimal_policy(messages)
    if "whole number" in rules:
        return guess_number.optimal_policy(messages)
    if "five-letter" in rules:
        return wordle.optimal_policy(messages)
    return "The answer is <answer>42</answer>"


# what a model may write after its action; only the environment's stop string keeps it out of the turn
RAMBLE = " Next I will try <move>left</move> or <guess>1</guess>."


class PolicyEngine:
    """A rollout engine whose 'model' is a scripted player: each prompt's token ids are decoded back
    into chat messages, the player writes the turn and goes on rambling (:data:`RAMBLE`), and the
    sample is cut where the first stop string completes, as a real engine cuts it (else it runs
    to EOS)."""

    def __init__(self, tok, policy: Policy) -> None:
        self.tok, self.policy = tok, policy
        self.generator, self.pad_id, self.policy_version = torch.Generator(), 2, 0
        self.stop_token_ids = [tok.eos_token_id]

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[list[Completion]]:
        out = []
        for p, prompt in enumerate(prompts):
            text = self.tok.decode(prompt, skip_special_tokens=False)
            messages = [{"role": r, "content": c} for r, c in _MESSAGE.findall(text)]
            group = []
            for _ in range(params.n):
                turn = self.policy(messages) + RAMBLE
                ends = [turn.find(s) + len(s) for s in params.stop_strings if s in turn]
                cut = bool(ends)
                turn = turn[: min(ends)] if cut else turn
                ids = self.tok(turn, add_special_tokens=False)["input_ids"]
                ids = ids if cut else [*ids, self.tok.eos_token_id]
                group.append(
                    Completion(p, prompt, ids, [-0.5] * len(ids), "stop_string" if cut else "stop", turn)
                )
            out.append(group)
        return out

    def sync_weights(self, model) -> None: ...


GAME_EXAMPLES = {
    "frozenlake": frozen_lake.frozenlake_examples,
    "guess_number": guess_number.guess_number_examples,
    "wordle": wordle.wordle_examples,
}


def play_episodes(
    tok, engine, examples, n: int = 2, max_turns: int = 12, make: Callable | None = None
) -> tuple[list, EpisodeStats]:
    """Each example's episodes (``n`` of them) through the episode loop, in the environment its
    metadata names, or the one ``make(example)`` builds."""
    stats = EpisodeStats()
    with ThreadPoolExecutor(2) as threads:
        groups = run_episodes(
            engine,
            tok,
            list(enumerate(examples)),
            make or (lambda e: make_env(e.metadata["env"], e.metadata["env_params"])),
            SamplingParams(n=n, max_new_tokens=16),
            EpisodeLimits(max_turns=max_turns, max_tokens=1024),
            threads,
            stats,
        )
    return groups, stats


@pytest.mark.parametrize("game", GAME_EXAMPLES)
def test_the_optimal_player_wins_through_the_episode_loop(tok, game):
    examples = GAME_EXAMPLES[game](3, 0, "eval")
    groups, stats = play_episodes(tok, PolicyEngine(tok, oracle), examples)
    turns = 0
    for group in groups:
        for t in group:
            moves = t.rewards["env/moves"]
            assert t.finish_reason == "stop" and t.turn_rewards == [0.0] * int(moves - 1) + [1.0]
            assert t.rewards["env/solved"] == 1.0 and t.rewards["env/invalid_actions"] == 0.0
            # the environment's replies are context between the sampled turns
            assert [s.kind for s in t.segments] == ["sampled", "context"] * int(moves - 1) + ["sampled"]
            turns += moves
    assert stats.counters["turns"] == turns and stats.episodes == 6


def test_a_scripted_frozenlake_walk_through_the_episode_loop(tok):
    # the script counts turns by the messages in the prompt: no demonstration in the opening
    example = frozen_lake.frozenlake_examples(1, 3, demonstrate=False)[0]
    path = frozen_lake.shortest_path(frozen_lake.make_board(example.metadata["seed"]), (0, 0))
    engine = ScriptedEngine(tok, [f"<move>{m}</move>" for m in path for _ in range(2)])  # 2 messages a turn
    groups, _ = play_episodes(tok, engine, [example], n=1)
    episode = groups[0][0]
    assert episode.finish_reason == "stop" and episode.turn_rewards[-1] == 1.0
    assert len(episode.turn_rewards) == len(path)


@pytest.mark.parametrize("game", GAME_EXAMPLES)
def test_invalid_turns_are_counted_until_the_turn_limit(tok, game):
    engine = ScriptedEngine(tok, ["I am not sure what to do."])
    groups, stats = play_episodes(tok, engine, GAME_EXAMPLES[game](2, 0), n=2, max_turns=3)
    assert all(t.finish_reason == "max_turns" and t.turn_rewards == [0.0] * 3 for g in groups for t in g)
    assert stats.counters["invalid_actions"] == 3 * 4 and stats.counters["turns"] == 3 * 4
    assert all(t.rewards["env/solved"] == 0.0 for g in groups for t in g)


def _collector(tok, policy: Policy, examples: list[Example], *overrides: str) -> Collector:
    cfg = load_config(
        None,
        [
            *TINY_RUN,
            "rollout.group_size=2",
            "env.max_turns=12",
            "env.max_tokens=1024",
            "rollout.max_new_tokens=16",
            *overrides,
        ],
    )
    return Collector(cfg, PolicyEngine(tok, policy), tok, examples)


def test_the_game_reward_is_the_trained_on_reward(tok):
    """With ``rewards.functions: []`` (the recipes), the game's final turn reward is the whole
    reward the learner sees; the optimal player scores 1 on every episode, a random one rarely."""
    examples = [e for make in GAME_EXAMPLES.values() for e in make(4, 0)]
    collector = _collector(tok, oracle, examples, "rewards.functions=[]", "env.name=frozenlake")
    try:
        groups = collector.sample_groups(list(range(len(examples))))
        assert collector.correctness == "env/solved"
        assert all(t.reward == 1.0 and t.rewards["env/solved"] == 1.0 for g in groups for t in g.trajectories)
        rng = random.Random(0)
        players = {
            "frozen lake": frozen_lake.random_policy(rng),
            "whole number": guess_number.random_policy(rng),
        }
        players["five-letter"] = wordle.random_policy(rng)
        collector.engine = PolicyEngine(
            tok, lambda m: next(p for k, p in players.items() if k in m[0]["content"])(m)
        )
        random_groups = collector.sample_groups(list(range(len(examples))))
        rewards = [t.reward for g in random_groups for t in g.trajectories]
        assert set(rewards) <= {0.0, 1.0} and sum(rewards) <= 2
    finally:
        collector.close()


def test_a_dataset_mixing_games_and_single_turn_problems(tok):
    """Each example is routed by its metadata.env: games play out as episodes scored by the game,
    single-turn problems are completions scored by their reward; the ``verifier`` reward routes
    the games to ``environment`` (0: their turn rewards are the score) and the others to exact_match."""
    single = [
        Example(id=f"p{i}", prompt=[{"role": "user", "content": f"What is {i} + {42 - i}?"}], reference="42")
        for i in range(3)
    ]
    games = [e for make in GAME_EXAMPLES.values() for e in make(2, 0)]
    examples = single + games
    random.Random(0).shuffle(examples)
    collector = _collector(
        tok,
        oracle,
        examples,
        "rewards.functions=[{name: verifier, params: {default: exact_match}}]",
    )
    try:
        groups = collector.sample_groups(list(range(len(examples))))
    finally:
        collector.close()
    for group in groups:
        example = examples[group.example_index]
        for t in group.trajectories:
            assert not t.errors and t.reward == 1.0, (example.id, t.errors)
            if example.metadata.get("env"):
                assert t.rewards["env/solved"] == 1.0 and t.rewards["verifier"] == 0.0 and len(t.segments) > 1
            else:
                assert t.rewards == {"verifier": 1.0} and len(t.segments) == 1


def test_tiny_random_collects_a_file_that_mixes_games_and_single_turn_rows(tmp_path):
    data = tmp_path / "mixed.jsonl"
    rows = [{"question": "play", "env": "frozenlake", "seed": s, "verifier": "environment"} for s in range(2)]
    rows += [
        {"question": "play", "answer": "", "env": "wordle", "seed": s, "verifier": "environment"}
        for s in range(2)
    ]
    rows += [{"question": f"What is {i} + 1?", "answer": str(i + 1)} for i in range(4)]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = load_config(
        None,
        [
            *TINY_RUN,
            "data.source=file",
            f"data.path={data}",
            "data.eval_size=0",
            "data.few_shot=[]",
            "env.max_turns=3",
            "rollout.prompts_per_step=8",
            "rewards.functions=[{name: verifier, params: {default: exact_match}}]",
        ],
    )
    summary = api.collect(cfg, str(tmp_path / "c.jsonl"), quiet=True)
    assert summary["groups/sampled"] == 8 and summary["reward/errors"] == 0
    kinds = {}
    for group, _ in read_trajectory_groups(tmp_path / "c.jsonl"):
        for t in group.trajectories:
            kinds.setdefault(t.example_id, set()).add(
                "game" if "env/solved" in t.rewards else "single" if len(t.segments) == 1 else "?"
            )
    assert sorted(map(sorted, kinds.values())).count(["game"]) == 4
    assert sorted(map(sorted, kinds.values())).count(["single"]) == 4


def test_a_game_recipe_trains_through_the_api_with_only_the_game_reward(tmp_path):
    """One step of recipes/wordle.yaml on tiny-random with the recipe's own rewards (none but the
    game's): the game's counters and outcome reach the step's and the held-out metrics."""
    cfg = load_config(
        "recipes/wordle.yaml",
        [
            *TINY_RUN,
            f"output_dir={tmp_path}",
            "name=g",
            "train.steps=1",
            "data.train_size=8",
            "data.eval_size=2",
            "rewards.functions=[]",
        ],
    )
    result = api.train(cfg, quiet=True)
    rows = [r for r in read_jsonl(tmp_path / "g" / "metrics.jsonl") if r["phase"] == "train"]
    # tiny-random never writes a guess: every turn is an invalid action, until the 6 guesses are used
    assert rows[0]["env/turns"] == rows[0]["env/invalid_actions"] == 2 * 4 * 6
    assert rows[0]["reward/mean"] == 0.0 and rows[0]["reward/env/solved"] == 0.0
    assert result["after"]["eval/env/solved"] == 0.0 and result["after"]["eval/turns"] == 6.0


def test_the_environment_reward_refuses_an_example_without_an_environment():
    from rlvr.rewards.builtin import environment_reward

    game = wordle.wordle_examples(1, 0)[0]
    assert game.verifier == "environment" and environment_reward("<guess>crane</guess>", game) == 0.0
    problem = Example(
        id="p", prompt=[{"role": "user", "content": "2+2?"}], reference="4", verifier="environment"
    )
    with pytest.raises(ValueError, match="'p' is scored by 'environment' but names no environment"):
        environment_reward("4", problem)
