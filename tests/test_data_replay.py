"""Replay of past trajectories (rlvr.collect.replay) and the learner's importance weight on them."""

from __future__ import annotations

import json
import math

import pytest
import torch
from tiny import TINY_RUN

from rlvr import api
from rlvr.collect.replay import ReplayBuffer
from rlvr.config import load_config
from rlvr.config.data_plan import ReplayConfig
from rlvr.log import read_jsonl
from rlvr.trajectory import SAMPLED, Segment, Trajectory, TrajectoryGroup

ACC = "acc"  # the correctness component


def _t(example: int, reward: float, correct: bool = False, version: int = 0, tag: int = 0) -> Trajectory:
    """A trajectory whose token ids and logprobs carry ``tag`` (to tell copies apart)."""
    ids = [100 + tag, 200 + tag]
    return Trajectory(
        prompt_ids=[1, 2, 3],
        segments=[Segment(SAMPLED, ids, [-0.5 - tag / 100, -1.25 - tag / 100])],
        finish_reason="stop",
        text=f"t{tag}",
        example_index=example,
        example_id=f"ex{example}",
        policy_version=version,
        reward=reward,
        rewards={ACC: 1.0 if correct else 0.0, "len": reward},
    )


def _group(example: int, *members: Trajectory) -> TrajectoryGroup:
    return TrajectoryGroup(example, list(members))


def _tags(group: TrajectoryGroup) -> list[int]:
    return [t.segments[0].token_ids[0] - 100 for t in group.trajectories]


def _buffer(**kw) -> ReplayBuffer:
    return ReplayBuffer(ReplayConfig(**kw), ACC, seed=0)


def test_best_correct_rescues_only_groups_without_a_correct_member() -> None:
    buf = _buffer(kind="best_correct")
    # example 0: correct samples of reward 1.0 and (twice) 1.5; the newest of the best is chosen
    buf.add([_group(0, _t(0, 1.0, True, tag=1), _t(0, 1.5, True, tag=2), _t(0, 0.9, False, tag=3))])
    buf.add([_group(0, _t(0, 1.5, True, tag=4)), _group(1, _t(1, 1.2, True, tag=5))])
    assert len(buf) == 4  # the wrong sample (tag 3) is not kept under best_correct
    buf.metrics()
    failing = _group(0, _t(0, 0.2, tag=10), _t(0, 0.0, tag=11), _t(0, 0.1, tag=12))
    solved = _group(1, _t(1, 0.0, tag=13), _t(1, 1.0, True, tag=14))
    unknown = _group(2, _t(2, 0.0, tag=15), _t(2, 0.0, tag=16))
    before = list(failing.trajectories)
    out = buf.mix([failing, solved, unknown], version=1)
    assert _tags(out[0]) == [10, 4, 12]  # the lowest-reward member left for the best (newest) correct
    assert out[0] is not failing and failing.trajectories == before  # the sampled group untouched
    assert out[0].trajectories[0] is failing.trajectories[0]  # fresh members are the sampled objects
    assert out[1] is solved and out[2] is unknown
    assert buf.metrics() == {
        "replay/buffer_size": 4.0,
        "replay/replayed": 1.0,
        "replay/groups_rescued": 1.0,
        "replay/mean_age": 1.0,
    }


def test_share_replaces_a_rounded_share_best_first() -> None:
    buf = _buffer(kind="share", share=0.5)
    buf.add([_group(0, _t(0, 0.3, tag=1), _t(0, 0.9, tag=2), _t(0, 0.5, tag=3))])
    buf.add([_group(1, _t(1, 0.4, tag=4))])
    four = _group(0, *[_t(0, 0.0, tag=10 + i) for i in range(4)])
    three = _group(1, *[_t(1, 0.0, tag=20 + i) for i in range(3)])  # round(1.5) = 2, one stored
    none = _group(5, _t(5, 0.0, tag=30), _t(5, 0.0, tag=31))
    out = buf.mix([four, three, none], version=0)
    assert _tags(out[0]) == [10, 11, 2, 3]  # two replaced, best stored first
    assert _tags(out[1]) == [20, 21, 4]
    assert out[2] is none
    assert buf.metrics()["replay/replayed"] == 3.0
    # at least one fresh member stays, whatever the share
    big = _buffer(kind="share", share=0.9)
    big.add([_group(0, _t(0, 1.0, tag=1), _t(0, 1.0, tag=2))])
    assert _tags(big.mix([_group(0, _t(0, 0.0, tag=10), _t(0, 0.0, tag=11))], 0)[0]) == [10, 2]


def test_replayed_copies_keep_their_logprobs_and_version_and_are_not_stored_again() -> None:
    buf = _buffer(kind="share", share=0.5)
    original = _t(0, 0.7, version=2, tag=1)
    buf.add([_group(0, original)])
    out = buf.mix([_group(0, _t(0, 0.0, version=5, tag=10), _t(0, 0.0, version=5, tag=11))], 5)
    replayed = out[0].trajectories[1]
    assert replayed.replayed and replayed.policy_version == 2
    assert replayed.segments[0].logprobs == original.segments[0].logprobs
    assert replayed.reward == 0.7 and replayed.rewards == original.rewards
    replayed.advantage = 3.0  # the learner writes its advantage (and the logs read it)
    replayed.segments[0].logprobs[0] = 0.0  # nothing done to the copy reaches the buffer
    buf.add(out)  # the mixed groups: their replayed copy is not stored a second time
    assert len(buf) == 2  # the original and the fresh member of the mixed group
    stored = [t for t in buf.entries.values() if t.example_index == 0 and t.text == "t1"]
    assert len(stored) == 1 and not stored[0].replayed and stored[0].advantage is None
    assert stored[0].segments[0].logprobs == original.segments[0].logprobs


def test_the_replayed_flag_survives_a_trajectories_file(tmp_path) -> None:
    # a learner driven from trajectories.jsonl weights replayed rows as the live loop does
    from rlvr.trajectory import read_trajectory_groups, trajectory_record

    buf = _buffer(kind="share", share=0.5)
    buf.add([_group(0, _t(0, 0.7, version=2, tag=1))])
    group = buf.mix([_group(0, _t(0, 0.0, version=5, tag=10), _t(0, 0.0, version=5, tag=11))], 5)[0]
    rows = [trajectory_record(t, 0, True, step=6) for t in group.trajectories]
    assert ["replayed" in r for r in rows] == [False, True]
    path = tmp_path / "trajectories.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    ((read, _),) = read_trajectory_groups(path)
    assert [t.replayed for t in read.trajectories] == [False, True]
    assert read.trajectories[1].policy_version == 2


def test_every_group_of_a_round_is_buffered() -> None:
    buf = _buffer(kind="share", share=0.5)  # TRL#6804 buffered only its first group
    buf.add([_group(e, _t(e, 0.5, tag=e), _t(e, 0.6, tag=10 + e)) for e in range(3)])
    assert sorted(buf.by_example) == [0, 1, 2] and len(buf) == 6
    out = buf.mix([_group(e, _t(e, 0.0, tag=50), _t(e, 0.0, tag=51)) for e in range(3)], 0)
    assert [_tags(g) for g in out] == [[50, 10], [50, 11], [50, 12]]


def test_capacity_drops_the_oldest_first() -> None:
    buf = _buffer(kind="share", share=0.5, capacity=3)
    buf.add([_group(0, _t(0, 0.9, tag=1)), _group(1, _t(1, 0.1, tag=2))])
    buf.add([_group(0, _t(0, 0.2, tag=3)), _group(1, _t(1, 0.3, tag=4))])
    buf.add([_group(2, _t(2, 0.5, tag=5))])
    assert [t.text for t in buf.entries.values()] == ["t3", "t4", "t5"]
    assert sorted(buf.by_example) == [0, 1, 2]
    # the best sample of example 0 (tag 1) left first: the newer one is replayed
    assert _tags(buf.mix([_group(0, _t(0, 0.0, tag=9), _t(0, 0.0, tag=8))], 0)[0]) == [9, 3]


def test_samples_older_than_max_age_are_not_replayed() -> None:
    buf = _buffer(kind="best_correct", max_age=2)
    buf.add([_group(0, _t(0, 1.0, True, version=0, tag=1))])
    group = _group(0, _t(0, 0.0, version=3, tag=10), _t(0, 0.0, version=3, tag=11))
    assert buf.mix([group], version=3)[0] is group
    assert _tags(buf.mix([group], version=2)[0]) == [1, 11]
    assert buf.metrics()["replay/mean_age"] == 2.0


def _rounds(buf: ReplayBuffer, start: int, stop: int) -> list[list[int]]:
    """Rounds ``start..stop-1`` of a fixed scenario: mix, then add the sampled groups."""
    mixed = []
    for r in range(start, stop):
        batch = [
            _group(
                e,
                *[
                    _t(e, ((r * 7 + e * 3 + i) % 5) / 4, i == 0 and r % 3 == e, r, 10 * r + i)
                    for i in range(4)
                ],
            )
            for e in range(3)
        ]
        mixed.append([tag for g in buf.mix(batch, r) for tag in _tags(g)])
        buf.add(batch)
    return mixed


@pytest.mark.parametrize("kind", ["share", "best_correct"])
def test_state_round_trips_exactly(kind: str) -> None:
    kw = {"kind": kind, "share": 0.5, "capacity": 10, "max_age": 3}
    whole = _buffer(**kw)
    expected = _rounds(whole, 0, 8)
    first = _buffer(**kw)
    head = _rounds(first, 0, 4)
    resumed = _buffer(**kw)
    resumed.load_state(json.loads(json.dumps(first.state())))  # what a checkpoint's state.json holds
    assert resumed.state() == first.state()
    assert head + _rounds(resumed, 4, 8) == expected
    assert resumed.state() == whole.state()
    # something was replayed: a tag of an earlier round (round r samples tags 10r..10r+3)
    assert any(tag // 10 != r for r, tags in enumerate(expected) for tag in tags)


@pytest.fixture(scope="module")
def tiny():
    from rlvr.models import load_model

    torch.manual_seed(0)
    return load_model("tiny-random")


def _update_loss(model, replayed: list[bool], shift: list[float], cap: float) -> dict[str, float]:
    """Metrics of one on-policy policy_update of two rows of one group (advantages 0 and 1) whose
    sampling logprobs are the current policy's minus ``shift`` (per row)."""
    from rlvr.config.schema import AlgoConfig
    from rlvr.train.learn.batch import build_batch
    from rlvr.train.learn.update import batch_logprobs, policy_update

    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)  # the weights stay as they are
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    rows = [_t(0, 0.0, tag=1), _t(0, 1.0, tag=2)]
    batch = build_batch([rows], [0.0, 1.0], pad_id=2)
    current = batch_logprobs(model, batch, 4, 1.0)
    for row, t in enumerate(rows):
        t.segments[0].logprobs = (current[row, :2] - shift[row]).tolist()
        t.replayed = replayed[row]
    batch = build_batch([rows], [0.0, 1.0], pad_id=2)
    return policy_update(model, optimizer, scheduler, batch, AlgoConfig(), 1e9, 1.0, 16, replay_cap=cap)


def test_a_replayed_rows_loss_is_weighted_by_the_truncated_ratio(tiny) -> None:
    fresh = _update_loss(tiny, [False, False], [0.0, 0.3], cap=2.0)
    assert "update/replay_is_weight_mean" not in fresh
    # row 1 (advantage 1) replayed, π_old/π_behaviour = e^0.3 < cap: its loss × e^0.3
    weighted = _update_loss(tiny, [False, True], [0.0, 0.3], cap=2.0)
    assert weighted["update/loss"] == pytest.approx(fresh["update/loss"] * math.exp(0.3), rel=1e-5)
    assert weighted["update/replay_is_weight_mean"] == pytest.approx(math.exp(0.3), rel=1e-5)
    capped = _update_loss(tiny, [False, True], [0.0, 0.3], cap=1.1)
    assert capped["update/loss"] == pytest.approx(fresh["update/loss"] * 1.1, rel=1e-5)
    # a replayed row beside a fresh one leaves the fresh one's loss as it was (row 0 has advantage 0)
    other = _update_loss(tiny, [True, False], [0.5, 0.3], cap=2.0)
    assert other["update/loss"] == fresh["update/loss"]
    assert other["update/replay_is_weight_mean"] == pytest.approx(math.exp(0.5), rel=1e-5)
    # the sampler diagnostics measure the engine's mismatch on fresh rows only
    assert other["mismatch/logprob_diff_mean"] == pytest.approx(0.3, abs=1e-5)


def test_training_with_share_replay_logs_replayed_rows(tmp_path) -> None:
    cfg = load_config(
        None,
        [
            *TINY_RUN,
            f"output_dir={tmp_path}",
            "name=replay",
            "train.steps=3",
            "data.train_size=2",  # both prompts every step: each meets its past samples
            "data.replay.kind=share",
            "data.replay.share=0.5",
            "algo.dynamic_sampling=false",
            "train.log_trajectories=true",
            "eval.before=false",
            "train.final_checkpoint=none",
        ],
    )
    api.train(cfg, quiet=True)
    run = tmp_path / "replay"
    rows = [r for r in read_jsonl(run / "metrics.jsonl") if r["phase"] == "train"]
    assert [r["replay/replayed"] for r in rows] == [0.0, 4.0, 4.0]  # 2 groups × round(0.5 × 4)
    assert [r["replay/buffer_size"] for r in rows] == [8.0, 16.0, 24.0]
    assert all(r["replay/mean_age"] >= 1 for r in rows[1:])
    assert all("update/replay_is_weight_mean" in r for r in rows[1:])
    logged = read_jsonl(run / "trajectories.jsonl")
    replayed = [r for r in logged if r.get("replayed")]
    assert len(replayed) == 8 and all(r["kept"] for r in replayed)
    assert all(r["policy_version"] < r["step"] - 1 for r in replayed)  # step s samples with version s − 1
    sampled = {
        (tuple(r["segments"][0]["token_ids"]), r["policy_version"]): r
        for r in logged
        if not r.get("replayed")
    }
    for r in replayed:  # each is an earlier step's sample, with its logprobs and version as sampled
        past = sampled[(tuple(r["segments"][0]["token_ids"]), r["policy_version"])]
        assert past["step"] < r["step"]
        assert past["segments"][0]["logprobs"] == r["segments"][0]["logprobs"]
    # 2 of each kept group's 4 sampled members gave way to replayed ones
    for step in (2, 3):
        assert sum(1 for r in logged if r["step"] == step and not r.get("replayed") and not r["kept"]) == 4
