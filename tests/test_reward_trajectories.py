"""``rlvr reward`` on the trajectories ``rlvr collect`` writes, and ``rlvr tasks`` listing every source
(issue 26)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from tiny import TINY_RUN

from rlvr import api
from rlvr.errors import RlvrError
from rlvr.rewards.offline import score_with_config

HERE = Path(__file__).parent
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(HERE)}  # reward_fixtures


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "rlvr.cli", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=ENV,
        timeout=300,
    )


def test_reward_scores_a_collect_file_against_the_configs_examples(tmp_path: Path) -> None:
    problems = [
        {
            "question": f"Sam has {i} marbles and finds {i + 2} more. How many marbles does he have?",
            "answer": str(2 * i + 2),
        }
        for i in range(12)
    ]
    data = tmp_path / "marbles.jsonl"
    data.write_text("".join(json.dumps(p) + "\n" for p in problems))
    rewards = "rewards.functions=[{name: math}, {name: 'reward_fixtures:scaled_len', params: {scale: 0.01}}]"
    overrides = [*TINY_RUN, f"data.path={data}", "data.eval_size=2", rewards, "rollout.group_size=3"]
    cfg = api.load_config(None, overrides)
    collected = tmp_path / "collected.jsonl"
    api.collect(cfg, str(collected), prompts=2, quiet=True)
    rows = [json.loads(line) for line in collected.read_text().splitlines()]
    assert len(rows) == 6 and "completion" not in rows[0] and rows[0]["text"] is not None

    # the file's own rewards are replayed exactly, each trajectory against its example
    summary = score_with_config(collected, cfg)
    assert summary["rows"] == 6 and summary["error_rows"] == 0
    assert summary["mean"] == pytest.approx(sum(r["reward"] for r in rows) / 6)
    by_id = {f"marbles-{i}": p for i, p in enumerate(problems)}
    assert [e["reference"] for e in summary["examples"]] == [
        by_id[r["example_id"]]["answer"] for r in rows[:3]
    ]

    # a right answer written into a trajectory scores 1 for math: the reference came from the data
    rows[0]["text"] = f"Sam has {by_id[rows[0]['example_id']]['answer']} marbles."
    edited = tmp_path / "edited.jsonl"
    edited.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert score_with_config(edited, cfg)["examples"][0]["components"]["math"] == 1.0

    # collected with other data: the id is not found, and the error says which line and why
    rows[1]["example_id"] = "elsewhere-7"
    edited.unlink()
    edited.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(
        RlvrError, match=r"edited.jsonl line 2: example 'elsewhere-7' is not in this config's data"
    ):
        score_with_config(edited, cfg)

    # a hostile trajectory row: fields of the wrong type are an error naming the line, not a traceback
    rows[1]["example_id"] = rows[0]["example_id"]
    sampled = next(s for s in rows[1]["segments"] if s["kind"] == "sampled")
    sampled["token_ids"] = 10**9
    edited.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(
        RlvrError, match=r"edited.jsonl line 2: a sampled segment's 'token_ids' and 'logprobs'"
    ):
        score_with_config(edited, cfg)

    # the CLI without the config: it says to give the config the file was collected with
    args = ["reward", "--completions", str(collected), "--json"]
    refused = cli(*args, "--task", "math", cwd=tmp_path)
    message = " ".join(refused.stderr.split())
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert "is a trajectories file" in message and "rlvr reward --config CONFIG" in message


def test_tasks_lists_every_source_with_the_environment_datasets(tmp_path: Path) -> None:
    result = cli("tasks", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "env (data.source=env data.task=NAME)" in out
    envs = out.split("environment datasets (data.source=env):\n", 1)[1].split("reasoning-gym tasks:")[0]
    assert envs.split() == [
        "code_functions",
        "frozenlake",
        "guess_number",
        "openenv",
        "search",
        "textarena",
        "verifiers",
        "vision_chart",
        "vision_colour",
        "vision_count",
        "vision_position",
        "wordle",
    ]
    assert "\n  chain_sum\n" in out
