"""PRIME: the implicit process reward is the PRM's log-ratio to the reference, the PRM learns the
outcomes, and the learner adds the rewards to the estimator's token rewards."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from tiny import TINY_RUN

from rlvr.algo.step_returns import step_returns_advantages
from rlvr.config import load_config
from rlvr.errors import RlvrError
from rlvr.models import load_model
from rlvr.train.learn.batch import build_batch
from rlvr.train.learn.estimate import check_algorithm
from rlvr.train.learn.learner import Learner
from rlvr.train.learn.logprobs import completion_logprobs_simple
from rlvr.train.learn.prime import outcome_labels
from rlvr.trajectory import SAMPLED, Segment, Trajectory, TrajectoryGroup

PRIME = ["algo.advantage=step_returns", "algo.prime.coef=0.5", "algo.prime.lr=1e-3"]


def _learner(tmp_path: Path, *extra: str) -> Learner:
    cfg = load_config(None, [*TINY_RUN, f"output_dir={tmp_path}", *PRIME, *extra])
    check_algorithm(cfg)
    return Learner(cfg, load_model(cfg.model.name, cfg.model.dtype, cfg.model.device), pad_id=0)


def _traj(ids: list[int], correct: float) -> Trajectory:
    return Trajectory(
        [1, 2, 3], [Segment(SAMPLED, ids, [-1.0] * len(ids))], "stop",
        reward=correct, rewards={"reward_fixtures:scaled_len": correct},
    )  # fmt: skip


def _groups() -> list[TrajectoryGroup]:
    return [TrajectoryGroup(0, [_traj([5, 6, 7, 8], 1.0), _traj([9, 10, 11], 0.0), _traj([12, 13], 0.0)])]


def test_the_token_reward_is_the_prm_log_ratio_to_the_reference(tmp_path):
    learner = _learner(tmp_path)
    prime = learner.prime
    with torch.no_grad():  # make the PRM differ from the reference
        for p in prime.model.parameters():
            p.add_(0.01 * torch.randn_like(p))
    trajectories = _groups()[0].trajectories
    batch = build_batch([trajectories], [0.0] * 3, 0)
    rewards = prime.token_rewards(batch)
    with torch.no_grad():
        prm = completion_logprobs_simple(prime.model, batch)[0]
        ref = completion_logprobs_simple(prime.reference, batch)[0]
    expected = 0.5 * (prm - ref) * batch.completion_mask
    assert rewards.abs().max() > 0
    assert torch.allclose(rewards, expected, atol=1e-5)


def test_the_prm_update_moves_toward_the_outcomes(tmp_path):
    """Fails if the labels are flipped, the loss does not reach the PRM, or the sign of q is wrong."""
    learner = _learner(tmp_path)
    prime = learner.prime
    trajectories = _groups()[0].trajectories
    batch = build_batch([trajectories], [0.0] * 3, 0)
    labels = outcome_labels(trajectories, prime.key)
    assert labels.tolist() == [1.0, 0.0, 0.0]
    losses = [prime.update(batch, labels)["prime/loss"] for _ in range(4)]
    q = prime.token_rewards(batch).sum(dim=1)
    assert losses[-1] < losses[0]
    assert q[0] > 0 > max(q[1], q[2])  # the correct response scores above the reference, the others below


def test_the_learner_adds_the_implicit_rewards_to_the_estimator(tmp_path, monkeypatch):
    learner = _learner(tmp_path, "algo.prime.update=after")
    groups = _groups()
    known = torch.zeros(3, 4)
    known[1, 0] = 0.7  # a process reward on the first token of the second response
    monkeypatch.setattr(learner.prime, "token_rewards", lambda batch, ref=None: known.clone())
    batch, metrics = learner.prepare_batch(groups)
    lengths = torch.tensor([4, 3, 2])
    expected = step_returns_advantages(
        torch.tensor([1.0, 0.0, 0.0]), torch.zeros(3, dtype=torch.long), lengths, known
    )
    assert torch.allclose(batch.advantages.cpu(), expected, atol=1e-5)
    assert "prime/loss" in metrics and "prime/sequence_reward_gap" in metrics


def test_prime_needs_token_rewards_and_its_state_is_checkpointed(tmp_path):
    with pytest.raises(RlvrError, match="algo.prime.*step_returns"):
        check_algorithm(load_config(None, [*TINY_RUN, "algo.prime.coef=0.1"]))
    learner = _learner(tmp_path)
    trajectories = _groups()[0].trajectories
    batch = build_batch([trajectories], [0.0] * 3, 0)
    learner.prime.update(batch, outcome_labels(trajectories, learner.prime.key))
    state = learner.state_dict()
    fresh = _learner(tmp_path)
    assert not torch.allclose(fresh.prime.token_rewards(batch), learner.prime.token_rewards(batch))
    fresh.load_state_dict(state)
    assert torch.allclose(fresh.prime.token_rewards(batch), learner.prime.token_rewards(batch), atol=1e-6)


def test_step_granularity_sums_each_steps_tokens_onto_its_last_token():
    from rlvr.train.learn.prime import step_sums

    rewards = torch.tensor([[1.0, 2.0, 3.0, 4.0, 0.0], [1.0, 1.0, 1.0, 0.0, 0.0]])
    assert step_sums(rewards, [[1, 3], []]).tolist() == [[0, 3, 0, 7, 0], [0, 0, 3, 0, 0]]


def test_the_learner_reads_prime_per_step_with_step_granularity(tmp_path, monkeypatch):
    """Fails if granularity is ignored (the tokens' own rewards reach the estimator) or a step's sum
    lands anywhere but its last token."""
    learner = _learner(tmp_path, "algo.prime.granularity=step")
    groups = _groups()
    for t, ends in zip(groups[0].trajectories, ([1, 3], [2], [1]), strict=True):
        t.step_ends = ends
    known = torch.tensor([[0.5, 0.25, 0.0, 1.0], [0.0, 0.7, 0.1, 0.0], [0.2, 0.2, 0.0, 0.0]])
    monkeypatch.setattr(learner.prime, "token_rewards", lambda batch, ref=None: known.clone())
    batch, _ = learner.prepare_batch(groups)
    stepped = torch.tensor([[0.0, 0.75, 0.0, 1.0], [0.0, 0.0, 0.8, 0.0], [0.0, 0.4, 0.0, 0.0]])
    expected = step_returns_advantages(
        torch.tensor([1.0, 0.0, 0.0]), torch.zeros(3, dtype=torch.long), torch.tensor([4, 3, 2]), stepped
    )
    assert torch.allclose(batch.advantages.cpu(), expected, atol=1e-5)


def test_a_prime_run_at_step_granularity_records_the_step_ends(tmp_path):
    from rlvr import api
    from rlvr.log import read_jsonl

    cfg = load_config(
        None,
        [*TINY_RUN, *PRIME, "algo.prime.granularity=step", "rewards.step_separator=' '", "train.steps=1",
         "train.log_trajectories=true", f"output_dir={tmp_path}", "name=p"],
    )  # fmt: skip
    api.train(cfg, quiet=True)
    rows = read_jsonl(tmp_path / "p" / "trajectories.jsonl")
    assert rows and all(len(r["step_ends"]) == len(r["text"].split(" ")) for r in rows)
    metrics = [r for r in read_jsonl(tmp_path / "p" / "metrics.jsonl") if r["phase"] == "train"]
    assert "prime/loss" in metrics[0]
