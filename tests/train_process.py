"""``rlvr train`` as a child process for tests that need one (Ray drivers, kills, exit codes)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def start_train(cwd: Path, *args: str) -> tuple[subprocess.Popen, list[str]]:
    """``python -m rlvr train args --quiet`` in its own session, run in ``cwd``; its output lines
    are collected as they come."""
    path = os.pathsep.join([str(HERE.parent / "src"), str(HERE), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "PYTHONPATH": path, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "rlvr", "train", *args, "--quiet"],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    lines: list[str] = []
    threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True).start()
    return proc, lines


def finish(proc: subprocess.Popen, lines: list[str], timeout: float) -> int:
    """The exit code; a process still running after ``timeout`` s is killed and fails the test."""
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        pytest.fail(f"rlvr train did not end within {timeout:.0f} s:\n{''.join(lines)[-4000:]}")
