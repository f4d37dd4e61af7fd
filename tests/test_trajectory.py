"""Trajectories: the token ledger, its loss mask, its JSONL form, and how the learner's batch reads it."""

from __future__ import annotations

import json

import pytest
import torch

from rlvr.errors import RlvrError
from rlvr.models import load_model
from rlvr.rollout import Completion
from rlvr.train.learn.batch import build_batch
from rlvr.train.learn.logprobs import completion_logprobs, completion_logprobs_simple
from rlvr.trajectory import (
    CONTEXT,
    SAMPLED,
    Segment,
    Trajectory,
    TrajectoryGroup,
    group_records,
    read_trajectory_groups,
)


def _multi_turn(prompt: list[int], example_index: int = 0) -> Trajectory:
    """sampled [3 tokens] → context (a tool's answer) [2 tokens] → sampled [2 tokens]."""
    return Trajectory(
        prompt_ids=prompt,
        segments=[
            Segment(SAMPLED, [101, 102, 103], [-0.5, -1.0, -1.5]),
            Segment(CONTEXT, [201, 202]),
            Segment(SAMPLED, [301, 302], [-0.25, -0.75]),
        ],
        finish_reason="stop",
        example_index=example_index,
        reward=1.0,
    )


def test_a_completion_is_the_one_segment_trajectory() -> None:
    c = Completion(0, [1, 2, 3], [7, 8], [-0.1, -0.2], "length", text="ab")
    t = Trajectory.from_completion(c, example_index=5, example_id="e5", policy_version=3)
    assert t.response_ids == [7, 8] and t.loss_mask == [1.0, 1.0]
    assert t.sampling_logprobs == [-0.1, -0.2] and len(t) == 2
    assert (t.example_index, t.example_id, t.policy_version, t.finish_reason) == (5, "e5", 3, "length")


def test_the_loss_mask_covers_sampled_tokens_only() -> None:
    t = _multi_turn([1, 2])
    assert t.response_ids == [101, 102, 103, 201, 202, 301, 302]
    assert t.loss_mask == [1, 1, 1, 0, 0, 1, 1]
    assert t.sampling_logprobs == [-0.5, -1.0, -1.5, 0.0, 0.0, -0.25, -0.75]
    assert len(t) == 5  # tokens the policy sampled


@pytest.mark.parametrize(
    "kind,ids,logprobs",
    [("sampled", [1, 2], None), ("sampled", [1, 2], [-1.0]), ("context", [1], [-1.0]), ("tool", [1], None)],
)
def test_malformed_segments_are_refused(kind: str, ids: list[int], logprobs) -> None:
    with pytest.raises(ValueError):
        Segment(kind, ids, logprobs)


def test_batch_attends_to_context_tokens_but_trains_on_sampled_ones() -> None:
    batch = build_batch([[_multi_turn([1, 2, 3]), _multi_turn([1, 2, 3])]], [1.0, -1.0], pad_id=0)
    assert batch.completion_mask[0].tolist() == [1, 1, 1, 0, 0, 1, 1]
    assert batch.completion_attention[0].tolist() == [1] * 7
    assert batch.sampling_logprobs[0, 3:5].tolist() == [0.0, 0.0]


@pytest.fixture(scope="module")
def tiny():
    torch.manual_seed(0)
    return load_model("tiny-random")


def test_logprobs_after_a_context_segment_see_it(tiny) -> None:
    """The sampled tokens after a tool's answer are scored with that answer in their context:
    the learner's fast path equals a plain forward pass over the whole ledger."""
    prompt = [5, 17, 29, 41]
    t = _multi_turn(prompt)
    batch = build_batch([[t]], [1.0], pad_id=0)
    fast, _ = completion_logprobs(tiny, batch)
    simple, _ = completion_logprobs_simple(tiny, batch)
    with torch.no_grad():
        ids = torch.tensor([prompt + t.response_ids])
        logits = tiny(input_ids=ids).logits[0, len(prompt) - 1 : -1]
        expected = torch.log_softmax(logits.float(), -1).gather(-1, ids[0, len(prompt) :, None])[:, 0]
    mask = batch.completion_mask[0].bool()
    assert torch.allclose(fast[0][mask], expected[mask], atol=1e-5)
    assert torch.allclose(simple[0][mask], expected[mask], atol=1e-5)


def test_context_tokens_get_no_gradient(tiny) -> None:
    """Changing a context token's sampling logprob or advantage weight changes nothing: only
    the loss mask's tokens reach the loss."""
    t = _multi_turn([5, 17, 29, 41])
    batch = build_batch([[t]], [1.0], pad_id=0)
    logprobs, _ = completion_logprobs(tiny, batch)
    weights = batch.completion_mask * torch.arange(1.0, 8.0)
    tiny.zero_grad(set_to_none=True)
    (logprobs * weights).sum().backward()
    masked = torch.cat([p.grad.flatten() for p in tiny.parameters() if p.grad is not None])
    tiny.zero_grad(set_to_none=True)
    logprobs, _ = completion_logprobs(tiny, batch)
    (logprobs[:, [0, 1, 2, 5, 6]] * torch.tensor([1.0, 2, 3, 6, 7])).sum().backward()
    only_sampled = torch.cat([p.grad.flatten() for p in tiny.parameters() if p.grad is not None])
    tiny.zero_grad(set_to_none=True)
    assert torch.allclose(masked, only_sampled, atol=1e-7)


def _groups() -> list[TrajectoryGroup]:
    c = Completion(0, [1, 2, 3], [7, 8], [-0.1, -0.2], "stop", text="ab")
    single = Trajectory.from_completion(c, 4, "e4", 2)
    single.reward, single.rewards = 0.5, {"math": 1.0}
    errored = Trajectory.from_completion(c, 4, "e4", 2)
    errored.errors = {"math": "timeout after 5s"}
    return [
        TrajectoryGroup(4, [single, errored]),
        TrajectoryGroup(9, [_multi_turn([1, 2], 9), _multi_turn([1, 2], 9)], 0.25),
    ]


def test_jsonl_round_trip_is_exact(tmp_path) -> None:
    path = tmp_path / "t.jsonl"
    groups = _groups()
    rows = list(group_records(groups, [False, True], 0, step=3))
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    back = read_trajectory_groups(path)
    assert [kept for _, kept in back] == [False, True]
    for (group, _), original in zip(back, groups):
        assert group.baseline_reward == original.baseline_reward
        assert group.example_index == original.example_index
        for a, b in zip(group.trajectories, original.trajectories):
            assert (a.prompt_ids, a.response_ids, a.loss_mask) == (b.prompt_ids, b.response_ids, b.loss_mask)
            assert a.sampling_logprobs == b.sampling_logprobs
            assert (a.reward, a.rewards, a.errors, a.policy_version) == (
                b.reward,
                b.rewards,
                b.errors,
                b.policy_version,
            )
    assert [g.example_index for g, _ in read_trajectory_groups(path, kept_only=True)] == [9]
    assert read_trajectory_groups(path, step=4) == []


@pytest.mark.parametrize(
    "edit,message",
    [
        (lambda r: r.pop("segments"), "missing key 'segments'"),
        (lambda r: r["segments"][0].pop("logprobs"), "one sampling logprob per token"),
        (lambda r: r.update(reward=float("nan")), "'reward' is not a finite number"),
        (lambda r: r.update(kept=False), "mixes prompts or kept flags"),
    ],
)
def test_a_malformed_row_names_file_and_line(tmp_path, edit, message: str) -> None:
    rows = list(group_records(_groups()[1:], [True], 0))
    edit(rows[1])
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(RlvrError, match=f"t.jsonl:2: .*{message}"):
        read_trajectory_groups(path)
