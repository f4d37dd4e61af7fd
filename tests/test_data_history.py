"""Prompt history: pass rates, streaks, unscored members, rows, and an exact state round trip."""

from __future__ import annotations

import json

from rlvr.data.history import KEEP_STEPS, PromptHistory
from rlvr.trajectory import Segment, Trajectory, TrajectoryGroup


def _group(index: int, correct: list[bool | None], version: int = 0) -> TrajectoryGroup:
    """A group of example ``index``: one member per flag (None: no verdict)."""
    members = []
    for flag in correct:
        t = Trajectory([1], [Segment("sampled", [2], [-0.5])], "stop", example_index=index)
        t.policy_version = version
        if flag is None:
            t.reward, t.errors = None, {"acc": "timeout"}
        else:
            t.reward, t.rewards = float(flag), {"acc": float(flag)}
        members.append(t)
    return TrajectoryGroup(index, members)


def test_pass_rates_and_streaks_follow_the_groups() -> None:
    h = PromptHistory(10, "acc")
    h.record([_group(3, [False] * 4), _group(5, [True, True, True, True])], step=1)
    h.record([_group(3, [False] * 4), _group(5, [True, False, True, True])], step=2)
    h.record([_group(3, [True, False, False, False], version=2)], step=3)
    r3, r5 = h.get(3), h.get(5)
    assert (r3.groups, r3.steps, r3.correct, r3.scored) == (3, [1, 2, 3], 1, 12)
    assert r3.pass_rate == 1 / 12 and (r3.first_pass, r3.last_pass) == (0.0, 0.25)
    assert r3.hard_streak == 0  # 1 of 4 correct is above hard_at (0.11): the all-wrong streak ends
    assert r3.version == 2
    assert (r5.easy_streak, r5.hard_streak, r5.last_pass) == (0, 0, 0.75)
    assert h.get(7).groups == 0 and h.get(7).pass_rate is None
    summary = h.summary()
    assert summary == {"history/seen": 2.0, "history/solved": 2.0, "history/flipped": 1.0}


def test_streaks_count_consecutive_groups() -> None:
    h = PromptHistory(4, "acc")
    for step in range(1, 4):
        h.record([_group(0, [False] * 4), _group(1, [True] * 4)], step=step)
    assert (h.get(0).hard_streak, h.get(0).easy_streak) == (3, 0)
    assert (h.get(1).easy_streak, h.get(1).hard_streak) == (3, 0)
    assert h.get(0).zero_variance_streak == 3


def test_unscored_members_count_in_neither_pass_rate_nor_streak() -> None:
    h = PromptHistory(4, "acc")
    h.record([_group(0, [True, None, None, True])], step=1)
    assert (h.get(0).correct, h.get(0).scored, h.get(0).easy_streak) == (2, 2, 1)
    h.record([_group(0, [None] * 4)], step=2)  # nothing scored: no evidence, the streak stands
    assert (h.get(0).scored, h.get(0).easy_streak, h.get(0).groups) == (2, 1, 2)
    rows = h.take_rows()
    assert [r["pass"] for r in rows] == [1.0, None] and [r["unscored"] for r in rows] == [2, 4]
    assert h.take_rows() == []


def test_steps_keep_the_latest_only() -> None:
    h = PromptHistory(1, "acc")
    for step in range(1, KEEP_STEPS + 5):
        h.record([_group(0, [True, False])], step=step)
    assert h.get(0).steps == list(range(5, KEEP_STEPS + 5))


def test_state_round_trips_through_json_exactly() -> None:
    h = PromptHistory(10, "acc")
    h.record([_group(2, [True, False, None]), _group(9, [False, False])], step=4)
    h.note_skipped(9)
    h.note_skipped(6)
    restored = PromptHistory(10, "acc")
    restored.load_state(json.loads(json.dumps(h.state())))
    assert restored.records == h.records
    assert restored.get(6).skipped == 1 and restored.get(6).groups == 0


def test_the_report_draws_the_histogram_and_lists_flipped_prompts(tmp_path) -> None:
    from rlvr.report.history import flipped, histogram, history_block

    rows = [
        {"step": 1, "example": 4, "id": "a-4", "pass": 0.0},
        {"step": 1, "example": 5, "id": "a-5", "pass": 1.0},
        {"step": 2, "example": 6, "id": "a-6", "pass": 0.5},
        {"step": 3, "example": 4, "id": "a-4", "pass": 0.0},
        {"step": 4, "example": 4, "id": "a-4", "pass": 0.25},
        {"step": 4, "example": 5, "id": "a-5", "pass": None},  # unscored: in no bucket
        {"step": 4, "example": 7, "id": "a-7", "pass": 0.0},
    ]
    assert histogram(rows, windows=2) == [(1, 2, [1, 0, 1, 0, 0, 1]), (3, 4, [2, 1, 0, 0, 0, 0])]
    assert flipped(rows) == [
        {"example": 4, "id": "a-4", "first_step": 1, "solved_step": 4, "last_pass": 0.25, "groups": 3}
    ]
    (tmp_path / "prompt_history.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    html = history_block(tmp_path)
    assert "Unsolved → solved: 1 of 4 prompts" in html and "a-4" in html and "<svg" in html


def test_a_bad_history_row_is_named(tmp_path) -> None:
    import pytest

    from rlvr.errors import RlvrError
    from rlvr.report.history import history_block

    (tmp_path / "prompt_history.jsonl").write_text('{"step": 1, "example": 2, "pass": 0.5}\n{"step": 1}\n')
    with pytest.raises(RlvrError, match=r"prompt_history.jsonl:2: 'step' and 'example'"):
        history_block(tmp_path)
    (tmp_path / "prompt_history.jsonl").write_text('{"step": 1, "example": 2, "pass": 7}\n')
    with pytest.raises(RlvrError, match=r":1: 'pass' must be a number"):
        history_block(tmp_path)
