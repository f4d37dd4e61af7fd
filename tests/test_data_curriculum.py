"""Curricula (rlvr.data.curriculum): schedule pacing, band weights and retirement of mastered
prompts, the bandit's Q and its draws, exact resume, key errors, the held-out task config, and the
wiring into a run."""

from __future__ import annotations

import json
import math

import pytest
from tiny import TINY_RUN

from rlvr import api
from rlvr.config import load_config
from rlvr.config.data_plan import CurriculumConfig
from rlvr.data.curriculum import BanditOrder, BandOrder, ScheduleOrder, build_curriculum, difficulties
from rlvr.data.example import Example
from rlvr.data.history import PromptHistory, PromptRecord
from rlvr.errors import RlvrError
from rlvr.log import read_jsonl
from rlvr.trajectory import Trajectory, TrajectoryGroup


def examples(levels: list[int], **extra: object) -> list[Example]:
    """Example ``i`` has ``metadata.level = levels[i]`` (and ``metadata.cat``: ``extra`` or even/odd)."""
    return [
        Example(id=f"q{i}", prompt=[], metadata={"level": lvl, "cat": extra.get("cat", "ab"[lvl % 2])})
        for i, lvl in enumerate(levels)
    ]


def group(index: int, rewards: list[float | None]) -> TrajectoryGroup:
    """A group of ``index`` with these rewards (None: unscored); correct means reward 1."""

    def member(r: float | None) -> Trajectory:
        if r is None:
            return Trajectory([], [], "stop", reward=None, errors={"c": "timeout"})
        return Trajectory([], [], "stop", reward=r, rewards={"c": r})

    return TrajectoryGroup(index, [member(r) for r in rewards])


def within_binomial(k: int, n: int, p: float) -> bool:
    return abs(k - n * p) <= 5 * math.sqrt(n * p * (1 - p)) + 1


def schedule(levels: list[int], **params: object) -> tuple[ScheduleOrder, PromptHistory]:
    h = PromptHistory(len(levels), "c")
    cfg = CurriculumConfig(kind="schedule", key="metadata.level", params=params)
    draw = build_curriculum(cfg, examples(levels), h, seed=3)
    assert isinstance(draw, ScheduleOrder)
    return draw, h


def step(draw, h: PromptHistory, t: int, indices: list[int], rewards=(1.0, 0.0)) -> None:
    """What the collector does with the groups of step ``t``: record them, then show them to the draw."""
    groups = [group(i, list(rewards)) for i in indices]
    h.record(groups, t)
    draw.observe(groups)


# ----------------------------------------------------------------------------------- schedule
# 20 examples whose levels are a permutation of 0..19, so "the easiest k" is "level < k"
LEVELS = [7, 3, 19, 0, 12, 5, 16, 1, 9, 14, 2, 18, 6, 11, 4, 17, 8, 13, 10, 15]


@pytest.mark.parametrize(
    ("shape", "open_counts"),
    [
        # linear: 0.25 + 0.75·t/4 of 20, rounded up: 5, 8.75, 12.5, 16.25, 20
        ("linear", [5, 9, 13, 17, 20, 20]),
        # root: sqrt(0.0625 + 0.9375·t/4) of 20: 5, 10.9, 14.6, 17.5, 20
        ("root", [5, 11, 15, 18, 20, 20]),
    ],
)
def test_schedule_opens_the_hand_computed_share_of_the_easiest_examples(shape, open_counts) -> None:
    draw, h = schedule(LEVELS, start=0.25, steps=4, shape=shape)
    for t, n_open in enumerate(open_counts):
        taken = draw.take(n_open)  # a whole pass over the open pool: each open example once
        assert sorted(LEVELS[i] for i in taken) == list(range(n_open)), t
        assert draw.metrics()["curriculum/available"] == pytest.approx(n_open / 20)
        step(draw, h, t + 1, taken[:1])  # the collector's step t + 1 was observed


def test_schedule_draws_without_replacement_within_a_pass_and_reports_mean_difficulty() -> None:
    draw, h = schedule(LEVELS, start=0.25, steps=100)  # 5 open for the first steps
    first = [i for _ in range(5) for i in draw.take(1)]
    second = [i for _ in range(5) for i in draw.take(1)]
    easiest = sorted(LEVELS.index(lvl) for lvl in range(5))
    assert sorted(first) == easiest and sorted(second) == easiest  # no repeat before the pass ends
    assert first != second  # each pass its own seeded order
    assert draw.metrics()["curriculum/mean_difficulty"] == pytest.approx(2.0)  # levels 0..4, twice
    batch = draw.take(3) + draw.take(3)  # a batch never repeats a prompt while the pool has others
    assert len(set(batch[:3])) == 3 and len(set(batch[3:])) == 3


def test_several_keys_sum_their_normalised_ranks() -> None:
    rows = [
        Example(id=f"q{i}", prompt=[], metadata={"a": a, "b": b})
        for i, (a, b) in enumerate([(1, 10), (2, 10), (3, 30), (2, 20)])
    ]
    # a: 1, 2, 3 -> 0, 0.5, 1; b: 10, 20, 30 -> 0, 0.5, 1
    assert difficulties(rows, ["metadata.a", "metadata.b"]) == [0.0, 0.5, 2.0, 1.0]
    assert difficulties(rows, ["metadata.b"]) == [10.0, 10.0, 30.0, 20.0]


def test_a_key_a_row_lacks_names_the_row_and_the_key() -> None:
    rows = examples([1, 2, 3])
    rows[1].metadata = {"other": 1}
    rows[1].origin = "data.jsonl line 2"
    h = PromptHistory(3, "c")
    for cfg in (
        CurriculumConfig(kind="schedule", key="metadata.level", params={"steps": 2}),
        CurriculumConfig(kind="bandit", key="metadata.level"),
    ):
        with pytest.raises(RlvrError, match=r"data\.jsonl line 2 has no metadata\.level"):
            build_curriculum(cfg, rows, h, 0)
    rows[1].metadata = {"level": "hard"}
    cfg = CurriculumConfig(kind="schedule", key="metadata.level", params={"steps": 2})
    with pytest.raises(RlvrError, match=r"data\.jsonl line 2 has 'hard', not a finite number"):
        build_curriculum(cfg, rows, h, 0)
    rows[1].metadata = {"level": {"nested": 1}}
    with pytest.raises(RlvrError, match=r"data\.jsonl line 2 has a dict there"):
        build_curriculum(CurriculumConfig(kind="bandit", key="metadata.level"), rows, h, 0)


def test_config_errors_name_the_keys() -> None:
    def refused(*overrides: str) -> str:
        with pytest.raises(RlvrError) as err:
            load_config(None, [*TINY_RUN, *overrides])
        return str(err.value)

    mix = "data.sources=[{name: a, task: chain_sum}, {name: b, task: basic_arithmetic}]"
    message = refused("data.curriculum.kind=band", mix)
    assert "data.curriculum.kind=band" in message and "data.sources" in message
    assert "params.steps is required" in refused(
        "data.curriculum.kind=schedule", "data.curriculum.key=data_source"
    )
    assert "params.retire: not a param of kind=band" in refused(
        "data.curriculum.kind=band", "data.curriculum.params={retire: 3}"
    )
    assert "kind=band weights prompts by their measured pass rate" in refused(
        "data.curriculum.kind=band", "data.curriculum.key=data_source"
    )
    assert "key=pass_rate with kind=bandit" in refused(
        "data.curriculum.kind=bandit", "data.curriculum.key=pass_rate"
    )
    # defaults are filled in, so config.yaml shows the values a run used
    cfg = load_config(None, [*TINY_RUN, "data.curriculum.kind=band"])
    assert cfg.data.curriculum.params["w_hard"] == 0.2 and cfg.data.curriculum.params["retire_after"] == 2


# ----------------------------------------------------------------------------------- band
def band_history() -> PromptHistory:
    h = PromptHistory(8, "c")
    h.records = {
        # 0: never rolled out (unseen)
        1: PromptRecord(groups=1, correct=0, scored=4, last_pass=0.0),  # hard
        2: PromptRecord(groups=1, correct=1, scored=4, last_pass=0.25),  # hard (<= low)
        3: PromptRecord(groups=1, correct=2, scored=4, last_pass=0.5),  # band
        4: PromptRecord(groups=1, correct=3, scored=4, last_pass=0.75),  # band (<= high)
        5: PromptRecord(groups=1, correct=4, scored=4, last_pass=1.0, easy_streak=1),  # easy
        6: PromptRecord(groups=2, correct=8, scored=8, last_pass=1.0, easy_streak=2),  # retired
        7: PromptRecord(groups=2, correct=4, scored=8, last_pass=1.0, easy_streak=1),  # easy; mean 0.5
    }
    return h


def test_band_weights_follow_the_measured_pass_rate() -> None:
    h = band_history()
    draw = BandOrder(8, h, 0)  # prime-rl's weights: unseen 1, hard 0.2, band 1, easy 0.2; retired 0.02
    assert [draw.classify(i) for i in range(8)] == [
        "unseen",
        "hard",
        "hard",
        "band",
        "band",
        "easy",
        "retired",
        "easy",
    ]
    assert [draw.weight(i) for i in range(8)] == [1.0, 0.2, 0.2, 1.0, 1.0, 0.2, 0.02, 0.2]
    assert BandOrder(8, h, 0, rate="mean").classify(7) == "band"  # all groups: 4 of 8
    assert BandOrder(8, h, 0, retire_after=0).classify(6) == "easy"  # 0: never retired
    # single draws follow the weights (binomial bounds)
    n = 4000
    counts = [0] * 8
    for _ in range(n):
        counts[draw.take(1)[0]] += 1
    total = sum(draw.weight(i) for i in range(8))
    for i in range(8):
        assert within_binomial(counts[i], n, draw.weight(i) / total), (i, counts)
    shares = draw.metrics()
    assert shares["curriculum/share_retired"] == pytest.approx(counts[6] / n)
    assert shares["curriculum/share_hard"] == pytest.approx((counts[1] + counts[2]) / n)
    assert shares["curriculum/retired"] == pytest.approx(1 / 8)
    # a batch is drawn without replacement
    assert all(len(set(draw.take(6))) == 6 for _ in range(50))


def test_a_mastered_prompt_is_retired_and_does_not_keep_coming_back() -> None:
    """Prompt 0 is always solved, the others half the time: once its all-correct streak reaches 2 it
    is drawn with weight 0.02 against 9 prompts of weight 1 (at most), not as often as any other."""
    h = PromptHistory(10, "c")
    draw = build_curriculum(CurriculumConfig(kind="band"), examples([0] * 10), h, seed=1)
    retired_at, after = None, 0
    steps = 3000
    for t in range(1, steps + 1):
        (i,) = draw.take(1)
        if retired_at is not None and i == 0:
            after += 1
        step(draw, h, t, [i], rewards=(1.0, 1.0) if i == 0 else (1.0, 0.0))
        if retired_at is None and h.get(0).easy_streak >= 2:
            retired_at = t
    assert retired_at is not None and retired_at < 200
    n = steps - retired_at
    assert within_binomial(after, n, 0.02 / 9.02)  # about 6 of 2900; uniform would give 290
    assert after >= 1  # revisited now and then (its streak may end)
    assert draw.metrics()["curriculum/retired"] == pytest.approx(0.1)


# ----------------------------------------------------------------------------------- bandit
def test_bandit_q_follows_the_hand_computed_updates() -> None:
    draw = BanditOrder(["A", "A", "B", "B"], "metadata.cat", 0, alpha=0.25, temperature=0.1, explore=0.05)
    # A: mean |r - mean| of [1,0,1,0] = 0.5 and of [1,1,1,0] = (3·0.25 + 0.75)/4 = 0.375; a group with
    # one scored member gives no signal (not a 0): r = 0.4375, Q = 0.25·0.4375. B: [1,1,1,1] gives 0
    draw.observe(
        [
            group(0, [1, 0, 1, 0]),
            group(1, [1, 1, 1, 0]),
            group(0, [1, None, None, None]),
            group(2, [1, 1, 1, 1]),
        ]
    )
    assert draw.q == pytest.approx({"A": 0.109375, "B": 0.0})
    # unscored members stay out of the mean: [1, 1, None, None] is flat (0), [1, 0, None] gives 0.5
    draw.observe([group(0, [1, 1, None, None]), group(3, [1, 0, None])])
    assert draw.q == pytest.approx({"A": 0.75 * 0.109375, "B": 0.125})
    e_a, e_b = math.exp(0.75 * 0.109375 / 0.1), math.exp(0.125 / 0.1)
    expected = [0.95 * e_a / (e_a + e_b) + 0.025, 0.95 * e_b / (e_a + e_b) + 0.025]
    assert draw.probabilities() == pytest.approx(expected)
    metrics = draw.metrics()
    assert metrics["curriculum/q/B"] == pytest.approx(0.125)


def test_the_category_with_more_signal_is_drawn_more() -> None:
    """Category a's groups are always mixed (signal 0.5), b's always solved (0): after a few steps a
    gets softmax(0.5/0.1) of the draws (with the explore floor), b only the floor's share."""
    levels = list(range(12))  # cat a: even levels, b: odd
    h = PromptHistory(12, "c")
    draw = build_curriculum(CurriculumConfig(kind="bandit", key="metadata.cat"), examples(levels), h, seed=5)
    drawn = {"a": 0, "b": 0}
    for t in range(1, 201):
        batch = draw.take(4)
        if t > 20:
            for i in batch:
                drawn["ab"[levels[i] % 2]] += 1
        step(draw, h, t, batch[:0])  # no history needed by the bandit
        draw.observe([group(i, [1.0, 0.0] if levels[i] % 2 == 0 else [1.0, 1.0]) for i in batch])
    assert draw.q["a"] == pytest.approx(0.5, abs=1e-3) and draw.q["b"] == pytest.approx(0.0)
    p_a = 0.95 * math.exp(5) / (math.exp(5) + 1) + 0.025
    n = sum(drawn.values())
    assert within_binomial(drawn["a"], n, p_a), drawn
    shares = draw.metrics()
    assert shares["curriculum/share/a"] > 0.9 and "curriculum/share/b" in shares


def test_a_bandit_key_with_a_value_per_row_is_refused() -> None:
    rows = [Example(id=f"q{i}", prompt=[], metadata={"cat": i}) for i in range(100)]
    with pytest.raises(RlvrError, match="has 100 values; kind=bandit takes at most 64"):
        build_curriculum(
            CurriculumConfig(kind="bandit", key="metadata.cat"), rows, PromptHistory(100, "c"), 0
        )


# ----------------------------------------------------------------------------------- resume
CASES = [
    CurriculumConfig(kind="schedule", key="metadata.level", params={"steps": 6, "start": 0.3}),
    CurriculumConfig(kind="band"),
    CurriculumConfig(kind="bandit", key="metadata.cat"),
]


@pytest.mark.parametrize("cfg", CASES, ids=lambda c: c.kind)
def test_resume_draws_exactly_what_the_uninterrupted_run_draws(cfg) -> None:
    """N steps equal k steps + save (through JSON, as state.json) + a fresh draw + N − k steps."""
    rows = examples(LEVELS)

    def outcome(i: int, t: int) -> list[float]:  # a fixed, uneven world: some prompts get solved
        return [1.0, 1.0] if (i + t) % 3 == 0 or i < 4 else [1.0, 0.0] if i % 2 else [0.0, 0.0]

    def run(draw, h: PromptHistory, start: int, stop: int) -> list[list[int]]:
        out = []
        for t in range(start, stop):
            batch = draw.take(3)
            out.append(batch)
            groups = [group(i, outcome(i, t)) for i in batch]
            h.record(groups, t)
            draw.observe(groups)
            draw.metrics()
        return out

    h_a = PromptHistory(20, "c")
    whole = run(build_curriculum(cfg, rows, h_a, 7), h_a, 1, 13)
    h_b = PromptHistory(20, "c")
    first = build_curriculum(cfg, rows, h_b, 7)
    head = run(first, h_b, 1, 6)
    saved = json.loads(json.dumps({"sampler": first.state(), "history": h_b.state()}))
    h_c = PromptHistory(20, "c")
    h_c.load_state(saved["history"])
    resumed = build_curriculum(cfg, rows, h_c, 7)
    resumed.load_state(saved["sampler"])
    assert resumed.state() == first.state()
    assert head + run(resumed, h_c, 6, 13) == whole
    assert len({tuple(b) for b in whole}) > 3  # the draws do vary


# ----------------------------------------------------------------------------------- held-out config
def test_eval_task_config_makes_the_held_out_problems_harder() -> None:
    from rlvr.data.from_config import build_datasets

    def terms(rows: list[Example]) -> set[int]:
        return {e.metadata["rg_entry"]["metadata"]["num_terms"] for e in rows}

    base = ["data.train_size=20", "data.eval_size=10", "data.task_config={min_terms: 2, max_terms: 3}"]
    harder = load_config(None, [*TINY_RUN, *base, "data.eval_task_config={min_terms: 4, max_terms: 5}"])
    train, held_out = build_datasets(harder.data)
    assert terms(train) <= {2, 3} and terms(held_out) <= {4, 5} and len(held_out) == 10
    same = load_config(None, [*TINY_RUN, *base])
    assert terms(build_datasets(same.data)[1]) <= {2, 3}
    wrong = load_config(None, [*TINY_RUN, *base, "data.eval_task_config={min_termz: 4}"])
    with pytest.raises(RlvrError, match=r"^data\.eval_task_config: .*no config key 'min_termz'"):
        build_datasets(wrong.data)
    with pytest.raises(RlvrError, match="data.eval_task_config applies to one reasoning-gym task"):
        load_config(None, [*TINY_RUN, "data.path=rows.jsonl", "data.eval_task_config={min_terms: 4}"])


# ----------------------------------------------------------------------------------- a run
def test_a_run_with_a_schedule_reports_its_pacing_and_saves_its_state(tmp_path) -> None:
    cfg = load_config(
        None,
        [
            *TINY_RUN,
            f"output_dir={tmp_path}",
            "name=curr",
            "eval.before=false",
            "data.eval_size=2",
            "train.steps=3",
            "data.curriculum.kind=schedule",
            "data.curriculum.key=metadata.rg_entry.metadata.num_digits",  # the default job: 1 or 2
            "data.curriculum.params={steps: 2}",
        ],
    )
    api.train(cfg, quiet=True)
    run = tmp_path / "curr"
    rows = [r for r in read_jsonl(run / "metrics.jsonl") if r["phase"] == "train"]
    # 64 prompts: 16 open at step 1 (0.25), 40 at step 2 (0.25 + 0.75/2 = 0.625), all at step 3
    assert [r["curriculum/available"] for r in rows] == pytest.approx([0.25, 0.625, 1.0])
    assert rows[0]["curriculum/mean_difficulty"] == 1.0  # the easiest 16 are all one-digit sums
    state = json.loads((run / "checkpoints" / "step-000003" / "state.json").read_text())
    assert state["sampler"]["step"] == 3 and state["sampler"]["takes"] >= 3
