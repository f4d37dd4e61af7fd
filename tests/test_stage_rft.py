"""The RFT stage: of each round's samples, only the verified ones (reward ≥ rft.min_reward, no reward
error, not cut) are kept, per prompt all / the shortest / the best; all-correct groups are kept despite
dynamic sampling; the log's kept flags are the filter's; rft.epochs sizes the LR schedule."""

from __future__ import annotations

from pathlib import Path

import pytest
from tiny import TINY_RUN

from rlvr import api
from rlvr.config import load_config
from rlvr.data.sampler import PromptSampler
from rlvr.log import read_jsonl
from rlvr.models import TINY_RANDOM, load_model, load_tokenizer
from rlvr.train.learn.learner import Learner
from rlvr.train.learn.optim import lr_factor
from rlvr.train.stages.rft import VerifiedSource
from rlvr.trajectory import Segment, Trajectory, TrajectoryGroup, group_records


def sample(
    index: int, length: int, reward: float | None, finish: str = "stop", error: bool = False
) -> Trajectory:
    return Trajectory(
        prompt_ids=[1, 2, 3 + index],
        segments=[Segment("sampled", list(range(10, 10 + length)), [-0.5] * length)],
        finish_reason=finish,
        example_index=index,
        reward=reward,
        rewards={"tagged": reward or 0.0},
        errors={"tagged": "boom"} if error else {},
    )


# prompt -> its samples, as (trained tokens, reward, finish_reason, reward error)
ROUND = {
    0: [(9, 1.0, "stop", False), (4, 0.0, "stop", False), (6, 1.0, "stop", False), (5, 1.5, "stop", False)],
    1: [(3, 0.0, "stop", False), (2, 0.5, "stop", False), (3, 0.0, "stop", False), (2, 0.99, "stop", False)],
    # all correct: dynamic sampling would drop this group (no reward variance); RFT keeps it
    2: [(7, 1.0, "stop", False), (5, 1.0, "stop", False), (8, 1.0, "stop", False), (5, 1.0, "stop", False)],
    # the shortest verified one is cut, another scored 0 after a reward error (rewards.on_error=zero)
    3: [(2, 1.0, "length", False), (1, 1.0, "stop", True), (6, 1.0, "stop", False), (3, 0.0, "stop", False)],
}


class StubCollector:
    """What VerifiedSource uses of a Collector, sampling hand-made groups."""

    correctness = "tagged"

    def __init__(self) -> None:
        self.sampler = PromptSampler(len(ROUND), seed=0)
        self.loaded: dict | None = None
        self.round = 0

    def sample_groups(self, indices: list[int]) -> list[TrajectoryGroup]:
        return [TrajectoryGroup(i, [sample(i, *spec) for spec in ROUND[i]]) for i in indices]

    def sample_round(self, count: int) -> list[TrajectoryGroup]:
        return self.sample_groups(self.sampler.take(count))

    def state(self) -> dict:
        return {"sampler": self.sampler.state()}

    def load_state(self, state: dict) -> None:
        self.loaded = state


def rft_source(*extra: str) -> VerifiedSource:
    cfg = load_config(
        None, [*TINY_RUN, "stage=rft", "rollout.prompts_per_step=4", "algo.dynamic_sampling=true", *extra]
    )
    return VerifiedSource(cfg, StubCollector())


def kept_by_prompt(collection) -> dict[int, list[tuple[int, float]]]:
    return {g.example_index: [(len(t), t.reward) for t in g.trajectories] for g in collection.kept}


def test_keep_all_keeps_every_verified_sample_and_logs_the_filter_per_trajectory() -> None:
    collection = rft_source("rft.keep=all", "rft.min_reward=1.0").collect()
    assert kept_by_prompt(collection) == {
        0: [(9, 1.0), (6, 1.0), (5, 1.5)],
        2: [(7, 1.0), (5, 1.0), (8, 1.0), (5, 1.0)],
        3: [(6, 1.0)],
    }
    metrics = collection.metrics
    assert metrics["groups/sampled"] == 4 and metrics["groups/kept"] == 3
    assert metrics["rft/kept_trajectories"] == metrics["rft/accepted_trajectories"] == 8
    assert metrics["rft/kept_share"] == 8 / 16 and metrics["rft/rejected_cut"] == 1
    assert metrics["rft/kept_tokens"] == 9 + 6 + 5 + 7 + 5 + 8 + 5 + 6
    assert metrics["train/accuracy"] == pytest.approx(10 / 16)  # the collector's reward metrics, all samples
    # every sample is logged once, kept exactly when the filter kept it
    rows = list(group_records(collection.seen, collection.kept_flags(), 0, step=1))
    assert len(rows) == 16
    kept_rows = sorted((r["example_index"], len(r["segments"][0]["token_ids"])) for r in rows if r["kept"])
    assert kept_rows == sorted((i, n) for i, pairs in kept_by_prompt(collection).items() for n, _ in pairs)


def test_keep_shortest_and_best_pick_one_verified_sample_per_prompt() -> None:
    shortest = rft_source("rft.keep=shortest", "rft.min_reward=1.0").collect()
    assert kept_by_prompt(shortest) == {0: [(5, 1.5)], 2: [(5, 1.0)], 3: [(6, 1.0)]}
    assert shortest.kept[1].trajectories[0] is shortest.seen[2].trajectories[0]  # ties: the first sampled
    best = rft_source("rft.keep=best", "rft.min_reward=0.5").collect()
    assert kept_by_prompt(best) == {0: [(5, 1.5)], 1: [(2, 0.99)], 2: [(5, 1.0)], 3: [(6, 1.0)]}
    cut_too = rft_source("rft.keep=shortest", "rft.min_reward=1.0", "rft.keep_truncated=true").collect()
    assert kept_by_prompt(cut_too)[3] == [(2, 1.0)] and cut_too.metrics["rft/rejected_cut"] == 0


def test_a_round_without_a_verified_sample_keeps_nothing_and_state_is_the_collectors() -> None:
    source = rft_source("rft.min_reward=2.0")
    collection = source.collect()
    assert collection.kept == [] and len(collection.seen) == 4
    assert collection.metrics["rft/kept_trajectories"] == 0 and collection.metrics["groups/kept"] == 0
    assert source.state() == {"sampler": {"epoch": 0, "position": 4}}
    source.load_state({"sampler": {"epoch": 3, "position": 2}})
    assert source.collector.loaded == {"sampler": {"epoch": 3, "position": 2}}


def test_rft_epochs_size_the_schedule_one_step_per_pass(tmp_path: Path) -> None:
    overrides = [*TINY_RUN, "stage=rft", "rft.epochs=3", "train.steps=2", "optim.schedule=cosine"]
    cfg = load_config(None, [*overrides, "optim.warmup_steps=1", "optim.min_lr_ratio=0.0"])
    learner = Learner(cfg, load_model(TINY_RANDOM), load_tokenizer(TINY_RANDOM).pad_token_id)
    groups = StubCollector().sample_groups([0, 2])
    metrics = learner.update(groups)
    assert learner.scheduler.last_epoch == 3 and learner.version == 1
    lrs = [cfg.optim.lr * lr_factor(step, 6, cfg.optim) for step in range(3)]  # 2 steps × 3 passes
    assert metrics["update/lr"] == pytest.approx(sum(lrs) / 3)
    assert metrics["sft/tokens"] == 9 + 4 + 6 + 5 + 7 + 5 + 8 + 5
    assert metrics["sft/loss_last_pass"] < metrics["sft/loss_first_pass"]
    learner.update(groups)
    assert learner.scheduler.get_last_lr()[0] == pytest.approx(0.0, abs=1e-12)  # the end of the schedule


def test_rft_run_trains_on_the_kept_samples(tmp_path: Path) -> None:
    """tiny-random never answers nor stops: accept every sample (min_reward 0, cut ones too)."""
    overrides = [
        "stage=rft",
        "rft.min_reward=0.0",
        "rft.keep_truncated=true",
        "rft.keep=shortest",
        "train.steps=2",
        "train.log_trajectories=true",
        "eval.before=false",
        "data.eval_size=2",
    ]
    cfg = load_config(None, [*TINY_RUN, *overrides, f"output_dir={tmp_path}", "name=rft"])
    results = api.train(cfg, quiet=True)
    assert results["run"]["updates"] == 2
    train = [r for r in read_jsonl(tmp_path / "rft" / "metrics.jsonl") if r["phase"] == "train"]
    assert all(r["rft/kept_trajectories"] == 2 and r["sft/tokens"] == r["rft/kept_tokens"] for r in train)
    rows = read_jsonl(tmp_path / "rft" / "trajectories.jsonl")
    assert len(rows) == 2 * 2 * 4  # every sample of both rounds
    for step in (1, 2):
        kept = [r for r in rows if r["step"] == step and r["kept"]]
        assert sorted(r["example_index"] for r in kept) == sorted(
            {r["example_index"] for r in rows if r["step"] == step}
        )
