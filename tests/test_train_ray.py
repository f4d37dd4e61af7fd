"""Trainer ranks as Ray actors (``cluster.ray=true``) on a local Ray cluster: the run trains like the
torchrun one, and a rank whose actor dies ends the run with an error naming it, within a timeout."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest
from tiny import TINY_RUN
from train_process import finish, start_train

pytest.importorskip("ray", reason="the ray extra is not installed (pip install 'rlvr[ray]')")

pytestmark = [pytest.mark.distributed, pytest.mark.slow]  # a Ray cluster takes 10-60 s to start


def _start(tmp_path: Path, *overrides: str) -> tuple[subprocess.Popen, list[str]]:
    return start_train(tmp_path, *TINY_RUN, f"output_dir={tmp_path}", *overrides)


def test_ranks_as_ray_actors_train_and_rank_zero_writes(tmp_path):
    from rlvr.log import read_jsonl

    proc, lines = _start(tmp_path, "name=ray", "cluster.ray=true", "cluster.ranks=2", "train.steps=2")
    assert finish(proc, lines, 300) == 0, "".join(lines)[-4000:]
    out = "".join(lines)
    assert "rank 0: Ray actor pid" in out and "rank 1: Ray actor pid" in out
    rows = read_jsonl(tmp_path / "ray" / "metrics.jsonl")
    assert [r["step"] for r in rows if r["phase"] == "train"] == [1, 2]
    assert (tmp_path / "ray" / "checkpoints" / "step-000002" / "model" / "config.json").is_file()


def test_a_dead_rank_ends_the_run_with_an_error_naming_it(tmp_path):
    """Rank 1's actor is killed (SIGKILL) after the first step: the driver reports it and exits 2
    within 120 s, though rank 0 waits in a collective with it."""
    proc, lines = _start(
        tmp_path, "name=dies", "cluster.ray=true", "cluster.ranks=2", "train.steps=1000", "data.eval_size=0"
    )
    metrics = tmp_path / "dies" / "metrics.jsonl"
    deadline = time.monotonic() + 300
    while not (metrics.exists() and metrics.read_text().strip()):
        assert proc.poll() is None, "".join(lines)[-4000:]
        assert time.monotonic() < deadline, "no training step within 300 s:\n" + "".join(lines)[-4000:]
        time.sleep(0.5)
    pid = int(re.search(r"rank 1: Ray actor pid (\d+)", "".join(lines)).group(1))
    os.kill(pid, signal.SIGKILL)
    killed = time.monotonic()
    code = finish(proc, lines, 120)
    out = "".join(lines)
    assert code == 2, out[-4000:]
    assert "Ray: trainer rank 1 of 2 failed during train: its Ray actor died" in out, out[-4000:]
    print(f"the run ended {time.monotonic() - killed:.1f} s after the kill")
    assert time.monotonic() - killed < 120
