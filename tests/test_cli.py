"""The CLI: bad input gives one clear message and exit code 2, never a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

RLVR = [sys.executable, "-m", "rlvr.cli"]


def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    return subprocess.run([*RLVR, *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=300)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["config", "show", "algo.klcoef=1"], "algo.klcoef: unknown key"),
        (["config", "show", "missing.yaml"], "missing.yaml does not exist"),
        (
            ["train", "model.name=no/such-model", "data.train_size=4", "data.eval_size=1"],
            "not available offline",
        ),
        (["train", "data.task=chain_sums"], "Did you mean: chain_sum"),
        (["train", "data.source=file", "data.path=/nonexistent/x.jsonl"], "/nonexistent/x.jsonl"),
        (
            ["eval", "--model", "/tmp/definitely-not-a-model-dir-rlvr", "--task", "chain_sum"],
            "not available offline",
        ),
    ],
)
def test_bad_input_exits_2_with_message(tmp_path, args, needle) -> None:
    result = run(*args, f"output_dir={tmp_path}" if args[0] == "train" else "name=x", cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert needle in " ".join(result.stderr.split())
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["nosuchcmd"], "No such command 'nosuchcmd'"),
        (["train", "--nosuchopt"], "No such option: --nosuchopt"),
        (["collect", "--prompts", "abc", "--out", "x.jsonl"], "Invalid value for '--prompts'"),
        (["eval", "--samples"], "Option '--samples' requires an argument"),
        (["config", "nosuch"], "No such command 'nosuch'"),
    ],
)
def test_usage_mistakes_exit_2_with_one_message(tmp_path, args, needle) -> None:
    """Each kind of usage mistake: one message, exit 2, no traceback (the installed typer raises its
    own vendored click exceptions, which escaped main() as 40-line tracebacks with exit 1)."""
    result = run(*args, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert needle in result.stderr and result.stderr.count("Error:") == 1
    assert "Traceback" not in result.stderr and len(result.stderr.splitlines()) <= 5


def test_bad_data_row_is_named_and_nothing_written(tmp_path) -> None:
    data = tmp_path / "d.jsonl"
    data.write_text('{"question": "1+1", "answer": "2"}\n{"question": "2+2", "answer": \n')
    result = run(
        "train",
        "data.source=file",
        f"data.path={data}",
        "data.eval_size=1",
        "model.name=tiny-random",
        f"output_dir={tmp_path / 'runs'}",
        "name=bad",
    )
    assert result.returncode == 2
    assert "d.jsonl" in result.stderr and "line 2" in result.stderr
    assert not (tmp_path / "runs" / "bad" / "metrics.jsonl").exists()


def test_numeric_reward_on_text_answers_is_refused_at_start(tmp_path) -> None:
    data = tmp_path / "capitals.jsonl"
    data.write_text('{"question": "Capital of France?", "answer": "Paris"}\n' * 4)
    result = run(
        "train",
        f"data.path={data}",
        "data.eval_size=1",
        "rewards.functions=[{name: exact_match}, {name: numeric_closeness}]",
        "model.name=tiny-random",
        f"output_dir={tmp_path / 'runs'}",
        "name=text",
    )
    assert result.returncode == 2
    message = " ".join(result.stderr.split())
    assert "rewards.functions[1] (numeric_closeness)" in message and "'Paris'" in message
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "runs" / "text" / "metrics.jsonl").exists()


def test_train_on_a_verl_file_says_what_it_trains_on(tmp_path) -> None:
    """``data.path`` alone is a file source; verl's columns are read without configuration; the
    header names the file, the columns, the prompt and the rewards, with none of the default
    job's chain_sum specifics (no demonstration, no numeric_closeness, no per-operator eval)."""
    import json

    rows = [
        {
            "data_source": "openai/gsm8k",
            "prompt": [{"role": "user", "content": f"What is {i} + 3? Answer after ####."}],
            "reward_model": {"style": "rule", "ground_truth": str(i + 3)},
            "extra_info": {"index": i},
        }
        for i in range(6)
    ]
    data = tmp_path / "gsm.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    args = ["model.name=tiny-random", "data.eval_size=2", "train.steps=0", "eval.before=false"]
    result = run("train", f"data.path={data}", *args, f"output_dir={tmp_path / 'runs'}")
    assert result.returncode == 0, result.stderr
    header = " ".join(result.stderr.split())
    assert f"rlvr train grpo-gsm → {tmp_path / 'runs'}/grpo-gsm" in header
    assert f"file {data}: 4 training, 2 held-out rows" in header
    assert "prompt from 'prompt' (chat, as written); reference from 'reward_model.ground_truth'" in header
    assert "no demonstrations" in header and "rewards 1 × verifier(default=math)" in header
    assert "What is" in header and "closeness" not in header and "operators" not in header


def test_unwritable_run_dir(tmp_path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    result = run("train", "model.name=tiny-random", f"output_dir={blocker}", "name=r")
    assert result.returncode == 2
    assert "cannot create run directory" in result.stderr


def test_debug_shows_traceback() -> None:
    result = run("--debug", "config", "show", "algo.klcoef=1")
    assert result.returncode != 0 and "Traceback" in result.stderr


def test_config_show_prints_resolved_yaml() -> None:
    result = run("config", "show", "optim.lr=0.5")
    assert result.returncode == 0
    assert "lr: 0.5" in result.stdout and "group_size: 8" in result.stdout


def test_tasks_lists_reasoning_gym() -> None:
    result = run("tasks")
    assert result.returncode == 0 and "chain_sum" in result.stdout and "jsonl" in result.stdout


def test_group_line_lists_groups_only_when_there_are_several() -> None:
    from rlvr.cli import _group_line

    metrics = {
        "eval/accuracy": 0.5,
        "eval/accuracy/+/positive": 0.75,
        "eval/size/+/positive": 4.0,
        "eval/accuracy/-/negative": 0.0,
        "eval/size/-/negative": 2.0,
    }
    assert _group_line(metrics) == "+/positive 75% (4) · -/negative 0% (2)"
    assert _group_line({"eval/accuracy/all": 1.0, "eval/size/all": 3.0}) == ""  # one group says nothing new
    assert _group_line(metrics, most=1) == ""  # too many to print on one line


def test_recipes_are_listed_resolved_anywhere_and_shipped_in_the_package(tmp_path) -> None:
    from rlvr import api
    from rlvr.config.load import RECIPES_DIR, recipe_names

    listed = run("recipes", cwd=tmp_path)
    assert listed.returncode == 0
    names = recipe_names()
    assert len(names) >= 30 and all(name in listed.stdout for name in names)
    # by name from any directory: the recipes live inside the installed package
    assert RECIPES_DIR.parent.name == "rlvr" and (RECIPES_DIR / "grpo.yaml").is_file()
    before = os.getcwd()
    try:
        os.chdir(tmp_path)
        assert api.load_config("dr_grpo").algo.advantage == "dr_grpo"
    finally:
        os.chdir(before)
    unknown = run("train", "grpoo", cwd=tmp_path)
    assert unknown.returncode == 2 and "grpoo" in unknown.stderr and "dr_grpo" in unknown.stderr
    import tomllib

    package_data = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())["tool"]
    assert "recipes/*.yaml" in package_data["setuptools"]["package-data"]["rlvr"]


# slow: the default run keeps test_checkpoint_policy's eval of a run directory (API, newest checkpoint)
@pytest.mark.slow
def test_eval_takes_a_run_directory_or_a_checkpoint(tmp_path, monkeypatch) -> None:
    """The run's last checkpoint, evaluated on the run's own held-out set (its config.yaml)."""
    import json

    tests = str(Path(__file__).parent)  # the run's reward lives in tests/reward_fixtures.py
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [tests, os.environ.get("PYTHONPATH")])))

    from tiny import TINY_RUN

    from rlvr import api

    api.train(
        api.load_config(None, [*TINY_RUN, f"output_dir={tmp_path}", "name=r", "train.steps=1"]), quiet=True
    )
    run_dir = tmp_path / "r"
    after = next(r for r in map(json.loads, (run_dir / "metrics.jsonl").open()) if r["phase"] == "after")
    for target in (run_dir, run_dir / "checkpoints" / "step-000001"):
        result = run("eval", "--model", str(target), "--json", cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        metrics = json.loads(result.stdout)
        assert metrics["eval/size"] == after["eval/size"] == 8  # the run's held-out set, not the default
        assert metrics["eval/accuracy"] == after["eval/accuracy"]
    api.train(
        api.load_config(
            None,
            [
                *TINY_RUN,
                f"output_dir={tmp_path}",
                "name=none",
                "train.steps=1",
                "train.final_checkpoint=none",
            ],
        ),
        quiet=True,
    )
    missing = run("eval", "--model", str(tmp_path / "none"), cwd=tmp_path)
    assert missing.returncode == 2 and "without a checkpoint" in missing.stderr


def test_eval_of_an_environment_run_plays_episodes(tmp_path) -> None:
    from env_fixtures import TwoTurns  # noqa: F401  (registers fixture_two_turns)
    from tiny import TINY_RUN

    from rlvr import api

    cfg = api.load_config(None, [*TINY_RUN, "env.name=fixture_two_turns", "data.eval_size=3"])
    metrics = api.evaluate_model(cfg, quiet=True)
    assert metrics["eval/turns"] == 2.0 and metrics["eval/size"] == 3.0


def _start_training(tmp_path, name: str, *extra: str) -> subprocess.Popen:
    """A long tiny-random run in its own process group (as a terminal's foreground job is)."""
    from tiny import TINY_RUN

    tests = str(Path(__file__).parent)
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "PYTHONPATH": os.pathsep.join([tests, os.environ.get("PYTHONPATH", "")]),
    }
    args = [
        *TINY_RUN,
        f"output_dir={tmp_path}",
        f"name={name}",
        "train.steps=500",
        "data.eval_size=0",
        *extra,
    ]
    return subprocess.Popen(
        [*RLVR, "train", *args, "--quiet"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
        # a shell's background job starts with SIGINT ignored, and Python keeps it so: give the run
        # Ctrl-C's default, as a terminal would
        preexec_fn=_default_sigint,
    )


def _wait_for_steps(path: Path, steps: int, proc: subprocess.Popen) -> None:
    import time

    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and proc.poll() is None:
        if (
            path.exists()
            and sum('"phase": "train"' in line for line in path.read_text().splitlines()) >= steps
        ):
            return
        time.sleep(0.2)
    raise AssertionError(
        f"no {steps} training steps logged: {proc.poll()} {proc.stderr.read() if proc.poll() else ''}"
    )


def test_ctrl_c_exits_130_saying_where_the_run_stopped(tmp_path) -> None:
    import signal

    proc = _start_training(tmp_path, "int", "train.save_every=1")
    _wait_for_steps(tmp_path / "int" / "metrics.jsonl", 2, proc)
    os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C sends: the whole foreground group
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr
    # the console wraps long lines, anywhere in the checkpoint's path (its length depends on tmp_path)
    assert "interrupted at step" in stderr and "last checkpoint:" in stderr
    assert "checkpoints/step-0000" in "".join(stderr.split())
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr


def test_sigterm_checkpoints_the_step_and_resume_continues(tmp_path, monkeypatch) -> None:
    import signal

    tests = str(Path(__file__).parent)  # the run's reward lives in tests/reward_fixtures.py
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [tests, os.environ.get("PYTHONPATH")])))

    proc = _start_training(tmp_path, "term")
    _wait_for_steps(tmp_path / "term" / "metrics.jsonl", 1, proc)
    os.killpg(proc.pid, signal.SIGTERM)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 143, stderr
    assert "terminated at step" in stderr and "Traceback" not in stderr
    step = int(stderr.split("terminated at step")[1].split(";")[0])
    checkpoint = tmp_path / "term" / "checkpoints" / f"step-{step:06d}"
    assert (checkpoint / "trainer_state.pt").exists()  # resumable, written at the step it stopped
    from tiny import TINY_RUN

    resumed = run(
        "train",
        *TINY_RUN,
        f"output_dir={tmp_path}",
        "name=term",
        f"train.steps={step + 1}",
        "data.eval_size=0",
        "--resume",
        "--quiet",
        cwd=tmp_path,
    )
    assert resumed.returncode == 0 and f"resumedfrom{checkpoint}" in "".join(resumed.stderr.split())


def _default_sigint() -> None:
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)
