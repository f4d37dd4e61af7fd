"""``rlvr train --resume``: the run's saved config, safe overrides applied and listed, unsafe ones
refused by name, a finished run left alone, a run without a checkpoint started over."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from tiny import TINY_RUN

from rlvr import api
from rlvr.log import read_jsonl

TESTS = str(Path(__file__).parent)  # the runs' reward lives in tests/reward_fixtures.py


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


def flat(text: str) -> str:
    return " ".join(text.split())  # the console wraps long lines


def train_steps(run: Path) -> list[int]:
    return [r["step"] for r in read_jsonl(run / "metrics.jsonl") if r["phase"] == "train"]


@pytest.fixture
def finished_run(tmp_path) -> Path:
    """A two-step run that ended normally (a full checkpoint at step 2, final evaluation written)."""
    full = "train.final_checkpoint=full"  # resumable at its end: more steps continue it
    cfg = api.load_config(None, [*TINY_RUN, f"output_dir={tmp_path}", "name=r", "train.steps=2", full])
    api.train(cfg, quiet=True)
    return tmp_path / "r"


def test_resume_refuses_unsafe_changes_naming_each_key(finished_run, tmp_path) -> None:
    config = (finished_run / "config.yaml").read_text()
    metrics = (finished_run / "metrics.jsonl").read_text()
    args = ["name=r", f"output_dir={tmp_path}", "optim.lr=0.5", "rollout.group_size=2", "train.steps=5"]
    result = rlvr("train", *args, "--resume", cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    message = flat(result.stderr)
    assert "cannot change mid-run: rollout.group_size 4 → 2, optim.lr 1.0e-05 → 0.5." in message
    assert "train.steps" not in message.split("Keys that may change")[0]  # a safe key is not blamed
    assert "Traceback" not in result.stderr
    # nothing touched: the saved config and the logs are as they were
    assert (finished_run / "config.yaml").read_text() == config
    assert (finished_run / "metrics.jsonl").read_text() == metrics


# slow: the default run keeps test_checkpoint_policy's resume of a finished run and
# test_train_e2e's exact resumes
@pytest.mark.slow
def test_resume_of_a_finished_run_does_nothing_and_more_steps_continue_it(finished_run, tmp_path) -> None:
    checkpoints = sorted(p.name for p in (finished_run / "checkpoints").iterdir())
    metrics = (finished_run / "metrics.jsonl").read_text()
    # the run's saved config is used: the default job's settings given here change nothing
    done = rlvr("train", "name=r", f"output_dir={tmp_path}", "--resume", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert f"--resume: {finished_run} finished at step 2 (train.steps=2); nothing to do" in flat(done.stderr)
    assert (finished_run / "metrics.jsonl").read_text() == metrics
    assert sorted(p.name for p in (finished_run / "checkpoints").iterdir()) == checkpoints

    args = ["name=r", f"output_dir={tmp_path}", "train.steps=3", "eval.before=false"]
    more = rlvr("train", *args, "--resume", "--quiet", cwd=tmp_path)
    assert more.returncode == 0, more.stderr
    message = flat(more.stderr)
    assert "--resume: applied eval.before true → false, train.steps 2 → 3" in message
    resumed = f"resumedfrom{finished_run / 'checkpoints' / 'step-000002'}atstep2"
    assert resumed in "".join(more.stderr.split())
    assert train_steps(finished_run) == [1, 2, 3]
    assert "steps: 3" in (finished_run / "config.yaml").read_text()  # the run's config says so now
    assert api.load_config(finished_run / "config.yaml").rollout.group_size == 4  # the rest as saved


def test_resume_without_a_checkpoint_says_it_starts_fresh(tmp_path) -> None:
    cfg = api.load_config(
        None,
        [*TINY_RUN, f"output_dir={tmp_path}", "name=bare", "train.steps=1", "train.final_checkpoint=none"],
    )
    api.train(cfg, quiet=True)
    run = tmp_path / "bare"
    assert not (run / "checkpoints").exists() and train_steps(run) == [1]
    result = rlvr(
        "train", "name=bare", f"output_dir={tmp_path}", "train.steps=2", "--resume", "--quiet", cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    assert f"--resume: {run} has no checkpoint: starting fresh from step 0" in flat(result.stderr)
    rows = read_jsonl(run / "metrics.jsonl")
    assert [(r["phase"], r["step"]) for r in rows] == [
        ("before", 0),
        ("train", 1),
        ("train", 2),
        ("after", 2),
    ]


def test_resume_of_a_run_that_does_not_exist_is_an_error(tmp_path) -> None:
    result = rlvr("train", "name=never", f"output_dir={tmp_path}", "--resume", cwd=tmp_path)
    assert result.returncode == 2
    assert "holds no run to resume" in flat(result.stderr) and "Traceback" not in result.stderr
    assert not (tmp_path / "never").exists()
