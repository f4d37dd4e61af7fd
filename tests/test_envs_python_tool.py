"""The Python tool: code runs in the code reward's sandbox, output and failures come back as the
tool's message, counted; an episode through the multi-turn loop."""

from __future__ import annotations

import os
import random
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest
from test_hostile_sandbox import _use, processes_with, sleeper
from test_rollout_episodes import ScriptedEngine, _example

from rlvr.envs import make_env, python_tool
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


def test_a_weak_sandbox_is_announced_again_by_every_run(monkeypatch, caplog):
    """Environments are built per episode: the warning comes with the first, then again at least
    once a minute while more are built (so each run that uses the weak sandbox shows it)."""
    monkeypatch.setattr(sandbox, "_backend", lambda: type("B", (), {"name": "rlimits"})())
    monkeypatch.setattr(python_tool, "_last_unsafe_warning", [], raising=False)
    with caplog.at_level("WARNING", logger="rlvr.envs.python_tool"):
        PythonTool(allow_unsafe_sandbox=True)  # a run's first episode
        PythonTool(allow_unsafe_sandbox=True)  # its next one, within the minute: not repeated
        python_tool._last_unsafe_warning[0] -= python_tool.UNSAFE_WARNING_EVERY_S  # the next run
        PythonTool(allow_unsafe_sandbox=True)
    warnings = [r.getMessage() for r in caplog.records if "allow_unsafe_sandbox" in r.getMessage()]
    assert len(warnings) == 2
    for exposed in ("READ", "WRITE to the host's /tmp", "symlinks", "NETWORK", "loopback"):
        assert exposed in warnings[0]


@needs_bwrap
def test_a_slow_sandbox_start_does_not_turn_a_timeout_into_a_kill(monkeypatch):
    """On a loaded machine the sandbox may take seconds to come up. That time once counted against
    the run's own limit, so a program that merely overran its timeout was reported "killed"."""
    command = sandbox._command
    monkeypatch.setattr(
        sandbox, "_command", lambda *args: ["sh", "-c", 'sleep 2.2; exec "$@"', "sh", *command(*args)]
    )
    env = PythonTool(demonstrate=False)
    env.limits = sandbox.Limits(case_s=0.2, total_s=0.3)
    step = env.step("<python>import time; time.sleep(30)</python>")
    assert "error (timeout)" in step.messages[0]["content"]


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


class Uncapped(PythonTool):
    """As if the tool ignored the time the rollout gives its step."""

    def limit_step(self, seconds: float) -> None:
        pass


def _episode(tool, turns: list[str], limits: EpisodeLimits, stats: EpisodeStats | None = None):
    """One episode of ``tool`` (``timeout_s: 30``); returns it, its wall time and the tokenizer.
    The thread pool is not waited for: what a step left running must be gone by itself."""
    tok = load_tokenizer("tiny-random")
    threads = ThreadPoolExecutor(2)
    try:
        start = time.monotonic()
        (episode,) = run_episodes(
            ScriptedEngine(tok, turns),
            tok,
            [(0, _example(0))],
            lambda e: tool(timeout_s=30.0, demonstrate=False, allow_unsafe_sandbox=True),
            SamplingParams(n=1, max_new_tokens=64),
            limits,
            threads,
            stats,
        )[0]
        return episode, time.monotonic() - start, tok
    finally:
        threads.shutdown(wait=False)


@pytest.mark.parametrize("name", ["bwrap", "unshare", "rlimits"])
def test_a_tool_call_is_killed_when_its_step_times_out(name, monkeypatch):
    _use(name, monkeypatch)
    token = f"rlvr-tool-{uuid.uuid4().hex}"
    try:
        episode, took, _ = _episode(
            Uncapped, [f"<python>{sleeper(token)}</python>"], EpisodeLimits(step_timeout_s=1.0)
        )
        assert episode.errors == {"env": "environment step timed out after 1s"} and took < 4.0
        assert processes_with(token) == []  # the program was killed, not left running
    finally:
        for pid in processes_with(token, settle_s=0):
            os.kill(pid, 9)


@needs_bwrap
def test_the_episode_time_limit_also_ends_a_slow_tool_call():
    token = f"rlvr-tool-{uuid.uuid4().hex}"
    stats = EpisodeStats()
    try:
        limits = EpisodeLimits(step_timeout_s=30.0, episode_timeout_s=1.5)
        episode, took, _ = _episode(Uncapped, [f"<python>{sleeper(token)}</python>"], limits, stats)
        assert took < 4.5 and not episode.errors
        assert episode.finish_reason == "length" and stats.counters["episode_timeouts"] == 1.0
        assert processes_with(token) == []
    finally:
        for pid in processes_with(token, settle_s=0):
            os.kill(pid, 9)


@needs_bwrap
def test_a_tool_timeout_longer_than_the_step_is_capped_by_it():
    """``timeout_s: 30`` (from the config, say) with a 2 s step: the call ends by itself as a
    timeout the model reads, and the episode goes on."""
    turns = ["<python>import time; time.sleep(30)</python>", "<answer>done</answer>"]
    episode, took, tok = _episode(PythonTool, turns, EpisodeLimits(max_turns=3, step_timeout_s=2.0))
    assert not episode.errors and episode.finish_reason == "stop" and took < 6.0
    assert "error (timeout)" in tok.decode(episode.segments[1].token_ids)
