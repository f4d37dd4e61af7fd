"""What a run tells its user beyond the demo: the time limits it runs under, why it stopped, a reward
that fails, and a batch job's log (output to a file: a line per step and per eval, no library noise)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

from rich.console import Console
from tiny import TINY_RUN

from rlvr import api
from rlvr.config import load_config
from rlvr.log import read_jsonl
from rlvr.log.progress import StepLines
from rlvr.train.loop.health import HackWatch, error_kind, run_failure

TESTS = Path(__file__).parent
RLVR = [sys.executable, "-m", "rlvr.cli"]
WORD_PROBLEMS = [
    ("Tom has 3 apples and buys 5 more. How many apples does he have now?", "8"),
    ("A box holds 12 pencils. How many pencils are in 4 boxes?", "48"),
    ("Sara read 15 pages on Monday and 22 on Tuesday. How many pages did she read?", "37"),
    ("A train travels 60 km each hour. How far does it go in 3 hours?", "180"),
    ("There are 30 students and 6 leave. How many students remain?", "24"),
    ("A pizza is cut into 8 slices and 3 are eaten. How many slices are left?", "5"),
]


def _word_problems(tmp_path: Path) -> Path:
    path = tmp_path / "word_problems.jsonl"
    path.write_text("".join(json.dumps({"question": q, "answer": a}) + "\n" for q, a in WORD_PROBLEMS))
    return path


def _rlvr(tmp_path: Path, *args: str, log: Path | None = None, pythonpath: str = str(TESTS)):
    """``rlvr ARGS`` in a subprocess; with ``log``, stdout and stderr both go to that file (a batch job)."""
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "PYTHONPATH": os.pathsep.join(filter(None, [pythonpath, os.environ.get("PYTHONPATH")])),
    }
    if log is None:
        return subprocess.run(
            [*RLVR, *args], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300
        )
    with log.open("w") as out:
        return subprocess.run(
            [*RLVR, *args], stdout=out, stderr=subprocess.STDOUT, cwd=tmp_path, env=env, timeout=300
        )


# ------------------------------------------------------------------ time limits and lengths by source
def test_the_demo_limits_and_length_belong_to_the_default_job(tmp_path) -> None:
    demo = load_config()
    assert (demo.train.time_limit_s, demo.train.time_budget_s, demo.rollout.max_new_tokens) == (450, 570, 24)
    grpo = load_config("grpo")  # the demo, written out
    assert (grpo.train.time_limit_s, grpo.train.time_budget_s, grpo.rollout.max_new_tokens) == (450, 570, 24)
    words = _word_problems(tmp_path)
    for overrides in ([f"data.path={words}"], ["data.path=openai/gsm8k"], ["data.task=gsm_symbolic"]):
        cfg = load_config(None, overrides)
        assert cfg.train.time_limit_s is None and cfg.train.time_budget_s is None, overrides
        assert cfg.rollout.max_new_tokens == 256 and cfg.eval.max_new_tokens is None, (
            overrides
        )  # eval follows
    env = load_config(None, ["data.source=env", "data.task=guess_number"])
    assert env.rollout.max_new_tokens == 24 and env.train.time_limit_s is None
    # a value the user sets wins, either way
    mine = load_config(None, [f"data.path={words}", "train.time_limit_s=900", "rollout.max_new_tokens=64"])
    assert (mine.train.time_limit_s, mine.train.time_budget_s, mine.rollout.max_new_tokens) == (900, None, 64)
    unlimited = load_config(None, ["train.time_limit_s=null"])
    assert unlimited.train.time_limit_s is None and unlimited.train.time_budget_s == 570


def test_an_active_limit_is_in_the_summary_and_in_the_stop_message(tmp_path) -> None:
    out = io.StringIO()
    overrides = [*TINY_RUN, "train.steps=3", "train.time_limit_s=0.001", "data.eval_size=0"]
    cfg = load_config(None, [*overrides, "train.final_checkpoint=none", f"output_dir={tmp_path}", "name=cut"])
    api.train(cfg, console=Console(file=out, width=400), quiet=True)
    text = out.getvalue()
    assert "limits   training stops after 0.001 s (train.time_limit_s) (null: no limit)" in text
    assert "time limit: stopping after step 1 of 3, train.time_limit_s=0.001 reached" in text


# ------------------------------------------------------------------ a reward that fails on every call
def test_a_reward_that_always_fails_is_shown_and_the_run_exits_3(tmp_path) -> None:
    (tmp_path / "my_rewards.py").write_text(
        "def broken(completion, example):\n    raise ValueError('my reward broke')\n"
    )
    words = _word_problems(tmp_path)
    args = [
        *(o for o in TINY_RUN if not o.startswith("rewards.functions=")),
        "rewards.functions=[{name: 'my_rewards:broken'}]",
        f"data.path={words}",
        "data.eval_size=2",
        "eval.before=false",
        "train.steps=2",
        "train.final_checkpoint=none",
        "output_dir=runs",
        "name=broken",
    ]
    result = _rlvr(tmp_path, "train", *args, pythonpath=str(tmp_path))
    output = result.stdout + result.stderr
    assert result.returncode == 3, output[-3000:]
    assert output.count("my reward broke") == 1, output[-3000:]  # the first of its kind, once
    assert "reward error in 'my_rewards:broken': ValueError: my reward broke" in output
    assert "error: the run failed: 16 of 16 reward calls failed (100%" in output
    assert "none of its 2 steps made an update" in output and "Traceback" not in output
    rows = read_jsonl(tmp_path / "runs" / "broken" / "metrics.jsonl")  # its outputs are written
    assert [r["phase"] for r in rows] == ["train", "train", "after"]


def test_run_failure_needs_no_update_or_most_calls_failed() -> None:
    def run(**counts: float) -> dict:
        return {"run": {"steps": 4.0, "updates": 1.0, "reward_calls": 10.0, "reward_errors": 0.0, **counts}}

    assert run_failure(run()) is None and run_failure(run(reward_errors=5.0)) is None  # half is not most
    assert "6 of 10 reward calls failed (60%" in run_failure(run(reward_errors=6.0))
    assert "none of its 4 steps made an update" in run_failure(run(updates=0.0))
    assert run_failure(run(steps=0.0, updates=0.0)) is None  # train.steps=0, or a finished resume
    assert run_failure({"before": {}, "after": {}}) is None  # e.g. a Ray driver's results
    assert error_kind("ValueError: my reward broke") == "ValueError"
    assert error_kind("timeout after 5s") == "timeout"


FARMING_ENV = """
from rlvr.envs import Environment, Step


class Farm(Environment):
    def __init__(self, unanswered: float = 1.0):
        self.unanswered = unanswered

    def reset(self, example, rng):
        return list(example.prompt)

    def step(self, text):
        return Step(done=True, reward=0.2)

    def outcome(self):
        return {"process_unanswered": self.unanswered}
"""


def test_episodes_farming_a_process_reward_are_warned_about_while_the_run_trains(tmp_path) -> None:
    (tmp_path / "my_envs.py").write_text(FARMING_ENV)
    words = _word_problems(tmp_path)
    base = [
        *TINY_RUN,
        f"data.path={words}",
        "data.eval_size=2",
        "eval.before=false",
        "train.steps=1",
        "train.final_checkpoint=none",
        "output_dir=runs",
        "env.name=my_envs:Farm",
    ]
    paths = os.pathsep.join([str(tmp_path), str(TESTS)])
    result = _rlvr(tmp_path, "train", *base, "name=farm", pythonpath=paths)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-3000:]
    assert "reward hacking?" in output and "step 1: 100% of the episodes earned process reward" in output
    rows = read_jsonl(tmp_path / "runs" / "farm" / "metrics.jsonl")
    assert rows[0]["reward/env/process_unanswered"] == 1.0


def test_hack_watch_warns_once_above_half_of_a_step() -> None:
    watch = HackWatch(Console(file=io.StringIO()))
    assert watch.observe(1, {"reward/env/process_unanswered": 0.5, "reward/env/solved": 0.9}) is None
    said = watch.observe(2, {"reward/env/process_unanswered": 0.75})
    assert said is not None and said.startswith("step 2: 75% of the episodes")
    assert watch.observe(3, {"reward/env/process_unanswered": 1.0}) is None  # once per run
    assert "reward hacking?" in watch.console.file.getvalue()


# ------------------------------------------------------------------ a batch job's log
def test_a_batch_run_logs_a_line_per_step_and_each_eval_without_library_warnings(tmp_path) -> None:
    log = tmp_path / "train.log"
    args = [*TINY_RUN, "train.steps=2", "eval.every=1", "data.eval_size=2", "output_dir=runs", "name=batch"]
    result = _rlvr(tmp_path, "train", *args, "train.final_checkpoint=none", log=log)
    text = log.read_text()
    assert result.returncode == 0, text[-3000:]
    lines = text.splitlines()
    steps = [line for line in lines if line.startswith("step ")]
    assert [line.split("  ")[0] for line in steps] == ["step 1/2", "step 2/2"], text[-3000:]
    assert all("reward " in line and " tok/s" in line and "ETA " in line for line in steps)
    evals = [line for line in lines if line.startswith("eval (")]
    assert [line.split(":")[0] for line in evals] == [
        "eval (before) at step 0",
        "eval (periodic) at step 1",
        "eval (after) at step 2",
    ]
    assert all("accuracy " in line and "(n=2)" in line for line in evals)
    assert "deprecated" not in text and "FutureWarning" not in text, text[-3000:]
    assert "━" not in text  # no progress bar drawn into the file


def test_step_lines_every_n_steps_and_always_the_last() -> None:
    out = io.StringIO()
    lines = StepLines(Console(file=out, width=300), total=5, every=2)
    for step in range(1, 6):
        lines.step(step, {"reward/mean": 0.5, "train/accuracy": 0.25, "throughput/tokens_per_s": 100.0})
    printed = out.getvalue().splitlines()
    assert [line.split("  ")[0] for line in printed] == ["step 2/5", "step 4/5", "step 5/5"]
    assert "reward 0.500  acc 0.25  100 tok/s  elapsed 0:00:00" in printed[0]
    assert load_config(None, ["log.every_steps=10"]).log.every_steps == 10


def test_library_deprecations_are_silenced_but_other_warnings_show() -> None:
    from rlvr.library_warnings import silence_library_deprecations

    def warn(message: str, module: str) -> None:
        warnings.warn_explicit(message, FutureWarning, "x.py", 1, module=module, registry={})

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        silence_library_deprecations()
        warn(
            "`past_key_values` is deprecated and will be removed in version 5.40.0", "torch.nn.modules.module"
        )
        warn(
            "`is_gradient_checkpointing` is deprecated and will be removed in v6.",
            "transformers.modeling_utils",
        )
        warn("`past_key_values` is deprecated", "rlvr.rollout.hf_engine")  # rlvr's own: shown
        warn("something else is deprecated", "transformers.modeling_utils")  # another notice: shown
    assert [str(w.message) for w in caught] == [
        "`past_key_values` is deprecated",
        "something else is deprecated",
    ]
