"""Selection before rollout (rlvr.data.selection, GRESO): skip probabilities from a prompt's
streaks, exploration, adaptation of the bases, refill, exact resume and the wiring into a run."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from tiny import TINY_RUN

from rlvr import api
from rlvr.config import load_config
from rlvr.config.data_plan import SelectionConfig
from rlvr.data.draw import UniformOrder
from rlvr.data.history import PromptHistory, PromptRecord
from rlvr.data.selection import GresoSelection
from rlvr.errors import RlvrError
from rlvr.log import read_jsonl
from rlvr.trajectory import Trajectory, TrajectoryGroup

GROUP = 8


class Cycle:
    """An order that draws the same indices over and over (counts per index are then exact)."""

    def __init__(self, indices: list[int]) -> None:
        self.indices, self.position = indices, 0

    def take(self, count: int) -> list[int]:
        out = [self.indices[(self.position + k) % len(self.indices)] for k in range(count)]
        self.position += count
        return out

    def observe(self, groups: list[TrajectoryGroup]) -> None:
        pass

    def state(self) -> dict[str, Any]:
        return {"position": self.position}

    def load_state(self, state: dict[str, Any]) -> None:
        self.position = state["position"]

    def metrics(self) -> dict[str, float]:
        return {"order/position": float(self.position)}


def history(**streaks: tuple[int, int]) -> PromptHistory:
    """A history whose example ``e<i>`` has ``(easy_streak, hard_streak)``."""
    h = PromptHistory(100, "c")
    for name, (easy, hard) in streaks.items():
        h.records[int(name[1:])] = PromptRecord(groups=max(easy, hard), easy_streak=easy, hard_streak=hard)
    return h


def group(index: int, correct: int, unscored: int = 0, size: int = GROUP) -> TrajectoryGroup:
    """A group of ``size``: ``correct`` right answers, ``unscored`` without a verdict, the rest wrong."""

    def member(k: int) -> Trajectory:
        if k < unscored:
            return Trajectory([], [], "stop", reward=None, errors={"c": "timeout"})
        value = 1.0 if k < unscored + correct else 0.0
        return Trajectory([], [], "stop", reward=value, rewards={"c": value})

    return TrajectoryGroup(index, [member(k) for k in range(size)])


def within_binomial(k: int, n: int, p: float) -> bool:
    return abs(k - n * p) <= 5 * math.sqrt(n * p * (1 - p)) + 1


def test_rollout_probability_is_p_to_the_streak_with_an_exploration_floor() -> None:
    cfg = SelectionConfig(kind="greso", p_start=0.5, explore=0.01)
    sel = GresoSelection(cfg, Cycle([0]), history(e0=(2, 0), e1=(0, 3), e3=(40, 0), e4=(0, 0)), 0, GROUP)
    assert sel.rollout_probability(0) == pytest.approx(0.25)  # easy: 0.5 ** 2
    assert sel.rollout_probability(1) == pytest.approx(0.125)  # hard: 0.5 ** 3
    assert sel.rollout_probability(2) == 1.0  # never rolled out
    assert sel.rollout_probability(3) == pytest.approx(0.01)  # 0.5 ** 40 is below the floor
    assert sel.rollout_probability(4) == 1.0  # rolled out, last group mixed
    sel.p_easy, sel.p_hard = 0.9, 0.2  # each streak reads its own base
    assert sel.rollout_probability(0) == pytest.approx(0.81)
    assert sel.rollout_probability(1) == pytest.approx(0.01)  # 0.2 ** 3 = 0.008: the floor


def test_skips_match_the_probabilities_and_are_counted_in_history_and_metrics() -> None:
    h = history(e0=(1, 0), e1=(0, 2), e3=(3, 0))  # rolled out with 0.5, 0.25, (none) 1, 0.125
    sel = GresoSelection(SelectionConfig(kind="greso", max_draws=1), Cycle([0, 1, 2, 3]), h, 7, GROUP)
    rounds = 3000
    admitted = {i: 0 for i in range(4)}
    for _ in range(rounds):
        for i in sel.take(4):
            admitted[i] += 1
    for index, p in {0: 0.5, 1: 0.25, 2: 1.0, 3: 0.125}.items():
        assert within_binomial(admitted[index], rounds, p), (index, admitted[index])
        assert h.get(index).skipped == rounds - admitted[index]  # every skip noted, nothing more
    skipped = 4 * rounds - sum(admitted.values())
    m = sel.metrics()
    assert m["selection/skipped"] == skipped
    assert m["selection/rollouts_saved"] == m["selection/rollouts_saved_total"] == skipped * GROUP
    assert m["selection/draw_rounds"] == rounds  # max_draws=1: one round per take
    assert m["selection/forced"] == 0.0
    assert m["selection/p_easy"] == m["selection/p_hard"] == 0.5
    assert m["order/position"] == 4 * rounds  # the order's own metrics are merged in
    # metrics are per interval; the total is not
    sel.take(4)
    again = sel.metrics()
    assert again["selection/skipped"] <= 3 and again["selection/draw_rounds"] == 1
    assert again["selection/rollouts_saved_total"] == (skipped + again["selection/skipped"]) * GROUP


def test_a_prompt_with_a_huge_streak_is_still_explored_at_the_floor_rate() -> None:
    h = history(e5=(0, 500), e6=(900, 0))
    cfg = SelectionConfig(kind="greso", explore=0.05, max_draws=1)
    sel = GresoSelection(cfg, Cycle([5, 6, 9]), h, 3, GROUP)  # 9: no history, always admitted
    rounds = 4000
    counts = {5: 0, 6: 0, 9: 0}
    for _ in range(rounds):
        for i in sel.take(3):
            counts[i] += 1
    assert counts[9] == rounds
    assert within_binomial(counts[5], rounds, 0.05), counts
    assert within_binomial(counts[6], rounds, 0.05), counts


def test_the_bases_move_toward_the_target_zero_variance_shares() -> None:
    cfg = SelectionConfig(kind="greso", p_start=0.5, p_step=0.1, p_min=0.2, p_max=0.8)
    # targets: 0.25 * 1/3 all-correct, 0.25 * 2/3 all-wrong
    sel = GresoSelection(cfg, Cycle([0]), PromptHistory(10, "c"), 0, GROUP)
    # half the groups all correct (above its target), none all wrong (below): skip easy ones more
    sel.observe([group(0, 8), group(1, 8), group(2, 4), group(3, 7)])
    assert (sel.p_easy, sel.p_hard) == pytest.approx((0.4, 0.6))
    # 1/8 correct is above hard_at (0.11): not all wrong; 7/8 is below easy_at: not all correct
    sel.observe([group(0, 1), group(1, 7), group(2, 3)])
    assert (sel.p_easy, sel.p_hard) == pytest.approx((0.5, 0.7))
    # 1 of 8 groups each way: above the all-correct target (1/12), below the all-wrong one (1/6)
    sel.observe([group(0, 8), group(1, 0), *(group(i, 4) for i in range(2, 8))])
    assert (sel.p_easy, sel.p_hard) == pytest.approx((0.4, 0.8))
    # all wrong above its target: hard prompts are skipped more; an unscored member does not count
    # (6 of 6 scored correct is all correct), a group with no scored member is not counted at all
    sel.observe([group(0, 0), group(1, 0), group(2, 6, unscored=2), group(3, 0, unscored=GROUP)])
    assert (sel.p_easy, sel.p_hard) == pytest.approx((0.3, 0.7))
    before = sel.p_hard
    sel.observe([group(4, 0, unscored=GROUP)])  # nothing scored: no evidence, no move
    assert sel.p_hard == before
    for _ in range(10):  # clamped to [p_min, p_max]
        sel.observe([group(0, 0)])
    assert (sel.p_easy, sel.p_hard) == pytest.approx((0.8, 0.2))
    m = sel.metrics()
    assert m["selection/p_easy"] == pytest.approx(0.8) and m["selection/p_hard"] == pytest.approx(0.2)
    # a lower base means a higher skip probability for the same streak
    sel.history.records[0] = PromptRecord(groups=1, hard_streak=1)
    assert sel.rollout_probability(0) == pytest.approx(0.2)


def test_skipped_prompts_are_refilled_from_the_order() -> None:
    streaked = {f"e{i}": (0, 1000) for i in range(0, 20, 2)}  # every even example: all wrong, forever
    h = history(**streaked)
    cfg = SelectionConfig(kind="greso", explore=0.0)
    sel = GresoSelection(cfg, UniformOrder(20, 0), h, 1, GROUP)
    batch = sel.take(6)
    assert len(batch) == 6 and all(i % 2 for i in batch)
    m = sel.metrics()
    assert m["selection/draw_rounds"] > 1 and m["selection/skipped"] > 0
    assert m["selection/skipped"] == sum(h.get(i).skipped for i in range(0, 20, 2))
    assert m["selection/forced"] == 0.0


def test_when_nothing_passes_the_last_candidates_are_rolled_out_and_counted() -> None:
    h = history(**{f"e{i}": (1000, 0) for i in range(10)})
    sel = GresoSelection(
        SelectionConfig(kind="greso", explore=0.0, max_draws=3), Cycle(list(range(10))), h, 0, 4
    )
    batch = sel.take(3)
    assert batch == [6, 7, 8]  # the third round's candidates
    m = sel.metrics()
    assert m["selection/forced"] == 3 and m["selection/skipped"] == 6 and m["selection/draw_rounds"] == 3
    assert [h.get(i).skipped for i in range(10)] == [1] * 6 + [0] * 4  # the forced ones were not skipped


def test_state_round_trips_exactly_and_resume_continues_identically() -> None:
    cfg = SelectionConfig(kind="greso", p_step=0.05)

    def fresh() -> tuple[GresoSelection, PromptHistory]:
        h = history(**{f"e{i}": ((i % 3), (i % 3 == 0) * 2) for i in range(1, 30)})
        return GresoSelection(cfg, UniformOrder(30, 11), h, 5, GROUP), h

    def step(sel: GresoSelection, k: int) -> list[int]:
        batch = sel.take(5)
        # alternate all-correct and mixed batches so the bases drift away from p_start
        sel.observe([group(i, GROUP if k % 2 else 3) for i in batch])
        return batch

    a, ha = fresh()
    for k in range(6):
        step(a, k)
    saved = json.loads(json.dumps({"sampler": a.state(), "history": ha.state()}))  # as state.json
    assert saved["sampler"] == a.state()
    assert (a.p_easy, a.p_hard) != (cfg.p_start, cfg.p_start)
    first = [step(a, k) for k in range(6, 30)]
    b, hb = fresh()
    hb.load_state(saved["history"])
    b.load_state(saved["sampler"])
    second = [step(b, k) for k in range(6, 30)]
    assert second == first
    assert (b.p_easy, b.p_hard) == (a.p_easy, a.p_hard)
    assert b.state() == a.state()
    assert b.metrics()["selection/rollouts_saved_total"] == a.metrics()["selection/rollouts_saved_total"]


def test_the_order_state_of_a_run_without_selection_resumes_the_order() -> None:
    plain = UniformOrder(30, 2)
    plain.take(7)
    sel = GresoSelection(SelectionConfig(kind="greso"), UniformOrder(30, 2), PromptHistory(30, "c"), 0, GROUP)
    sel.load_state(json.loads(json.dumps(plain.state())))
    assert sel.take(5) == plain.take(5)  # no history: nothing is skipped


@pytest.mark.parametrize(
    ("override", "key"),
    [
        (["data.selection.p_min=0.6", "data.selection.p_max=0.6", "data.selection.p_start=0.6"], "p_min"),
        (["data.selection.p_start=0.99"], "p_start"),
        (["data.selection.hard_at=0.99"], "hard_at"),
    ],
)
def test_bad_selection_config_names_the_key(override: list[str], key: str) -> None:
    with pytest.raises(RlvrError, match=rf"data\.selection\.{key} \(\S+\) must"):
        load_config(None, override)


def test_a_run_with_greso_logs_selection_and_records_skips_in_the_checkpoint(tmp_path) -> None:
    # a constant reward: every group is all wrong, so after the first epoch over the 4 training
    # prompts each has a hard streak and is skipped with probability 1 - 0.05 ** streak
    cfg = load_config(
        None,
        [
            *TINY_RUN,
            f"output_dir={tmp_path}",
            "name=greso",
            "data.train_size=4",
            "data.eval_size=0",
            "eval.before=false",
            "rewards.functions=[{name: 'reward_fixtures:scaled_len', params: {scale: 0.0}}]",
            "algo.dynamic_sampling=false",
            "data.selection.kind=greso",
            "data.selection.p_start=0.05",
            "train.steps=3",
            "train.save_every=3",
        ],
    )
    api.train(cfg, quiet=True)
    run = tmp_path / "greso"
    rows = [r for r in read_jsonl(run / "metrics.jsonl") if r["phase"] == "train"]
    assert [r["step"] for r in rows] == [1, 2, 3]
    keys = {"selection/skipped", "selection/rollouts_saved", "selection/rollouts_saved_total"}
    keys |= {"selection/p_easy", "selection/p_hard", "selection/draw_rounds"}
    assert all(keys <= set(r) for r in rows)
    assert rows[0]["selection/skipped"] == 0  # nothing has a history yet
    skipped = sum(r["selection/skipped"] for r in rows)
    assert skipped > 0
    assert rows[-1]["selection/rollouts_saved_total"] == skipped * 4  # rollout.group_size=4
    # every group all wrong (above the target): p_hard stays at p_min; none all correct: p_easy rises
    assert all(r["selection/p_hard"] == pytest.approx(0.05) for r in rows)
    assert [r["selection/p_easy"] for r in rows] == pytest.approx([0.06, 0.07, 0.08])
    state = json.loads((run / "checkpoints" / "step-000003" / "state.json").read_text())
    assert sum(r["skipped"] for r in state["history"].values()) == skipped
    assert state["sampler"]["selection"]["skipped_total"] == skipped and "inner" in state["sampler"]


def test_the_reward_signal_counts_runs_of_equal_total_rewards() -> None:
    """``signal: reward``: a group of wrong answers whose total rewards differ (partial credit)
    breaks the streak and is rolled out; one whose rewards are all equal extends it. Planted: the
    reward signal reading the correctness streaks, or the flat check ignoring the totals."""
    cfg = SelectionConfig(kind="greso", signal="reward", p_start=0.5, explore=0.01)
    h = PromptHistory(10, "c")
    wrong_but_graded = group(1, correct=0)
    for k, t in enumerate(wrong_but_graded.trajectories):
        t.reward = 0.1 * k  # all wrong, rewards differ: signal for the learner
    for step in (1, 2, 3):
        h.record([group(0, correct=0), wrong_but_graded, group(2, correct=GROUP)], step=step)
    sel = GresoSelection(cfg, Cycle([0, 1, 2]), h, seed=0, group_size=GROUP)
    assert h.get(1).hard_streak == 3  # by correctness it is a hard streak of 3 ...
    assert sel.rollout_probability(1) == 1.0  # ... but its rewards varied: always rolled out
    assert sel.rollout_probability(0) == pytest.approx(0.5**3)  # flat and wrong: p_hard
    sel.p_easy = 0.8
    assert sel.rollout_probability(2) == pytest.approx(0.8**3)  # flat and right: p_easy
    # the bases react to flat groups: both kinds above target here, both bases drop
    sel.observe([group(0, correct=0), wrong_but_graded, group(2, correct=GROUP)])
    assert sel.p_hard == pytest.approx(0.49) and sel.p_easy == pytest.approx(0.79)
    sel.observe([wrong_but_graded] * 3)  # no flat group: both below target, both bases rise
    assert sel.p_hard == pytest.approx(0.5) and sel.p_easy == pytest.approx(0.8)
