"""Offline scoring (``rlvr reward``): summaries, row formats, groups, and errors naming file and line."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import reasoning_gym

from rlvr.errors import RlvrError
from rlvr.rewards.offline import error_type, score_file


def write(path, rows) -> str:
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n")
    return str(path)


def test_math_file_summary(tmp_path):
    rows = [
        {"completion": "<answer>4</answer>", "answer": "4", "question": "2+2?"},
        {"completion": r"\boxed{\frac12}", "reference": "0.5"},
        {"completion": "<answer>5</answer>", "answer": 4},  # a number as the answer
        {"completion": "<answer>" + "9" * 5000 + "</answer>", "answer": "4"},  # an error
    ]
    summary = score_file(write(tmp_path / "m.jsonl", rows), "math", workers=1, show=2)
    assert summary["rows"] == 4 and summary["error_rows"] == 1
    assert summary["mean"] == pytest.approx(2 / 3)
    assert summary["components"] == {"math": pytest.approx(2 / 3)}
    assert summary["errors"] == {"math": {"ValueError": 1}}
    assert [e["total"] for e in summary["examples"]] == [1.0, 1.0]


def test_reasoning_gym_rows_and_several_rewards(tmp_path):
    data = reasoning_gym.create_dataset("chain_sum", size=3, seed=1, min_terms=2, max_terms=2)
    rows = [{"completion": f"<answer>{e['answer']}</answer>", "rg_entry": e} for e in data]
    rows.append(
        {"completion": "<answer>-1</answer>", "question": data[0]["question"], "answer": data[0]["answer"]}
    )
    path = write(tmp_path / "rg.jsonl", rows)
    summary = score_file(path, "chain_sum", workers=1)
    assert summary["components"] == {"reasoning_gym": 0.75}
    both = score_file(path, "chain_sum", rewards=["reasoning_gym", "format"], workers=1)
    assert both["components"] == {"format": 1.0, "reasoning_gym": 0.75} and both["mean"] == 1.75


def test_group_rewards_group_rows_by_question(tmp_path):
    rows = [
        {"completion": f"<answer>{a}</answer>", "question": q}
        for q, a in [("a", 1), ("a", 1), ("a", 2), ("b", 3)]
    ]
    summary = score_file(write(tmp_path / "g.jsonl", rows), "majority_vote", workers=1, show=4)
    assert [e["total"] for e in summary["examples"]] == [1.0, 1.0, 0.0, 1.0]


@pytest.mark.parametrize(
    ("rows", "needle"),
    [
        (['{"completion": "a"}', "{not json"], "bad.jsonl line 2: not valid JSON"),
        (['{"completion": "a"}', '{"answer": "4"}'], "bad.jsonl line 2: no text field 'completion'"),
        (['["a list"]'], "bad.jsonl line 1: expected an object"),
        ([], "no rows"),
    ],
)
def test_bad_rows_name_file_and_line(tmp_path, rows, needle):
    with pytest.raises(RlvrError, match=needle):
        score_file(write(tmp_path / "bad.jsonl", rows), "math", workers=1)


def test_bad_task_and_params(tmp_path):
    path = write(tmp_path / "x.jsonl", [{"completion": "a", "answer": "1"}])
    with pytest.raises(RlvrError, match="unknown task 'maths'"):
        score_file(path, "maths")
    with pytest.raises(RlvrError, match="not among the rewards"):
        score_file(path, "math", params={"format": {}})


def test_error_types():
    assert error_type("timeout after 5s") == "timeout"
    assert error_type("worker crashed: worker process killed by SIGSEGV") == "crash"
    assert error_type("ValueError: bad") == "ValueError"
    assert error_type("batch deadline") == "batch deadline"


def test_cli_reward_command(tmp_path):
    path = write(tmp_path / "c.jsonl", [{"completion": "<answer>4</answer>", "answer": "4"}])
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    base = [
        sys.executable,
        "-m",
        "rlvr.cli",
        "reward",
        "--task",
        "math",
        "--completions",
        path,
        "--workers",
        "1",
    ]
    result = subprocess.run([*base, "--json"], capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["mean"] == 1.0
    table = subprocess.run(base, capture_output=True, text=True, env=env, timeout=120)
    assert "mean reward 1.0000" in table.stdout and "math" in table.stdout
    bad = subprocess.run(
        [*base[:-4], "--completions", str(tmp_path / "nope.jsonl")], capture_output=True, text=True, env=env
    )
    assert bad.returncode == 2 and "nope.jsonl" in bad.stderr
