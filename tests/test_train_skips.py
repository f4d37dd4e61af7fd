"""Steps whose groups are all skipped say why; a run where most steps make no update warns once, early."""

from __future__ import annotations

import io
from types import SimpleNamespace

from rich.console import Console
from tiny import TINY_RUN

from rlvr import api
from rlvr.log import read_jsonl
from rlvr.train.skips import SkipMonitor, describe_skips, skip_metrics


def _groups(*rewards: list) -> list[SimpleNamespace]:
    return [SimpleNamespace(rewards=list(r)) for r in rewards]


def test_skip_metrics_count_each_reason() -> None:
    seen = _groups([1.0, None], [0.5], [0.0, 0.0], [0.0, 0.0], [0.0, 1.0], [0.3, 0.9])
    kept = [seen[5]]
    metrics = skip_metrics(seen, kept)
    assert metrics == {
        "groups/skipped/reward_error": 1.0,
        "groups/skipped/group_size_1": 1.0,
        "groups/skipped/no_variance": 2.0,
        "groups/skipped/other": 1.0,  # informative, yet not kept (a baseline error, refill cut)
        "groups/skipped/constant_reward": 0.0,
    }
    assert describe_skips(metrics) == (
        "1 with a reward error, 1 of one completion (rollout.group_size=1), 2 with no reward variance "
        "(every completion scored 0), 1 dropped otherwise (baseline reward error or beyond the refill target)"
    )
    mixed = skip_metrics(_groups([0.0, 0.0], [1.0, 1.0]), [])
    assert "groups/skipped/constant_reward" not in mixed  # two different constants: none named
    assert describe_skips(mixed) == "2 with no reward variance (all completions of the group scored alike)"


def _monitor_lines(skipped: list[bool], steps: int) -> list[str]:
    out = io.StringIO()
    monitor = SkipMonitor(Console(file=out, width=300), steps, window=4)
    for step, skip in enumerate(skipped, start=1):
        metrics = {"groups/sampled": 2.0, "groups/skipped/reward_error": 2.0} if skip else {}
        monitor.observe(step, {**metrics, **({"update/skipped": 1.0} if skip else {})})
    return out.getvalue().splitlines()


def test_monitor_warns_once_when_more_than_half_of_the_first_steps_skip() -> None:
    lines = _monitor_lines([True, False, True, True, True, True], steps=100)
    warnings = [i for i, line in enumerate(lines) if line.startswith("warning:")]
    assert len(warnings) == 1 and lines[warnings[0] - 1].startswith("step 4: no update")  # 3 of 4: certain
    assert "reward_errors/* in metrics.jsonl" in lines[warnings[0]]
    assert sum(line.startswith("step ") for line in lines) == 5
    assert not any(
        line.startswith("warning:") for line in _monitor_lines([True, False, True, False, True], 100)
    )


def test_constant_reward_run_says_why_each_step_made_no_update(tmp_path) -> None:
    out = io.StringIO()
    overrides = [
        *TINY_RUN,
        "rewards.functions=[{name: exact_match}]",  # tiny-random never answers: always 0
        "data.eval_size=0",
        "train.steps=3",
        "train.final_checkpoint=none",
        f"output_dir={tmp_path}",
        "name=flat",
    ]
    api.train(api.load_config(None, overrides), console=Console(file=out, width=300), quiet=True)
    lines = out.getvalue().splitlines()
    why = "no update, all 2 groups skipped: 2 with no reward variance (every completion scored 0)"
    assert [line for line in lines if line.startswith("step ")] == [f"step {n}: {why}" for n in (1, 2, 3)]
    warnings = [line for line in lines if line.startswith("warning:")]
    assert len(warnings) == 1 and "2 of the first 2 steps made no update" in warnings[0]
    assert lines.index(warnings[0]) < lines.index(f"step 3: {why}")  # early: before the run ends
    assert "larger rollout.group_size" in warnings[0]
    rows = [r for r in read_jsonl(tmp_path / "flat" / "metrics.jsonl") if r["phase"] == "train"]
    assert [r["groups/skipped/no_variance"] for r in rows] == [2.0, 2.0, 2.0]
