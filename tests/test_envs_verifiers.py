"""verifiers environments through ``env.name: verifiers``: small verifiers (v1) tasksets and envs
written here as modules (verifiers loads them by module name), played by a scripted player through
rlvr's multi-turn episode loop, rewards scored by verifiers itself."""

from __future__ import annotations

import importlib.util
import random
import sys
import textwrap

import pytest
from test_envs_games_wiring import PolicyEngine, play_episodes

from rlvr.data.env_source import load_env_examples
from rlvr.envs import make_env
from rlvr.errors import RlvrError
from rlvr.models import load_tokenizer

# verifiers.v1 takes seconds to import, which every pytest worker would pay while collecting: the
# tests import it when they run (rlvr's adapter does)
pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("verifiers") is None, reason="verifiers not installed"
)

TASKSET = """
import re
import verifiers.v1 as vf

class FindData(vf.TaskData):
    secret: int

class FindTask(vf.Task[FindData, vf.State, vf.TaskConfig]):
    @vf.reward
    async def found(self, task: FindData, trace: vf.Trace) -> float:
        {reward_body}

class FindTaskset(vf.Taskset[FindTask, vf.TasksetConfig]):
    def load(self):
        for i in range(10):
            yield FindTask(FindData(prompt="Find my number from 1 to 3.", system_prompt="A game.",
                                    secret=1 + i % 3), self.config.task)

class FindEnvConfig(vf.EnvConfig):
    player: vf.AgentConfig = vf.AgentConfig(max_turns=5)
{second_seat}
class FindEnv(vf.Env[FindEnvConfig]):
    async def run(self, task, agents):
        async with agents.player.interaction(task) as chat:
            segment = await chat.turn()
            while not segment.terminated:
                guess = int(re.search(r"\\d+", segment.last_reply).group())
                if guess == task.data.secret:
                    break
                segment = await chat.turn("higher" if guess < task.data.secret else "lower")
        chat.trace.record_reward("speed", 1.0 / len(chat.trace.assistant_messages), weight=0.5)

__all__ = ["FindTaskset", "FindEnv"]
"""
GOOD = "return float(task.secret == int(re.search(r'\\d+', trace.last_reply).group()))"
SPEED = 'chat.trace.record_reward("speed"'
MODULES = {
    "rlvr_test_vf_find": (GOOD, "", {}),
    "rlvr_test_vf_raises": ("raise ValueError('cannot parse')", "", {}),
    "rlvr_test_vf_none": ("return None", "", {}),
    # no reward function at all: verifiers scores nothing and reads the reward as 0
    "rlvr_test_vf_unscored": (GOOD, "", {"@vf.reward": "", SPEED: '(lambda *a, **k: None)("speed"'}),
    "rlvr_test_vf_two_seats": (GOOD, "    critic: vf.AgentConfig = vf.AgentConfig(max_turns=1)\n", {}),
}


@pytest.fixture(scope="module", autouse=True)
def modules(tmp_path_factory):
    folder = tmp_path_factory.mktemp("vf_envs")
    for name, (body, seat, edits) in MODULES.items():
        text = TASKSET.replace("{reward_body}", body).replace("{second_seat}", seat)
        for old, new in edits.items():
            text = text.replace(old, new)
        (folder / f"{name}.py").write_text(textwrap.dedent(text))
    sys.path.insert(0, str(folder))
    yield
    sys.path.remove(str(folder))


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer("tiny-random")


def counting_player(messages: list[dict[str, str]]) -> str:
    """Guesses 1, 2, 3 in turn: finds every secret within three tries."""
    return f"{sum(m['role'] == 'assistant' for m in messages) + 1}"


def _play(tok, taskset: str, count: int = 3):
    examples = load_env_examples("verifiers", count, 0, "train", {"taskset": taskset})
    make = lambda e: make_env("verifiers", {"taskset": taskset})  # noqa: E731
    return (
        examples,
        *play_episodes(tok, PolicyEngine(tok, counting_player), examples, max_turns=5, make=make),
    )


def test_a_verifiers_environment_is_played_turn_by_turn_and_scored_by_verifiers(tok) -> None:
    examples, groups, stats = _play(tok, "rlvr_test_vf_find", count=4)
    assert stats.counters.get("env_errors", 0.0) == 0.0
    lengths = set()
    for example, group in zip(examples, groups, strict=True):
        for t in group:
            turns = int(t.rewards["env/turns"])
            assert turns == 1 + example.metadata["task_index"] % 3  # the secret is found on guess #secret
            # verifiers' own score: found (weight 1) + speed (weight 0.5), on the last turn
            assert t.rewards["env/reward/found"] == 1.0 and t.rewards["env/solved"] == 1.0
            assert t.rewards["env/reward/speed"] == pytest.approx(1 / turns)
            assert t.turn_rewards == [0.0] * (turns - 1) + [pytest.approx(1.0 + 0.5 / turns)]
            assert [s.kind for s in t.segments] == ["sampled", "context"] * (turns - 1) + ["sampled"]
            text = tok.decode(t.prompt_ids + t.response_ids)
            assert text.count("Find my number") == 1 and text.count("A game.") == 1
            assert ("higher" in text) == (turns > 1)
            lengths.add(turns)
    assert len(lengths) > 1


@pytest.mark.parametrize(
    ("taskset", "message"),
    [
        ("rlvr_test_vf_raises", "cannot parse"),
        ("rlvr_test_vf_none", "episode failed"),
        ("rlvr_test_vf_unscored", "no verdict"),
    ],
)
def test_a_failed_scoring_is_an_error_not_a_zero(tok, taskset: str, message: str) -> None:
    _, groups, stats = _play(tok, taskset, count=2)
    assert stats.counters["env_errors"] == 4.0
    assert all(message in t.errors["env"] for g in groups for t in g)


def test_an_environment_with_two_seats_is_refused() -> None:
    with pytest.raises(RlvrError, match="2 seats"):
        make_env("verifiers", {"taskset": "rlvr_test_vf_two_seats"})
    with pytest.raises(RlvrError, match="not found"):
        make_env("verifiers", {"taskset": "rlvr_test_vf_no_such_module"})


def test_held_out_tasks_never_train_and_a_row_only_picks_a_task(tok) -> None:
    config = {"taskset": "rlvr_test_vf_find"}
    train = {
        e.metadata["task_index"]
        for s in (0, 1)
        for e in load_env_examples("verifiers", 30, s, "train", config)
    }
    held = {
        e.metadata["task_index"]
        for s in (0, 1)
        for e in load_env_examples("verifiers", 30, s, "eval", config)
    }
    assert len(held) == 2 and not train & held and train | held == set(range(10))
    assert len(load_env_examples("verifiers", 30, 0, "eval", config)) == 2  # each held-out task once
    env = make_env("verifiers", config)
    example = load_env_examples("verifiers", 1, 0, "train", config)[0]
    for bad in ({"task_index": 10}, {"task_index": "0"}, {"taskset": "rlvr_test_vf_raises"}):
        example.metadata.update(bad)
        with pytest.raises(RuntimeError, match="task_index|from taskset"):
            env.reset(example, random.Random(0))
        example.metadata.update(task_index=0, taskset="rlvr_test_vf_find")
    with pytest.raises(RlvrError, match="taskset"):
        load_env_examples("verifiers", 2, 0, "train", {})
