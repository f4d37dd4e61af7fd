"""The Python tool: code runs in the code reward's sandbox, output and failures come back as the
tool's message, counted; an episode through the multi-turn loop."""

from __future__ import annotations

import random
from concurrent.futures import ThreadPoolExecutor

import pytest
from test_rollout_episodes import ScriptedEngine, _example

from rlvr.envs import make_env
from rlvr.envs.python_tool import PythonTool, parse_code
from rlvr.models import load_tokenizer
from rlvr.rewards import sandbox
from rlvr.rollout import SamplingParams
from rlvr.rollout.episodes import EpisodeLimits, EpisodeStats, run_episodes

needs_bwrap = pytest.mark.skipif(
    sandbox.backend_name() != "bwrap",
    reason="bubblewrap (bwrap) is not installed: the Python tool refuses to run code without it",
)


def test_parse_code_takes_the_last_call():
    assert parse_code("<python>print(1)</python> then <python>print(2)</python>") == "print(2)"
    assert parse_code("<answer>3</answer>") is None


@needs_bwrap
def test_code_runs_in_the_sandbox_and_failures_are_counted():
    env = make_env("python", {"timeout_s": 1.0})
    env.reset(_example(0), random.Random(0))
    ok = env.step("<python>print(sum(range(101)))</python>")
    assert ok.messages == [{"role": "tool", "content": "<output>5050</output>"}]
    assert ok.info == {"tool_calls": 1.0, "tool_errors": 0.0} and not ok.done
    crash = env.step("<python>print('partial'); 1/0</python>")
    assert crash.messages[0]["content"].startswith("<output>partial\nerror (")
    assert "ZeroDivisionError" in crash.messages[0]["content"] and crash.info["tool_errors"] == 1.0
    stuck = env.step("<python>while True: pass</python>")
    assert "error (timeout)" in stuck.messages[0]["content"] and stuck.info["tool_errors"] == 1.0
    # the sandbox has no network and no host files beyond the interpreter
    net = env.step("<python>import socket; socket.create_connection(('1.1.1.1', 53), timeout=1)</python>")
    assert net.info["tool_errors"] == 1.0
    answer = env.step("<answer>5050</answer>")
    assert answer.done and answer.info == {"tool_calls": 0.0, "tool_errors": 0.0}
    assert env.outcome() == {"used_tool": 1.0, "tool_ok": 1.0}


@needs_bwrap
def test_long_output_is_cut_and_penalty_applies():
    env = PythonTool(max_output_chars=20, tool_error_penalty=0.1)
    env.reset(_example(0), random.Random(0))
    step = env.step("<python>print('x' * 1000)</python>")
    assert step.messages[0]["content"] == "<output>" + "x" * 20 + " [...]</output>" and step.reward == 0.0
    assert env.step("<python>raise SystemExit(3)</python>").reward == -0.1


def test_without_bubblewrap_the_tool_refuses_unless_allowed(monkeypatch):
    monkeypatch.setattr(sandbox, "backend_name", lambda: "rlimits")
    monkeypatch.setattr(sandbox, "_backend", lambda: type("B", (), {"name": "rlimits"})())
    with pytest.raises(sandbox.UnsafeSandboxError, match="allow_unsafe_sandbox"):
        PythonTool()
    PythonTool(allow_unsafe_sandbox=True)


@needs_bwrap
def test_a_python_tool_episode_through_the_loop():
    tok = load_tokenizer("tiny-random")
    engine = ScriptedEngine(tok, ["<python>print(123 + 456)</python>", "<answer>579</answer>"])
    stats = EpisodeStats()
    with ThreadPoolExecutor(2) as threads:
        (episode,) = run_episodes(
            engine,
            tok,
            [(0, _example(0))],
            lambda e: PythonTool(demonstrate=False),
            SamplingParams(n=1, max_new_tokens=16),
            EpisodeLimits(max_turns=3),
            threads,
            stats,
        )[0]
    assert [s.kind for s in episode.segments] == ["sampled", "context", "sampled"]
    assert "<output>579</output>" in tok.decode(episode.segments[1].token_ids)
    assert episode.finish_reason == "stop" and episode.text == "<answer>579</answer>"
    assert stats.counters["tool_calls"] == 1.0 and stats.counters["tool_errors"] == 0.0
