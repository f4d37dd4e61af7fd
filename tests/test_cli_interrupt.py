"""Ctrl-C in ``rlvr eval``, ``rlvr reward`` and a training run's start-up: exit 130, one line, no
traceback from the CLI or its reward worker processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

TESTS = str(Path(__file__).parent)
SLOW_REWARD = "rewards.functions=[{name: 'reward_fixtures:sleep_then_len', params: {seconds: 2}}]"


def interrupt_after(marker: str, args: list[str], cwd: Path) -> tuple[int, str, str]:
    """Run ``rlvr ARGS`` in its own process group (a terminal's foreground job), send the group
    SIGINT (what Ctrl-C does) once ``marker`` is on stderr; return (exit code, stderr before the
    interrupt, stderr after it)."""
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "PYTHONPATH": os.pathsep.join(filter(None, [TESTS, os.environ.get("PYTHONPATH")])),
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "rlvr.cli", *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        cwd=cwd,
        env=env,
        start_new_session=True,
        # a shell's background job starts with SIGINT ignored, and Python keeps it so: give the run
        # Ctrl-C's default, as a terminal would
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(proc.stderr.readline, "")), daemon=True)
    reader.start()
    deadline = time.monotonic() + 240
    while not any(marker in line for line in lines):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"never printed {marker!r} (exit {proc.poll()}): {''.join(lines)[-3000:]}")
        time.sleep(0.1)
    seen = len(lines)
    os.killpg(proc.pid, signal.SIGINT)
    try:
        code = proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    reader.join(timeout=30)
    return code, "".join(lines[:seen]), "".join(lines[seen:])


def _one_line(after: str) -> list[str]:
    assert "Traceback" not in after and "KeyboardInterrupt" not in after, after
    return [line for line in after.splitlines() if line.strip()]


# slow: the default run keeps test_cli's Ctrl-C during training (exit 130)
@pytest.mark.slow
def test_ctrl_c_in_eval(tmp_path) -> None:
    args = ["eval", "--model", "tiny-random", "--task", "chain_sum", "data.eval_size=40"]
    code, _, after = interrupt_after("evaluating", [*args, "rewards.workers=1", SLOW_REWARD], tmp_path)
    assert code == 130, after
    assert _one_line(after) == ["interrupted"]


def test_ctrl_c_in_reward(tmp_path) -> None:
    rows = tmp_path / "rows.jsonl"
    rows.write_text(
        "".join(f'{{"question": "q{i}", "answer": "1", "completion": "c{i}"}}\n' for i in range(30))
    )
    args = ["reward", "--config", "grpo", "--completions", str(rows), "rewards.workers=1", SLOW_REWARD]
    code, _, after = interrupt_after("scoring 30 completions", args, tmp_path)
    assert code == 130, after
    assert _one_line(after) == ["interrupted"]


@pytest.mark.parametrize(  # the header's first and last lines
    "marker", ["rlvr train", pytest.param("eval     greedy", marks=pytest.mark.slow)]
)
def test_ctrl_c_at_training_start_up_keeps_nothing(tmp_path, marker) -> None:
    args = ["train", "model.name=tiny-random", "data.train_size=16", "rewards.workers=1", SLOW_REWARD]
    code, _, after = interrupt_after(marker, [*args, f"output_dir={tmp_path / 'runs'}", "name=r"], tmp_path)
    assert code == 130, after
    lines = _one_line(after)
    assert lines in (
        ["interrupted"],
        ["interrupted before the first training step; nothing of the run was kept"],
    )
    assert not (tmp_path / "runs").exists()
