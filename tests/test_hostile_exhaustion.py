"""Inputs built to exhaust the machine get one clear error, at once, and leave nothing half-written.

YAML alias bombs ("billion laughs") and deep YAML nesting in configs, overrides and a run's
config.yaml; JSON nested 100,000 levels deep in data rows, CSV cells, completions files, trajectory
files and run logs; a prompt too long for the model's context (docs/data.md, "Limits on input").
Each hostile input is a few lines (or a few hundred kB) written here; without the limits each one
hangs, exhausts memory or ends in a RecursionError traceback.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from rlvr.config.load import load_config, read_yaml
from rlvr.errors import RlvrError
from rlvr.safe_parse import MAX_JSON_DEPTH, json_depth, loads_json

DEEP = 100_000  # far past Python's recursion limit: json.loads raises RecursionError on it

# nine lines expanding to 9**9 (387 million) strings when anything walks the loaded value
BOMB = """\
data:
  task_config:
    a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]
    b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]
    c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]
    d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]
    e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]
    f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e]
    g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f]
    h: &h [*g, *g, *g, *g, *g, *g, *g, *g, *g]
    i: &i [*h, *h, *h, *h, *h, *h, *h, *h, *h]
"""
# the same in one line: [&a [1, 1, ...], &b [*a, *a, ...], ..., &i [*h, *h, ...]]
ONE_LINE_BOMB = (
    "["
    + ", ".join(
        f"&{name} [{', '.join([f'*{below}' if below else '1'] * 9)}]"
        for below, name in zip(["", *"abcdefgh"], "abcdefghi")
    )
    + "]"
)


def deep_json(depth: int = DEEP) -> str:
    return "[" * depth + "]" * depth


def run_cli(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, *args: str) -> tuple[int, str]:
    """``rlvr ARGS`` in this process: (exit code, stderr with whitespace runs joined)."""
    from rlvr import cli

    monkeypatch.setattr(sys, "argv", ["rlvr", *args])
    monkeypatch.setitem(cli._state, "debug", False)
    monkeypatch.setattr(cli, "console", Console(stderr=True, width=1000))
    capsys.readouterr()
    try:
        cli.main()
        code = 0
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else 1
    return code, " ".join(capsys.readouterr().err.split())


def run_cli_process(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """``rlvr ARGS`` in a child killed after 60 s: without the YAML limits these hang in this process."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "COLUMNS": "1000"}
    return subprocess.run(
        [sys.executable, "-m", "rlvr.cli", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=60,
    )


# ----------------------------------------------------------------------------------------- YAML
def test_alias_bomb_config_is_refused_naming_file_and_line(tmp_path) -> None:
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(BOMB)
    with pytest.raises(
        RlvrError, match=r"bomb\.yaml line \d+: YAML aliases expand to more than 10,000 nodes"
    ):
        read_yaml(bomb)


@pytest.mark.parametrize("command", ["config show", "train"])
def test_alias_bomb_through_the_cli_exits_2_at_once(tmp_path, command) -> None:
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(BOMB)
    result = run_cli_process(*command.split(), str(bomb), f"output_dir={tmp_path / 'runs'}", cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert "bomb.yaml line 7: YAML aliases expand" in " ".join(result.stderr.split())
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "runs").exists()


def test_alias_bomb_in_an_override_is_refused(tmp_path) -> None:
    result = run_cli_process("config", "show", f"data.task_config={{x: {ONE_LINE_BOMB}}}", cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    message = " ".join(result.stderr.split())
    assert "override data.task_config=... line 1: YAML aliases expand" in message
    assert "Traceback" not in result.stderr and len(message) < 400  # the bomb itself is not echoed


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("data:\n  task_config: &a\n    x: [*a]\n", "line 3: YAML alias *a is inside its own anchor &a"),
        ("data:\n  task_config:\n    x: " + "[" * 5000 + "]" * 5000 + "\n", "line 3: YAML nesting deeper"),
        ("seed: " + "9" * 5000 + "\n", "YAML value out of range"),
    ],
    ids=["recursive-alias", "deep-nesting", "huge-integer"],
)
def test_other_hostile_yaml_is_refused(tmp_path, text, needle) -> None:
    config = tmp_path / "c.yaml"
    config.write_text(text)
    with pytest.raises(RlvrError, match="c.yaml") as caught:
        load_config(config)
    assert needle in str(caught.value)


def test_ordinary_aliases_still_work(tmp_path) -> None:
    config = tmp_path / "ok.yaml"
    config.write_text("data:\n  task_config: &tc {min_terms: 2, max_terms: 3}\nenv:\n  params: *tc\n")
    assert load_config(config).env.params == {"min_terms": 2, "max_terms": 3}


def test_a_runs_alias_bomb_config_yaml_is_refused_by_report(tmp_path) -> None:
    from rlvr.report.load import load_run

    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text('{"step": 1, "reward/mean": 0.5}\n')
    (run / "config.yaml").write_text(BOMB)
    with pytest.raises(RlvrError, match=r"config\.yaml line 7: YAML aliases expand"):
        load_run(run)


# ----------------------------------------------------------------------------------------- JSON
def test_depth_scan_ignores_brackets_in_strings_and_counts_nesting() -> None:
    assert json_depth('{"a": "[[[[[[[[\\"[[[[", "b": [[1], {"c": []}]}') == 4
    assert loads_json(json.dumps({"q": "[" * 5000}), "x")["q"] == "[" * 5000
    nested = "[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH
    assert loads_json(nested, "x") == json.loads(nested)  # the limit itself is allowed
    with pytest.raises(
        RlvrError, match=r"f\.jsonl line 4: JSON nested more than 100 levels deep \(column 114\)"
    ):
        loads_json('{"a": 1, "b"' + ": " + "[" * 101, "f.jsonl line 4")
    with pytest.raises(RlvrError, match="f.jsonl line 2: JSON value out of range"):
        loads_json('{"n": ' + "7" * 5000 + "}", "f.jsonl line 2")


def _train_args(tmp_path: Path, data: Path, *extra: str) -> list[str]:
    return [
        "train",
        "data.source=file",
        f"data.path={data}",
        "data.eval_size=1",
        "model.name=tiny-random",
        "model.threads=1",
        f"output_dir={tmp_path / 'runs'}",
        "name=hostile",
        *extra,
    ]


def test_deep_jsonl_data_row_exits_2_naming_file_and_line(tmp_path, monkeypatch, capsys) -> None:
    data = tmp_path / "deep.jsonl"
    data.write_text(
        '{"question": "1+1", "answer": "2"}\n'
        + json.dumps({"question": "2+2", "answer": "4"})[:-1]
        + f', "meta": {deep_json()}}}\n'
        + '{"question": "3+3", "answer": "6"}\n'
    )
    code, err = run_cli(monkeypatch, capsys, *_train_args(tmp_path, data))
    assert code == 2, err
    assert "deep.jsonl line 2: JSON nested more than 100 levels deep" in err
    assert "Traceback" not in err
    assert not (tmp_path / "runs" / "hostile").exists()


@pytest.mark.parametrize("kind", ["json", "csv", "python-row"])
def test_deep_rows_of_other_sources_are_refused(tmp_path, kind) -> None:
    from rlvr.data.file_source import load_file
    from rlvr.data.rows import ColumnMapping, rows_to_examples

    if kind == "json":
        path = tmp_path / "deep.json"
        path.write_text(
            '[{"question": "q", "answer": "a"},\n {"question": "r", "answer": ' + deep_json() + "}]"
        )
        with pytest.raises(RlvrError, match=r"deep\.json: JSON nested more than 101 levels deep \(line 2"):
            load_file(path)
    elif kind == "csv":
        path = tmp_path / "deep.csv"
        path.write_text(f'messages,answer\n"{deep_json()}",4\n')
        with pytest.raises(
            RlvrError, match=r"deep\.csv data row 1: column 'messages': JSON nested more than"
        ):
            load_file(path, messages_key="messages")
    else:  # a row as an HF dataset or a Parquet file hands it over: Python lists, no JSON text
        row: list = []
        deep: dict = {"question": "q", "answer": "a", "tree": row}
        for _ in range(DEEP):
            row.append([])
            row = row[0]
        with pytest.raises(
            RlvrError, match="train split row 3: the row nests lists and objects more than 100"
        ):
            rows_to_examples([("train split row 3", deep)], ColumnMapping(), "ds", "ds")


def test_deep_completions_file_exits_2_and_writes_no_scores(tmp_path, monkeypatch, capsys) -> None:
    completions = tmp_path / "bomb.jsonl"
    completions.write_text(
        '{"question": "1+1", "answer": "2", "completion": "2"}\n'
        + '{"question": "2+2", "answer": "4", "completion": "4", "extra": '
        + deep_json()
        + "}\n"
    )
    out = tmp_path / "scores.jsonl"
    code, err = run_cli(
        monkeypatch,
        capsys,
        "reward",
        "--config",
        "grpo",
        "--completions",
        str(completions),
        "--out",
        str(out),
    )
    assert code == 2, err
    assert "bomb.jsonl line 2: JSON nested more than 100 levels deep" in err
    assert "Traceback" not in err
    assert not out.exists() and list(tmp_path.iterdir()) == [completions]


def test_deep_run_logs_exit_2_from_report(tmp_path, monkeypatch, capsys) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text('{"step": 1, "reward/mean": 0.5}\n')
    (run / "samples.jsonl").write_text('{"step": 1}\n\n{"step": 1, "x": ' + deep_json() + "}\n")
    code, err = run_cli(monkeypatch, capsys, "report", str(run))
    assert code == 2, err
    assert "samples.jsonl:3: JSON nested more than 100 levels deep" in err
    assert "Traceback" not in err
    assert not (run / "report.html").exists()


def test_deep_trajectory_and_log_lines_are_refused(tmp_path) -> None:
    from rlvr.log import read_jsonl
    from rlvr.trajectory import read_trajectory_groups

    path = tmp_path / "trajectories.jsonl"
    path.write_text('{"step": 0, "group": ' + deep_json() + "}\n")
    with pytest.raises(RlvrError, match=r"trajectories\.jsonl:1: JSON nested more than 100"):
        read_trajectory_groups(path)
    with pytest.raises(RlvrError, match=r"trajectories\.jsonl:1: JSON nested more than 100"):
        read_jsonl(path)


def test_model_written_and_cell_json_nested_deep_is_an_answer_not_a_crash() -> None:
    from rlvr.data.example import Example
    from rlvr.envs.calculator import parse_call
    from rlvr.rewards.ifeval import ifeval_reward

    assert parse_call(f"<tool_call>{deep_json()}</tool_call>")[1].startswith("malformed tool call")
    json_asked = Example("e", [], metadata={"constraints": [{"type": "json_format"}]})
    assert ifeval_reward(deep_json(), json_asked) == 0.0
    cell = Example("e-7", [], metadata={"constraints": deep_json()})
    with pytest.raises(ValueError, match=r"example 'e-7': metadata\['constraints'\]: JSON nested more than"):
        ifeval_reward("{}", cell)


# ---------------------------------------------------------------------------------------- prompts
def test_huge_prompt_is_refused_before_it_is_tokenized(tmp_path, monkeypatch, capsys) -> None:
    """A prompt of 200,000 characters (the limit is 32 per token of tiny-random's 2,048-token
    context: 65,536) is refused naming its file and line, and never reaches the tokenizer."""
    from rlvr.models import load_tokenizer

    backend = type(load_tokenizer("tiny-random"))
    tokenize = backend.__call__

    def guarded(self, text=None, *args, **kwargs):
        assert not (isinstance(text, str) and len(text) > 100_000), "a huge prompt reached the tokenizer"
        return tokenize(self, text, *args, **kwargs)

    monkeypatch.setattr(backend, "__call__", guarded)
    data = tmp_path / "huge.jsonl"
    rows = [{"question": f"{n}+{n}", "answer": str(2 * n)} for n in range(4)]
    rows[2]["question"] = "lorem ipsum " * 17_000
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    code, err = run_cli(monkeypatch, capsys, *_train_args(tmp_path, data))
    assert code == 2, err
    assert "huge.jsonl line 3 (id 'huge-2'): the prompt has 204,0" in err
    assert "context of 2,048 tokens (the model's max_position_embeddings)" in err
    assert "Traceback" not in err
    assert not (tmp_path / "runs" / "hostile").exists()


def test_prompt_plus_completion_longer_than_the_context_is_refused_at_start(
    tmp_path, monkeypatch, capsys
) -> None:
    data = tmp_path / "long.jsonl"
    rows = [{"question": f"{n}+{n}", "answer": str(2 * n)} for n in range(4)]
    rows[1]["question"] = "seven " * 3000  # about 3,000 tokens: within the character bound
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    code, err = run_cli(monkeypatch, capsys, *_train_args(tmp_path, data, "train.steps=1"))
    assert code == 2, err
    assert "long.jsonl line 2 (id 'long-1'): the prompt is 3," in err
    assert "with rollout.max_new_tokens=" in err and "lower rollout.max_new_tokens" in err
    assert not (tmp_path / "runs" / "hostile").exists()


def test_eval_refuses_a_completion_budget_past_the_context(tmp_path, monkeypatch, capsys) -> None:
    code, err = run_cli(
        monkeypatch,
        capsys,
        "eval",
        "--model",
        "tiny-random",
        "--task",
        "chain_sum",
        "data.eval_size=1",
        "model.threads=1",
        "eval.max_new_tokens=2040",
    )
    assert code == 2, err
    assert "with eval.max_new_tokens=2040 that is more than the context of 2,048 tokens" in err
    assert "Traceback" not in err
