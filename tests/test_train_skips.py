"""Steps whose groups are all skipped say why; a run where most steps make no update warns once, early."""

from __future__ import annotations

import io
from types import SimpleNamespace

from rich.console import Console
from tiny import TINY_RUN

from rlvr import api
from rlvr.log import read_jsonl
from rlvr.train.loop.skips import SkipMonitor, describe_skips, skip_metrics


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
    api.train(api.load_config(None, overrides), console=Console(file=out, width=1000), quiet=True)
    lines = out.getvalue().splitlines()
    # tiny-random never stops before rollout.max_new_tokens=8: the lines say so as well
    cut = "100% of completions were cut at rollout.max_new_tokens=8 (finish_reason length)"
    why = f"no update, all 2 groups skipped: 2 with no reward variance (every completion scored 0); {cut}"
    assert [line for line in lines if line.startswith("step ")] == [f"step {n}: {why}" for n in (1, 2, 3)]
    warnings = [line for line in lines if line.startswith("warning:") and "made no update" in line]
    assert len(warnings) == 1 and "2 of the first 2 steps made no update" in warnings[0]
    assert lines.index(warnings[0]) < lines.index(f"step 3: {why}")  # early: before the run ends
    assert "larger rollout.group_size" in warnings[0]
    assert "100% of completions were cut at rollout.max_new_tokens=8: raise it" in warnings[0]
    rows = [r for r in read_jsonl(tmp_path / "flat" / "metrics.jsonl") if r["phase"] == "train"]
    assert [r["groups/skipped/no_variance"] for r in rows] == [2.0, 2.0, 2.0]


def test_monitor_warns_once_when_most_completions_are_cut_at_max_new_tokens() -> None:
    out = io.StringIO()
    monitor = SkipMonitor(Console(file=out, width=1000), 100, max_new_tokens=24)
    for step, rate in enumerate([0.5, 0.3, 0.8, 1.0], start=1):  # more than half: step 3 first
        monitor.observe(step, {"completion/truncated_rate": rate})
    lines = out.getvalue().splitlines()
    assert lines == [
        "warning: step 3: 80% of completions were cut at rollout.max_new_tokens=24 (finish_reason "
        "length); a cut completion rarely holds its answer and scores as wrong: raise rollout.max_new_tokens"
    ]


def test_word_problems_cut_short_say_so_naming_max_new_tokens(tmp_path) -> None:
    """A user's JSONL of word problems with too few new tokens (the old default was 24): every
    completion is cut before its answer, every group scores alike and is skipped; the console names
    rollout.max_new_tokens instead of only group size / easier data / partial credit."""
    import json

    problems = [
        ("Tom has 3 apples and buys 5 more. How many apples does he have now?", "8"),
        ("A box holds 12 pencils. How many pencils are in 4 boxes?", "48"),
        ("Sara read 15 pages on Monday and 22 on Tuesday. How many pages did she read?", "37"),
        ("There are 30 students and 6 leave. How many students remain?", "24"),
        ("A pizza is cut into 8 slices and 3 are eaten. How many slices are left?", "5"),
    ]
    data = tmp_path / "word_problems.jsonl"
    data.write_text("".join(json.dumps({"question": q, "answer": a}) + "\n" for q, a in problems))
    out = io.StringIO()
    overrides = [
        *(o for o in TINY_RUN if not o.startswith("rewards.functions=")),  # the file's default: math
        f"data.path={data}",
        "data.eval_size=1",
        "eval.before=false",
        "train.steps=2",
        "train.final_checkpoint=none",
        f"output_dir={tmp_path}",
        "name=words",
    ]
    api.train(api.load_config(None, overrides), console=Console(file=out, width=1000), quiet=True)
    lines = out.getvalue().splitlines()
    cut = [line for line in lines if line.startswith("warning: step 1: 100% of completions were cut")]
    assert len(cut) == 1 and "rollout.max_new_tokens=8" in cut[0], lines
    skipped = [line for line in lines if line.startswith("warning:") and "made no update" in line]
    assert len(skipped) == 1 and "cut at rollout.max_new_tokens=8: raise it" in skipped[0]
    assert not any(line.strip().startswith("limits") for line in lines)  # no demo time limits on a file
