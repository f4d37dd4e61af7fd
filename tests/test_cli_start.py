"""A run that fails or is interrupted before its first step leaves no run directory behind."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = str(Path(__file__).parent)


def rlvr(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "PYTHONPATH": os.pathsep.join(filter(None, [TESTS, os.environ.get("PYTHONPATH")])),
    }
    return subprocess.run(
        [sys.executable, "-m", "rlvr.cli", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=300,
    )


@pytest.mark.parametrize(
    ("case", "needle"),
    [  # one removal path for all: the other failure points are kept out of the default run (time)
        pytest.param("model", "not available offline", marks=pytest.mark.slow),  # the model does not load
        pytest.param("data", "d.jsonl line 5: not valid JSON", marks=pytest.mark.slow),  # a malformed row
        ("reward", "rewards.functions[1] (numeric_closeness)"),  # a reward that cannot score this data
    ],
)
def test_failure_at_start_up_leaves_no_run_directory(tmp_path, case, needle) -> None:
    data = tmp_path / "d.jsonl"
    rows = '{"question": "Capital of France?", "answer": "Paris"}\n' * 4
    data.write_text(rows + ('{"question": "2+2", "answer": \n' if case == "data" else ""))
    args = {
        "model": ["model.name=no/such-model", "data.train_size=4", "data.eval_size=1"],
        "data": ["model.name=tiny-random", f"data.path={data}", "data.eval_size=1"],
        "reward": [
            "model.name=tiny-random",
            f"data.path={data}",
            "data.eval_size=1",
            "rewards.functions=[{name: exact_match}, {name: numeric_closeness}]",
        ],
    }[case]
    runs = tmp_path / "out" / "runs"
    result = rlvr("train", *args, f"output_dir={runs}", "name=x", cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert needle in " ".join(result.stderr.split()) and "Traceback" not in result.stderr
    assert not (tmp_path / "out").exists()  # the run directory and the parents it made are gone


def test_failure_in_an_existing_directory_removes_only_what_it_added(tmp_path) -> None:
    run = tmp_path / "x"
    run.mkdir()
    (run / "notes.txt").write_text("mine")
    result = rlvr("train", "model.name=no/such-model", f"output_dir={tmp_path}", "name=x", cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert sorted(p.name for p in run.iterdir()) == ["notes.txt"]  # config.yaml written at start is gone
