"""SFT on games played by the environment's expert (``sft.player: optimal``): the demonstrations open
as the RL rollout opens the same example, train only the expert's moves of the real game (never the
example game the opening shows), keep only won games, and refuse what cannot work, naming why."""

from __future__ import annotations

import random
import re

import pytest
from tiny import TINY_RUN

from rlvr import api
from rlvr.data.env_demos import expert_games
from rlvr.data.from_config import load_datasets
from rlvr.envs.base import make_env
from rlvr.envs.guess_number import secret_number
from rlvr.errors import RlvrError
from rlvr.log import read_jsonl
from rlvr.models import SMOLLM2, load_tokenizer
from rlvr.rollout.chat_ledger import ChatLedger
from rlvr.train.stages.sft import load_demonstrations
from rlvr.trajectory import GIVEN


@pytest.fixture(scope="module")
def smol():
    return load_tokenizer(SMOLLM2)


def _cfg(recipe: str, *extra: str):
    return api.load_config(f"recipes/{recipe}.yaml", ["stage=sft", "sft.player=optimal", *extra])


def _given_texts(tokenizer, trajectory) -> list[str]:
    return [tokenizer.decode(s.token_ids) for s in trajectory.segments if s.kind == GIVEN]


def test_trains_the_real_games_moves_only(smol) -> None:
    cfg = _cfg("guess_number", "data.train_size=6")
    examples = load_datasets(cfg.data).train
    demos = load_demonstrations(cfg, smol)
    assert len(demos) == 6
    for example, demo in zip(examples, demos):
        given = _given_texts(smol, demo)
        guesses = [int(re.fullmatch(r"<guess>(\d+)</guess><\|im_end\|>", g).group(1)) for g in given]
        secret = secret_number(example.metadata["seed"], cfg.data.task_config["high"])
        assert guesses[-1] == secret  # the game the example is, won by the last trained guess
        assert guesses[0] == (1 + cfg.data.task_config["high"]) // 2  # the real game's first guess
        # the example game the opening shows is in the prompt, none of its guesses trained
        prompt = smol.decode(demo.prompt_ids)
        assert "The example game is over." in prompt and prompt.count("<guess>") >= 2
        assert len(given) == len(re.findall(r"<guess>", smol.decode(demo.response_ids)))


@pytest.mark.parametrize("recipe", ["frozenlake", "wordle", "guess_number"])
def test_opens_as_the_rollout_opens(smol, recipe: str) -> None:
    cfg = _cfg(recipe, "data.train_size=3")
    examples = load_datasets(cfg.data).train
    demos = load_demonstrations(cfg, smol)
    for index, (example, demo) in enumerate(zip(examples, demos)):
        env = make_env(recipe, example.metadata["env_params"])
        opening = env.reset(example, random.Random(example.metadata.get("seed", index)))
        assert demo.prompt_ids == ChatLedger(smol, opening).prompt_ids


def test_lost_games_are_left_out_and_none_won_is_an_error() -> None:
    cfg = _cfg("guess_number", "data.train_size=40", "env.max_turns=3")
    examples = load_datasets(cfg.data).train
    games = expert_games(cfg, examples, "training")
    assert games.played == 40 and 0 < games.lost < 40
    assert len(games.examples) == 40 - games.lost
    for game in games.examples:  # every kept game ends with the expert's winning guess
        secret = secret_number(examples[game.index].metadata["seed"], cfg.data.task_config["high"])
        assert game.messages[-1] == {"role": "assistant", "content": f"<guess>{secret}</guess>"}
    with pytest.raises(RlvrError, match=r"won none of the 40 training games within env.max_turns=1"):
        expert_games(_cfg("guess_number", "data.train_size=40", "env.max_turns=1"), examples, "training")


def test_refused_without_an_expert_or_beside_chat_data(smol) -> None:
    with pytest.raises(RlvrError, match="environment 'calculator' has no scripted expert"):
        load_demonstrations(_cfg("calculator_tool", "data.train_size=2"), smol)
    with pytest.raises(RlvrError, match="leave sft.path and sft.eval_path out"):
        load_demonstrations(_cfg("guess_number", "sft.path=chats.jsonl"), smol)


def test_an_sft_run_trains_on_expert_games(tmp_path) -> None:
    cfg = api.load_config(
        "recipes/guess_number.yaml",
        [
            *TINY_RUN,
            "stage=sft",
            "sft.player=optimal",
            "sft.batch_size=2",
            "train.steps=2",
            "eval.before=false",
            "data.eval_size=2",
            "env.max_turns=7",
            f"output_dir={tmp_path}",
            "name=g",
        ],
    )
    api.train(cfg, quiet=True)
    rows = read_jsonl(tmp_path / "g" / "metrics.jsonl")
    steps = [r for r in rows if "sft/loss" in r or "loss" in r]
    assert len(steps) >= 2
    evals = [r for r in rows if "sft/eval_loss" in r]
    assert evals, "held-out games give sft/eval_loss"
    samples = read_jsonl(tmp_path / "g" / "samples.jsonl")
    assert samples and all("<guess>" in s["completion"] for s in samples)


def test_search_oracle_demonstrations_search_read_and_answer_the_gold_span(smol) -> None:
    """The search environment's expert knows its episode's answer: its demonstrations search with
    the question's words, read the gold document (context, never trained) and answer with the span
    that document holds; every one-hop training question of the recipe's corpus is won in one
    search, and the opening is the RL episode's."""
    cfg = _cfg("search_agent_sft_rl", "data.train_size=40")
    examples = load_datasets(cfg.data).train
    games = expert_games(cfg, examples, "training")
    assert games.played == 40 and games.lost == 0
    demos = load_demonstrations(cfg, smol)
    for game, demo in zip(games.examples, demos, strict=True):
        example = examples[game.index]
        turns = game.messages[game.first_trained :]
        assert [m["role"] for m in turns] == ["assistant", "tool", "assistant"]
        question = example.question.removeprefix("Question: ").rstrip("?")
        assert turns[0]["content"] == f"<search>{question}</search>"
        assert example.reference in turns[1]["content"]  # the gold document came back with the span
        assert turns[2]["content"] == f"<answer>{example.reference}</answer>"
        given = _given_texts(smol, demo)  # only the expert's two turns are trained
        assert given == [f"{turns[0]['content']}<|im_end|>", f"{turns[2]['content']}<|im_end|>"]
        env = make_env("search", cfg.env.params)
        opening = env.reset(example, random.Random(example.metadata.get("seed", game.index)))
        assert demo.prompt_ids == ChatLedger(smol, opening).prompt_ids


def test_search_oracle_follows_the_bridge_on_two_hop_questions() -> None:
    """A two-hop question: the first search finds the company's document, the second searches the
    founder it names, and only then does the expert answer (a search with no gold document found is
    followed by a search for it, never by an answer)."""
    cfg = _cfg("search_agent_sft_rl", "data.train_size=10", "data.eval_size=10", "data.task_config.hops=[2]")
    examples = load_datasets(cfg.data).train
    games = expert_games(cfg, examples, "training")
    assert games.lost == 0
    for game in games.examples:
        example = examples[game.index]
        turns = [m["content"] for m in game.messages[game.first_trained :] if m["role"] == "assistant"]
        assert len(turns) == 3 and turns[0].startswith("<search>") and turns[1].startswith("<search>")
        bridge = turns[1].removeprefix("<search>").removesuffix("</search>")
        assert bridge in game.messages[game.first_trained + 1]["content"]  # named by the first hop
        assert turns[2] == f"<answer>{example.reference}</answer>"
    env = make_env("search", {})
    env.reset(examples[0], random.Random(0))
    env.step("<search>zzzz qqqq</search>")  # found nothing: the expert searches for the gold document
    assert env.expert_turn([]).startswith("<search>")
