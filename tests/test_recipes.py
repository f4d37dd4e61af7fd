"""Every preset in recipes/ loads and trains: 2 steps on tiny-random (fast), 2 on the real model (slow).

On tiny-random a preset keeps its own rewards (and shaping), each of which must score without a
reward error; a character-count reward is added beside them because tiny-random never answers, so
the recipe's own rewards alone would leave every group constant and no update would run.

Presets of methods whose context the trainer does not provide yet are strict xfails: they start
passing (and so fail the suite) the day the trainer wires the missing keyword, as a reminder to
remove the mark.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from tiny import TINY_RUN

from rlvr import api
from rlvr.config import load_config
from rlvr.config.schema import RewardItem
from rlvr.log import read_jsonl
from rlvr.rewards import sandbox

RECIPES = sorted((Path(__file__).resolve().parents[1] / "recipes").glob("*.yaml"))

# preset -> the keyword its estimator or loss needs that the trainer does not pass yet (none today)
UNWIRED: dict[str, str] = {}
NEEDS_BWRAP = {"python_tool", "coder_tester"}  # they refuse to run model-written code without bubblewrap

# no evaluation before training: the one after it exercises the same wiring (the suite's time)
TINY = [
    *(o for o in TINY_RUN if not o.startswith("rewards.functions=")),
    "train.steps=2",
    "eval.before=false",
]
LENGTH = RewardItem(name="reward_fixtures:scaled_len", label="length", params={"scale": 0.01})


def _params(slow: bool) -> list:
    params = []
    for path in RECIPES:
        marks = [pytest.mark.slow] if slow else []
        if path.stem in UNWIRED:
            marks.append(pytest.mark.xfail(strict=True, raises=TypeError, reason=UNWIRED[path.stem]))
        if path.stem in NEEDS_BWRAP and sandbox.backend_name() != "bwrap":
            marks.append(pytest.mark.skip(reason="the python tool runs code only in bubblewrap"))
        params.append(pytest.param(path, id=path.stem, marks=marks))
    return params


# what a stage recipe needs that no recipe can ship: a chat-data file, a teacher (a path the user gives)
CHAT_ROWS = [
    {
        "messages": [
            {"role": "user", "content": f"What is {a} + {b}?"},
            {"role": "assistant", "content": f"{a + b}"},
        ]
    }
    for a, b in [(1, 2), (3, 4), (5, 6), (7, 8)]
]


def _inputs(name: str, tmp_path: Path, teacher: str) -> list[str]:
    chat = tmp_path / "chat.jsonl"
    chat.write_text("\n".join(json.dumps(r) for r in CHAT_ROWS) + "\n")
    if name == "astar_po":  # stage 1 of A*-PO: V* of every training prompt, from the reference's samples
        from rlvr.algo.astar_po import collect_values

        values = tmp_path / "astar_po_values.jsonl"
        recipe = next(p for p in RECIPES if p.stem == name)
        cfg = load_config(recipe, [*TINY, f"output_dir={tmp_path}", "name=values"])
        cfg.rewards.functions = [*cfg.rewards.functions, LENGTH]
        collect_values(cfg, values, samples=2)
        return [f"algo.advantage_params.values_path={values}"]
    return {
        "sft": [f"sft.path={chat}"],
        "kd": [f"distill.path={chat}", f"distill.teacher={teacher}"],
        "opd": [f"distill.teacher={teacher}"],
    }.get(name, [])


def _check_run(run_dir: Path) -> None:
    rows = [r for r in read_jsonl(run_dir / "metrics.jsonl") if r["phase"] == "train"]
    assert [r["step"] for r in rows] == [1, 2]
    updated = [r for r in rows if "update/loss" in r]
    assert updated, "no step reached the update"
    errors = {k: v for r in rows for k, v in r.items() if k.startswith("reward_errors/") and v}
    assert all(r.get("reward/errors", 0) == 0 for r in rows), f"the recipe's rewards failed: {errors}"
    for row in updated:
        assert all(math.isfinite(v) for k, v in row.items() if k.startswith("update/"))


def test_every_unwired_preset_exists() -> None:
    assert set(UNWIRED) <= {p.stem for p in RECIPES}


@pytest.mark.parametrize("path", _params(slow=False))
def test_recipe_trains_on_tiny_random(path: Path, tmp_path) -> None:
    inputs = _inputs(path.stem, tmp_path, "tiny-random")
    if load_config(path).model.name == "tiny-smolvlm":  # images need a VLM: the tiny random one
        inputs.append("model.name=tiny-random-vlm")
    cfg = load_config(path, [*TINY, f"output_dir={tmp_path}", "name=run", *inputs])
    cfg.rewards.functions = [*cfg.rewards.functions, LENGTH]  # the recipe's own, plus one that varies
    if cfg.stage == "rft":  # tiny-random never answers nor stops: accept every sample, cut ones too
        cfg.rft.min_reward, cfg.rft.keep_truncated = 0.0, True
    for item in cfg.stages:  # a pipeline: every stage two steps, whatever its own settings say
        item.set.update({"train.steps": 2, "train.time_limit_s": None, "data.train_size": 16})
    api.train(cfg, quiet=True)
    for run_dir in [tmp_path / "run" / item.name for item in cfg.stages] or [tmp_path / "run"]:
        _check_run(run_dir)


@pytest.mark.parametrize("path", _params(slow=True))
def test_recipe_trains_on_the_real_model(path: Path, tmp_path) -> None:
    overrides = [
        "data.train_size=64",
        "data.eval_size=4",
        "rollout.prompts_per_step=2",
        "rollout.group_size=4",
        "rollout.max_new_tokens=16",
        "train.steps=2",
        "train.time_limit_s=null",
        f"output_dir={tmp_path}",
        "name=run",
        *_inputs(path.stem, tmp_path, "smollm2-135m-instruct"),
    ]
    cfg = load_config(path, overrides)
    for item in cfg.stages:  # a pipeline: every stage two steps
        item.set.update({"train.steps": 2, "train.time_limit_s": None})
    api.train(cfg, quiet=True)
    for run_dir in [tmp_path / "run" / item.name for item in cfg.stages] or [tmp_path / "run"]:
        rows = [r for r in read_jsonl(run_dir / "metrics.jsonl") if r["phase"] == "train"]
        assert [r["step"] for r in rows] == [1, 2]
        for row in rows:
            assert all(math.isfinite(v) for k, v in row.items() if k.startswith("update/"))
