"""The shared-prefix forward/backward gives the same logprobs and gradients as full sequences."""

from __future__ import annotations

import pytest
import torch

from rlvr.models import load_model
from rlvr.rollout import Completion
from rlvr.train.learn.batch import build_batch
from rlvr.train.learn.logprobs import completion_logprobs, completion_logprobs_simple


@pytest.fixture(scope="module")
def tiny():
    torch.manual_seed(0)
    return load_model("tiny-random")


def _groups(lengths_per_group: list[list[int]], prompt_lengths: list[int]) -> list[list[Completion]]:
    gen = torch.Generator().manual_seed(1)
    groups = []
    for p, (plen, lengths) in enumerate(zip(prompt_lengths, lengths_per_group)):
        prompt = torch.randint(10, 4000, (plen,), generator=gen).tolist()
        group = []
        for n in lengths:
            ids = torch.randint(10, 4000, (n,), generator=gen).tolist()
            group.append(Completion(p, prompt, ids, [0.0] * n, "stop"))
        groups.append(group)
    return groups


def _grads(model, fn, batch):
    model.zero_grad(set_to_none=True)
    logprobs, _ = fn(model, batch, temperature=0.7)
    weights = batch.completion_mask * batch.advantages[:, None]
    (logprobs * weights).sum().backward()
    grads = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
    return logprobs.detach(), grads


@pytest.mark.parametrize(
    "lengths,prompt_lengths",
    [
        ([[3, 7, 1, 5], [6, 2], [1]], [9, 4, 6]),
        ([[2, 4], [5]], [1, 7]),  # a one-token prompt: only padding in the shared pass
        ([[3, 1], [4, 4]], [1, 1]),  # no shared pass at all
        ([[1, 1], [1]], [5, 3]),  # every completion one token long
    ],
)
def test_shared_prefix_matches_full_sequences(tiny, lengths, prompt_lengths) -> None:
    groups = _groups(lengths, prompt_lengths=prompt_lengths)
    rows = sum(len(group) for group in groups)
    batch = build_batch(groups, torch.linspace(-1, 1, rows).tolist(), pad_id=2)
    fast_lp, fast_g = _grads(tiny, completion_logprobs, batch)
    slow_lp, slow_g = _grads(tiny, completion_logprobs_simple, batch)
    mask = batch.completion_mask.bool()
    assert torch.allclose(fast_lp[mask], slow_lp[mask], atol=1e-5)
    # fp32 sums in a different order: elements small beside the largest gradient differ by up to
    # ~1e-5 of it (measured 7e-6 on tiny-random), so the tolerance scales with the largest gradient.
    assert torch.allclose(fast_g, slow_g, rtol=1e-4, atol=2e-5 * float(slow_g.abs().max()))
    assert not torch.isnan(fast_g).any()


def test_selecting_rows_keeps_only_their_prompts_and_trims_padding() -> None:
    groups = _groups([[3, 2], [8, 1]], prompt_lengths=[5, 12])
    batch = build_batch(groups, [1.0, -1.0, 0.5, -0.5], pad_id=2)
    sub = batch.select(slice(0, 2))
    assert sub.prompt_ids.shape == (1, 5)  # the 12-token prompt and its padding are gone
    assert sub.completion_ids.shape == (2, 3)
    assert sub.group_index.tolist() == [0, 0]
    assert sub.advantages.tolist() == [1.0, -1.0]


def _update_delta(groups, advantages, loss_scale: float) -> torch.Tensor:
    """Parameter change of one plain-SGD policy_update (lr 1, no clipping) from a fixed start."""
    from rlvr.config.schema import AlgoConfig
    from rlvr.train.learn.update import policy_update

    torch.manual_seed(0)
    model = load_model("tiny-random")
    before = torch.cat([p.detach().flatten().clone() for p in model.parameters()])
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    batch = build_batch(groups, advantages, pad_id=2)
    policy_update(model, optimizer, scheduler, batch, AlgoConfig(), 1e9, 1.0, 16, loss_scale=loss_scale)
    return torch.cat([p.detach().flatten() for p in model.parameters()]) - before


def test_sampled_loss_norm_equals_training_on_the_dropped_groups() -> None:
    """Dropping a zero-advantage group and scaling by the kept token share (algo.loss_norm=sampled)
    gives the update of training on every sampled group; without the scale it is larger."""
    informative = _groups([[3, 7, 5]], prompt_lengths=[6])[0]
    dropped = _groups([[4, 2, 6]], prompt_lengths=[5])[0]
    advantages = [1.0, -0.5, -0.5]
    full = _update_delta([informative, dropped], advantages + [0.0, 0.0, 0.0], 1.0)
    share = 15 / 27  # kept tokens / sampled tokens
    scaled = _update_delta([informative], advantages, share)
    unscaled = _update_delta([informative], advantages, 1.0)
    assert full.abs().max() > 1e-6
    assert torch.allclose(scaled, full, rtol=1e-4, atol=1e-7)
    assert torch.allclose(unscaled * share, full, rtol=1e-4, atol=1e-7)
    assert not torch.allclose(unscaled, full, rtol=1e-2)


def test_a_token_sum_loss_is_never_rescaled_by_the_kept_share() -> None:
    """A sum has no denominator: dropping zero-advantage groups changes nothing, so
    ``algo.loss_norm=sampled`` must not scale it (it does scale the averaging modes)."""
    from rlvr.config import load_config
    from rlvr.train.learn.learner import loss_scale
    from rlvr.trajectory import Trajectory, TrajectoryGroup

    def group(index: int, lengths: list[int], prompt: int) -> TrajectoryGroup:
        (completions,) = _groups([lengths], prompt_lengths=[prompt])
        return TrajectoryGroup(index, [Trajectory.from_completion(c, index, "", 0) for c in completions])

    kept = [group(0, [3, 7, 5], 6)]
    sampled = kept + [group(1, [4, 2, 6], 5)]
    summed = load_config(None, ["algo.loss_agg=token-sum", "algo.loss_norm=sampled"])
    averaged = load_config(None, ["algo.loss_agg=token-mean", "algo.loss_norm=sampled"])
    assert loss_scale(summed, kept, sampled) == 1.0
    assert loss_scale(averaged, kept, sampled) < 1.0
