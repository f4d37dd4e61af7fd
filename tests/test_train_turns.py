"""Multi-turn credit in the learner: token-level estimators see only the model's tokens, turn
rewards land on each turn's last token, ``algo.turn_advantage: turn`` gives each turn its return.

The learner tests build trajectories by hand (the model's turns and the environment's messages as
segments) and run :meth:`Learner.prepare_batch` on tiny-random, so they check the wiring, not only
the functions in :mod:`rlvr.train.learn.turns`.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from tiny import TINY_RUN

from rlvr.config import load_config
from rlvr.errors import RlvrError
from rlvr.models import load_model
from rlvr.train.learn.estimate import check_algorithm
from rlvr.train.learn.learner import Learner
from rlvr.train.learn.turns import SampledLayout, turn_end_rewards, turn_returns
from rlvr.trajectory import CONTEXT, SAMPLED, Segment, Trajectory, TrajectoryGroup


def _traj(turns: list[int], context: int, reward: float, turn_rewards: list[float]) -> Trajectory:
    """Sampled turns of the given lengths with ``context`` environment tokens between them."""
    segments = []
    for k, n in enumerate(turns):
        if k:
            segments.append(Segment(CONTEXT, [7] * context))
        segments.append(Segment(SAMPLED, [5 + k] * n, [-1.0] * n))
    return Trajectory(
        prompt_ids=[1, 2, 3],
        segments=segments,
        finish_reason="stop",
        reward=reward,
        turn_rewards=turn_rewards,
    )


def _positions(t: Trajectory, kind: str) -> list[int]:
    out, at = [], 0
    for s in t.segments:
        if s.kind == kind:
            out.extend(range(at, at + len(s.token_ids)))
        at += len(s.token_ids)
    return out


# -- the layout ----------------------------------------------------------------------------------


def test_sampled_layout_compacts_and_expands_the_model_tokens():
    mask = torch.tensor([[1, 1, 0, 0, 1, 0], [1, 0, 1, 1, 0, 0], [1, 1, 1, 0, 0, 0]], dtype=torch.float)
    values = torch.arange(18, dtype=torch.float).reshape(3, 6) + 1
    layout = SampledLayout(mask)
    assert not layout.identity and layout.width == 3
    compact = layout.compact(values)
    assert compact.tolist() == [[1, 2, 5], [7, 9, 10], [13, 14, 15]]
    assert torch.equal(layout.expand(compact), values * mask)
    prefix, head = SampledLayout(torch.tensor([[1, 1, 0], [1, 0, 0]], dtype=torch.float)), values[:2, :3]
    assert prefix.identity and prefix.compact(head) is head


def test_turn_end_rewards_and_returns():
    t = _traj([2, 3, 1], context=4, reward=1.5, turn_rewards=[0.1, 0.2, 0.2])
    # compact columns: turn 0 ends at 1, turn 1 at 4, turn 2 at 5
    assert turn_end_rewards([t], 6).tolist() == [pytest.approx([0.0, 0.1, 0.0, 0.0, 0.2, 0.2])]
    # outcome (1.5 - 0.5 = 1.0) at the last turn; returns from each turn on, discounted by 0.5
    assert turn_returns([t], 1.0) == [pytest.approx([1.5, 1.4, 1.2])]
    assert turn_returns([t], 0.5) == [pytest.approx([0.1 + 0.5 * (0.2 + 0.5 * 1.2), 0.2 + 0.5 * 1.2, 1.2])]


# -- through the learner ---------------------------------------------------------------------------


def _learner(tmp_path: Path, *extra: str) -> Learner:
    cfg = load_config(None, [*TINY_RUN, f"output_dir={tmp_path}", *extra])
    check_algorithm(cfg)
    policy = load_model(cfg.model.name, cfg.model.dtype, cfg.model.device)
    return Learner(cfg, policy, pad_id=0)


def test_gae_over_a_multi_turn_ledger_credits_model_tokens_only(tmp_path, monkeypatch):
    """With values 0, γ = λ = 1 and no whitening, GAE's advantage at a model token is the reward to
    come: the final reward plus the turn rewards of that turn and later ones. Context tokens get 0.
    Fails when the estimator runs on the ledger's columns (the final reward lands on whatever
    column ``lengths - 1`` is, often an environment token, and the last turn gets nothing)."""
    learner = _learner(
        tmp_path,
        "algo.advantage=gae",
        "algo.critic.kind=head",
        "algo.advantage_params={gamma: 1.0, lam: 1.0, normalize: false}",
    )
    monkeypatch.setattr(
        learner.critic, "batch_values", lambda model, batch, *a: torch.zeros(batch.completion_mask.shape)
    )
    a = _traj([2, 3], context=5, reward=1.3, turn_rewards=[0.3, 0.0])
    b = _traj([4], context=0, reward=0.0, turn_rewards=[0.0])
    batch, _ = learner.prepare_batch([TrajectoryGroup(0, [a, b])])
    adv = batch.advantages.cpu()
    expected_a = {p: 1.3 for p in _positions(a, SAMPLED)[:2]} | {p: 1.0 for p in _positions(a, SAMPLED)[2:]}
    for p in range(adv.shape[1]):
        assert adv[0, p].item() == pytest.approx(expected_a.get(p, 0.0)), p
    assert adv[1].tolist() == [0.0] * adv.shape[1]


def test_turn_mode_gives_each_turn_its_return_and_equals_trajectory_mode_without_turn_rewards(tmp_path):
    """Fails if turn mode ignores the turn rewards, the discount or the group baseline, or if its
    advantages reach the environment's tokens."""
    a = _traj([2, 2], context=3, reward=1.0, turn_rewards=[0.0, 0.0])
    b = _traj([1, 3], context=3, reward=0.0, turn_rewards=[0.0, 0.0])
    c = _traj([3], context=0, reward=0.5, turn_rewards=[0.0])
    groups = [TrajectoryGroup(0, [a, b, c])]
    by_trajectory, _ = _learner(tmp_path).prepare_batch(groups)
    by_turn, _ = _learner(tmp_path, "algo.turn_advantage=turn").prepare_batch(groups)
    mask = by_turn.completion_mask.cpu() > 0
    expected = by_trajectory.advantages.cpu()[:, None].expand_as(mask) * mask
    assert torch.allclose(by_turn.advantages.cpu(), expected, atol=1e-6)

    # a tool-error penalty at turn 0 of episode a: only turn 0's tokens carry it, discounted returns
    a.turn_rewards, a.reward = [-0.5, 0.0], 0.5
    batch, _ = _learner(tmp_path, "algo.turn_advantage=turn", "algo.turn_discount=0.5").prepare_batch(groups)
    returns0 = [0.5 * 1.0 - 0.5, 0.0 + 0.5 * 0.0, 0.5]  # G_0 of a, b, c with γ = 0.5
    mean = sum(returns0) / 3
    std = torch.tensor(returns0).std().item()
    adv = batch.advantages.cpu()
    turn0, turn1 = _positions(a, SAMPLED)[:2], _positions(a, SAMPLED)[2:]
    assert adv[0, turn0].tolist() == pytest.approx([(returns0[0] - mean) / std] * 2, rel=1e-4)
    assert adv[0, turn1].tolist() == pytest.approx([(1.0 - mean) / std] * 2, rel=1e-4)
    assert adv[0, _positions(a, CONTEXT)].tolist() == [0.0] * 3


def test_turn_mode_config_is_checked(tmp_path):
    with pytest.raises(RlvrError, match="algo.turn_advantage.*grpo or dr_grpo"):
        check_algorithm(load_config(None, [*TINY_RUN, "algo.turn_advantage=turn", "algo.advantage=rloo"]))
    with pytest.raises(RlvrError, match="rewards.shaping"):
        check_algorithm(
            load_config(
                None,
                [*TINY_RUN, "algo.turn_advantage=turn", "rewards.shaping=[{name: adaptive_length_penalty}]"],
            )
        )
