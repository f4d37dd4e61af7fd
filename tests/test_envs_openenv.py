"""OpenEnv environments through ``env.name: openenv``: a small OpenEnv environment made here, played by
a scripted player through rlvr's multi-turn episode loop, in process and behind OpenEnv's own server
(its WebSocket protocol, a server on a port the OS picks)."""

from __future__ import annotations

import importlib.util
import math
import random
import socket
import threading
import time
from types import SimpleNamespace

import pytest
from test_envs_games_wiring import PolicyEngine, play_episodes

from rlvr.envs import make_env
from rlvr.envs.game_split import seeded_examples
from rlvr.envs.openenv_env import OpenEnvEnvironment, render_observation
from rlvr.errors import RlvrError
from rlvr.models import load_tokenizer

# openenv.core imports its web interface (gradio): seconds that every pytest worker would pay while
# collecting. The tests import it when they run (the environment lives in openenv_find.py).
pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("openenv") is None, reason="openenv-core not installed"
)


def counting_player(messages: list[dict[str, str]]) -> str:
    """Guesses 1, 2, 3 in turn: finds every secret within three tries."""
    return f"{sum(m['role'] == 'assistant' for m in messages) + 1}"


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer("tiny-random")


@pytest.fixture(scope="module")
def server():
    """FindIt behind OpenEnv's own server (uvicorn), on a socket bound to a free port."""
    import uvicorn
    from openenv.core.env_server import create_app
    from openenv_find import Board, FindIt, Say

    app = create_app(lambda: FindIt(), Say, Board, max_concurrent_envs=8)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(app, log_level="warning")
    serving = uvicorn.Server(config)
    thread = threading.Thread(target=serving.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not serving.started and time.monotonic() < deadline:
        time.sleep(0.05)
    assert serving.started
    yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    serving.should_exit = True
    thread.join(10)


IN_PROCESS = {"environment": "openenv_find:FindIt", "observation_field": "text"}


def _play(tok, params: dict, count: int = 3, policy=counting_player):
    examples = seeded_examples("openenv", count, 0, "eval")
    make = lambda e: make_env("openenv", params)  # noqa: E731
    return play_episodes(tok, PolicyEngine(tok, policy), examples, max_turns=5, make=make)


def _check_played(tok, groups, stats) -> None:
    lengths = set()
    for group in groups:
        for t in group:
            turns = int(t.rewards["env/turns"])
            # each observation's reward lands on the turn that caused it
            assert t.turn_rewards == [0.25] * (turns - 1) + [1.0]
            assert t.rewards["env/reward"] == pytest.approx(0.25 * (turns - 1) + 1.0)
            assert [s.kind for s in t.segments] == ["sampled", "context"] * (turns - 1) + ["sampled"]
            text = tok.decode(t.prompt_ids + t.response_ids)
            assert text.count("Find my number") == 1 and ("higher" in text) == (turns > 1)
            lengths.add(turns)
    assert stats.counters.get("env_errors", 0.0) == 0.0 and len(lengths) > 1


def test_an_in_process_openenv_environment_is_played_with_per_turn_rewards(tok) -> None:
    groups, stats = _play(tok, IN_PROCESS)
    _check_played(tok, groups, stats)


def test_an_openenv_server_is_played_through_openenvs_own_client(tok, server) -> None:
    groups, stats = _play(tok, {"base_url": server, "observation_field": "text"})
    _check_played(tok, groups, stats)
    # the same seeds give the same episodes in process and over the wire
    local, _ = _play(tok, IN_PROCESS)
    assert [[t.turn_rewards for t in g] for g in groups] == [[t.turn_rewards for t in g] for g in local]


def test_an_episode_ending_without_a_reward_or_with_a_bad_one_is_an_error(tok) -> None:
    for bad, message in (("none", "without a reward"), (math.nan, "not a finite number")):
        params = {**IN_PROCESS, "env_kwargs": {"bad_final": bad}}
        groups, stats = _play(tok, params, count=2)
        assert stats.counters["env_errors"] == 4.0
        assert all(message in t.errors["env"] for g in groups for t in g)


def test_observations_are_rendered_and_capped() -> None:
    observation = {"text": "a", "hint": "b", "done": False, "reward": 0.0, "metadata": {"k": 1}}
    assert render_observation(observation, "text", 100) == "a"
    assert render_observation(observation, None, 100) == "text: a\nhint: b"
    assert render_observation({"text": "a", "done": True}, None, 100) == "a"
    assert render_observation({"text": "y" * 50}, None, 10) == "y" * 10 + "\n[... 40 characters cut]"
    with pytest.raises(RuntimeError, match="no field 'board'"):
        render_observation(observation, "board", 100)
    env = make_env("openenv", {**IN_PROCESS, "env_kwargs": {"huge": True}, "max_observation_chars": 500})
    (first,) = env.reset(seeded_examples("openenv", 1, 0)[0], random.Random(0))
    assert len(first["content"]) < 600


def test_the_environment_is_chosen_by_the_config_never_by_a_data_row() -> None:
    assert OpenEnvEnvironment.data_params == {}
    with pytest.raises(RlvrError, match="exactly one of base_url"):
        OpenEnvEnvironment()
    with pytest.raises(RlvrError, match="exactly one of base_url"):
        OpenEnvEnvironment(base_url="http://127.0.0.1:1", environment="openenv_find:FindIt")
    with pytest.raises(RlvrError, match="not an OpenEnv Environment"):
        OpenEnvEnvironment(environment="openenv_find:Say")
    with pytest.raises(RlvrError, match="cannot import"):
        OpenEnvEnvironment(environment="openenv_find:Nope")
    # the action class is read from step()'s type hint
    from openenv_find import Say

    assert OpenEnvEnvironment(environment="openenv_find:FindIt").action_type is Say
    with pytest.raises(ValueError, match="task_config takes nothing"):
        seeded_examples("openenv", 2, 0, "train", base_url="http://evil")


def test_a_servers_malformed_answers_are_errors_with_their_reason() -> None:
    """What a server sends is untrusted: an observation that is no object, a done flag that is no
    boolean, a reward that is no finite number are errors naming what was wrong."""

    class Hostile:
        def __init__(self, **result) -> None:
            self.result = SimpleNamespace(**result)

        def step(self, action):
            return self.result

        def close(self) -> None: ...

    env = OpenEnvEnvironment(base_url="http://127.0.0.1:1")  # connects only on reset
    for result, message in (
        ({"observation": ["x"], "reward": 1.0, "done": True}, "not an object"),
        ({"observation": {}, "reward": 1.0, "done": "false"}, "not a boolean"),
        ({"observation": {}, "reward": "1", "done": True}, "not a finite number"),
    ):
        env.client = Hostile(**result)
        with pytest.raises(RuntimeError, match=message):
            env.step("1")
