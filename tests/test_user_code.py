"""The user's own code: modules a config names are found in the working directory, and rewards
pass as Python callables through the API (TRL's ``reward_funcs=[fn]``)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from rlvr import api
from rlvr.errors import RlvrError

RLVR = Path(sys.executable).parent / "rlvr"  # the console script: it puts no directory of ours on sys.path

REWARD_MODULE = """
import helper_in_cwd  # a sibling module of the user's, imported at the top


def quarter(completion, example):
    return helper_in_cwd.VALUE


def later(completion, example):
    import late_helper  # a sibling imported only when the reward runs (in a worker process)

    return late_helper.VALUE
"""


def _user_dir(tmp_path: Path) -> Path:
    work = tmp_path / "work"
    work.mkdir()
    (work / "myrewards.py").write_text(REWARD_MODULE)
    (work / "helper_in_cwd.py").write_text("VALUE = 0.25\n")
    (work / "late_helper.py").write_text("VALUE = 0.5\n")
    return work


def test_a_reward_module_in_the_working_directory_scores_without_pythonpath(tmp_path) -> None:
    work = _user_dir(tmp_path)
    (work / "run.yaml").write_text(
        "data: {train_size: 4, eval_size: 0}\n"
        "rewards:\n"
        "  workers: 1\n"
        "  functions: [{name: 'myrewards:quarter'}, {name: 'myrewards:later', weight: 0.5}]\n"
    )
    rows = [{"question": "1 + 2 =", "answer": "3", "completion": text} for text in ("3", "4")]
    (work / "completions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(HF_HUB_OFFLINE="1", COLUMNS="200")
    result = subprocess.run(
        [str(RLVR), "reward", "--config", "run.yaml", "--completions", "completions.jsonl", "--json"],
        capture_output=True,
        text=True,
        cwd=work,
        env=env,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads(result.stdout)
    assert summary["errors"] == {} and summary["error_rows"] == 0, summary
    # both computed in a reward worker process, the second importing its sibling only when it runs
    assert summary["components"] == {"myrewards:quarter": 0.25, "myrewards:later": 0.5}


def test_a_missing_module_names_the_working_directory(tmp_path, monkeypatch) -> None:
    from rlvr.rewards import get_reward

    monkeypatch.chdir(tmp_path)
    with pytest.raises(RlvrError, match=re.escape(f"the working directory {os.getcwd()}")):
        get_reward("no_such_module_here:fn")


def test_an_environment_module_in_the_working_directory(tmp_path, monkeypatch) -> None:
    from rlvr.envs.base import env_factory

    work = tmp_path / "envs_here"
    work.mkdir()
    (work / "myenvs_cwd.py").write_text("class Env:\n    pass\n")
    monkeypatch.chdir(work)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", ".")])
    assert env_factory("myenvs_cwd:Env").__name__ == "Env"
    assert sys.path[-1] == str(work)  # appended: installed packages still win over a same-named file


def test_workers_started_before_the_module_was_found_look_in_the_working_directory(
    tmp_path, monkeypatch
) -> None:
    # the reward workers' server started earlier in this process (a first run, a notebook), with
    # the sys.path of then: the trainer's working directory reaches the workers with their specs
    from rlvr.data.example import Example
    from rlvr.rewards import RewardPool, RewardSpec

    example = Example(id="e1", prompt=[{"role": "user", "content": "1 + 2 ="}], reference="3")
    with RewardPool([RewardSpec(name="reward_fixtures:scaled_len")], workers=1, timeout_s=30) as pool:
        assert pool.score(["abc"], [example])[0].ok
    work = _user_dir(tmp_path)
    monkeypatch.chdir(work)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", ".")])
    with RewardPool([RewardSpec(name="myrewards:later")], workers=1, timeout_s=30) as pool:
        [result] = pool.score(["abc"], [example])
    assert result.ok, result.errors
    assert result.total == 0.5


def first_letter_is_digit(completion, example):
    """A per-completion reward as a user writes it in their training script."""
    return 1.0 if completion[:1].isdigit() else 0.0


def always_a_quarter(completion, example):
    return 0.25


def trl_style(prompts, completions, **kwargs):
    return [0.0 for _ in completions]


def test_reward_functions_pass_through_the_api_as_callables(tmp_path) -> None:
    from tiny import TINY_RUN

    overrides = [o for o in TINY_RUN if not o.startswith("rewards.functions=")]
    overrides += ["train.steps=1", "eval.before=false", "data.eval_size=2", "train.final_checkpoint=none"]
    cfg = api.load_config(None, [*overrides, f"output_dir={tmp_path}", "name=funcs"])
    api.train(cfg, quiet=True, reward_funcs=[always_a_quarter, first_letter_is_digit], reward_weights=[1, 2])
    rows = [json.loads(line) for line in (tmp_path / "funcs" / "metrics.jsonl").read_text().splitlines()]
    [step] = [row for row in rows if row.get("phase") == "train"]
    assert step["reward/always_a_quarter"] == 0.25  # called in the reward worker processes
    assert "reward/first_letter_is_digit" in step and step["reward/errors"] == 0
    saved = (tmp_path / "funcs" / "config.yaml").read_text()
    assert "name: test_user_code:always_a_quarter" in saved and "weight: 2.0" in saved


def test_reward_functions_workers_cannot_import_are_refused_with_what_to_do() -> None:
    cfg = api.load_config(None, [])

    def nested(completion, example):
        return 0.0

    for fn, says in (
        (nested, "top level of a module or script"),
        (lambda completion, example: 0.0, "not a lambda"),
        (trl_style, "TRL's (prompts, completions"),
    ):
        with pytest.raises(RlvrError, match=re.escape(says)):
            api.with_rewards(cfg, [fn])
    with pytest.raises(RlvrError, match="2 values for 1 reward_funcs"):
        api.with_rewards(cfg, [always_a_quarter], [1, 2])
    mixed = api.with_rewards(cfg, [always_a_quarter, "format"])
    assert [(f.name, f.label) for f in mixed.rewards.functions] == [
        ("test_user_code:always_a_quarter", "always_a_quarter"),
        ("format", None),
    ]
