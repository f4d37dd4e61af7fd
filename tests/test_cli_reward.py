"""``rlvr reward --config``: a file of completions scored exactly as training scores them."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from rlvr.config import load_config
from rlvr.data.from_config import load_datasets
from rlvr.rewards.scoring import training_pool

# every kind of setting scoring reads: several components with weights and labels, params, a gate,
# a reward that takes token counts and finish reasons, the pool's workers and timeout
CONFIG = """
data:
  train_size: 8
  eval_size: 0
rollout:
  max_new_tokens: 16
rewards:
  workers: 1
  timeout_s: 20
  functions:
    - {name: reasoning_gym, weight: 0.5, params: {extract: auto}}
    - {name: reasoning_gym, label: tagged, weight: 0.5, params: {extract: answer_tag}}
    - {name: numeric_closeness, label: closeness, weight: 0.25, params: {extract: answer_tag}}
    - {name: format, label: fmt, weight: 0.2, gate: tagged}
    - {name: cosine_length, label: length, weight: 0.1, params: {correct_reward: reasoning_gym}}
"""


def _rows(examples) -> list[dict]:
    rows = []
    for example in examples:
        right = example.reference
        for completion, tokens, finish in (
            (f"So it is {right}.\n<answer>{right}</answer>", 9, "stop"),
            (f"The answer is {right}", 5, "stop"),
            (f"<answer>{int(right) + 3}</answer>", 4, "stop"),
            (f"{right} and then some more and more", 16, "length"),
        ):
            rows.append(
                {
                    "question": example.question,
                    "answer": right,
                    "completion": completion,
                    "tokens": tokens,
                    "finish_reason": finish,
                }
            )
    return rows


def test_reward_with_a_config_scores_as_the_trainers_pool(tmp_path) -> None:
    config = tmp_path / "run.yaml"
    config.write_text(CONFIG)
    cfg = load_config(config)
    examples = load_datasets(cfg.data).train[:3]  # the training data's own examples
    rows = _rows(examples)
    data = tmp_path / "completions.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))

    with training_pool(cfg.rewards) as pool:  # what a training step computes for these completions
        expected = pool.score(
            [r["completion"] for r in rows],
            [e for e in examples for _ in range(4)],
            [r["tokens"] for r in rows],
            [r["finish_reason"] for r in rows],
            group_sizes=[4] * len(examples),
        )
    assert len({r.total for r in expected}) >= 4 and all(r.ok for r in expected)  # a test that can fail

    out = tmp_path / "scores.jsonl"
    result = subprocess.run(
        [sys.executable, "-m", "rlvr.cli", "reward", "--config", str(config), "--completions", str(data)]
        + ["--out", str(out), "rewards.timeout_s=30"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "COLUMNS": "200"},
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    scored = [json.loads(line) for line in out.read_text().splitlines()]
    assert [s["line"] for s in scored] == list(range(1, len(rows) + 1))
    assert [s["total"] for s in scored] == [r.total for r in expected]
    assert [s["components"] for s in scored] == [r.components for r in expected]
    printed = " ".join(result.stdout.split())
    assert "reward = 0.5 × reasoning_gym(extract=auto) + 0.5 × tagged" in printed
    mean = sum(r.total for r in expected) / len(expected)
    assert f"mean reward {mean:.4f}" in printed
    cells = " ".join(result.stdout.replace("│", " ").split())  # the components table, row by row
    for label, weight in (("closeness", "0.25"), ("fmt", "0.2"), ("length", "0.1"), ("tagged", "0.5")):
        component = sum(r.components[label] for r in expected) / len(expected)
        assert f"{label} {weight} {component:.4f} -" in cells
