"""Policy losses: values, and which tokens get which gradient."""

from __future__ import annotations

import math

import pytest
import torch

from rlvr.algo import ADVANTAGE_ESTIMATORS, POLICY_LOSSES, token_weights
from rlvr.errors import RlvrError
from rlvr.registry import accepted_context


def loss(name: str, *args, **kw):
    return POLICY_LOSSES.get(name)(*args, **kw)


def grads(name: str, new: torch.Tensor, old: torch.Tensor, adv: torch.Tensor, mask: torch.Tensor, **kw):
    new = new.clone().requires_grad_(True)
    per_token, stats = loss(name, new, old, adv, mask, **kw)
    (per_token * mask).sum().backward()
    return per_token.detach(), new.grad, stats


def test_dual_clip_caps_negative_advantage_losses() -> None:
    new, old, mask = torch.tensor([[1.5, 0.0, -0.5]]), torch.zeros(1, 3), torch.ones(1, 3)
    values, grad, stats = grads("dual_clip", new, old, torch.tensor([-1.0]), mask, clip_c=3.0)
    # PPO alone: max(r, clip(r)) = e^1.5, 1, 0.8 ; dual clip caps the first at c = 3 (and cuts its gradient)
    assert torch.allclose(values, torch.tensor([[3.0, 1.0, 0.8]]))
    assert grad[0, 0] == 0.0 and grad[0, 1] == pytest.approx(1.0) and grad[0, 2] == 0.0
    assert stats["dual_clip_frac"] == pytest.approx(1 / 3)
    ppo, _ = loss("ppo_clip", new, old, torch.tensor([1.0]), mask)
    dual, _ = loss("dual_clip", new, old, torch.tensor([1.0]), mask)
    assert torch.equal(ppo, dual)  # positive advantages: plain PPO
    with pytest.raises(ValueError, match="clip_c"):
        loss("dual_clip", new, old, torch.tensor([1.0]), mask, clip_c=1.0)


def test_reinforce_is_minus_advantage_times_logprob() -> None:
    new = torch.tensor([[-0.5, -2.0], [-1.0, -1.0]])
    values, grad, _ = grads("reinforce", new, torch.zeros(2, 2), torch.tensor([2.0, -1.0]), torch.ones(2, 2))
    assert torch.allclose(values, torch.tensor([[1.0, 4.0], [-1.0, -1.0]]))
    assert grad.tolist() == [[-2.0, -2.0], [1.0, 1.0]]


def test_cispo_keeps_gradient_of_clipped_tokens_through_a_detached_weight() -> None:
    # log π = -1 ± 0.5: non-zero, so a weight that were not detached would add -A·log π·∂w/∂log π
    old, mask = torch.full((1, 3), -1.0), torch.ones(1, 3)
    new = old + torch.tensor([[0.5, 0.0, -0.5]])
    _, grad, stats = grads("cispo", new, old, torch.tensor([1.0]), mask, clip_low=0.2, clip_high=0.2)
    # weight = clip(r, 0.8, 1.2) = 1.2, 1, 0.8 (no gradient through it): d/dlogp = -w·A
    assert torch.allclose(grad, torch.tensor([[-1.2, -1.0, -0.8]]))
    assert stats["clip_frac"] == pytest.approx(2 / 3)
    _, ppo_grad, _ = grads("ppo_clip", new, old, torch.tensor([1.0]), mask, clip_low=0.2, clip_high=0.2)
    assert ppo_grad[0, 0] == 0.0  # where PPO drops the token, CISPO keeps it
    _, grad_neg, _ = grads("cispo", new, old, torch.tensor([-2.0]), mask, clip_low=0.2, clip_high=0.2)
    assert torch.allclose(grad_neg, torch.tensor([[2.4, 2.0, 1.6]]))


def test_gspo_uses_one_clipped_geometric_mean_ratio_per_sequence() -> None:
    new = torch.tensor([[0.2, 0.4, 0.0], [0.0, 0.0, 3.0]])
    old = torch.tensor([[0.0, 0.0, 0.0], [0.0, 0.0, -math.inf]])  # padding may hold anything
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    values, grad, stats = grads("gspo", new, old, torch.tensor([1.0, 1.0]), mask, clip_low=0.2, clip_high=0.2)
    # row 0: s = exp(mean(.2, .4, 0)) = e^0.2 = 1.22 > 1.2 → clipped: value -1.2, no gradient
    # row 1: s = exp(mean(0, 0)) = 1 → value -1, gradient -s·A = -1 on each valid token
    assert torch.allclose(values[0], torch.full((3,), -1.2))
    assert torch.allclose(values[1, :2], torch.full((2,), -1.0))
    assert torch.isfinite(values).all()
    assert grad[0].abs().max() == 0.0
    assert torch.allclose(grad[1, :2], torch.tensor([-1.0, -1.0]))
    assert stats["clip_frac"] == pytest.approx(3 / 5)


def test_gspo_token_form_has_the_sequence_level_gradient() -> None:
    torch.manual_seed(0)
    new = torch.randn(4, 5) * 0.1 - 1.0
    old = new + torch.randn(4, 5) * 0.1
    mask = torch.tensor([[1.0] * 5, [1.0] * 3 + [0.0] * 2, [1.0] * 4 + [0.0], [1.0] * 2 + [0.0] * 3])
    adv = torch.tensor([1.0, -0.5, 2.0, -1.0])
    x = new.clone().requires_grad_(True)
    per_token, _ = loss("gspo", x, old, adv, mask, clip_low=0.02, clip_high=0.03)
    (per_token * token_weights(mask, "seq-mean-token-mean")).sum().backward()
    grad = x.grad
    # reference: the paper's sequence-level objective, mean over sequences
    x = new.clone().requires_grad_(True)
    s = torch.exp(((x - old) * mask).sum(1) / mask.sum(1))
    seq_loss = -torch.minimum(s * adv, s.clamp(1 - 0.02, 1 + 0.03) * adv)
    seq_loss.mean().backward()
    assert torch.allclose(grad, x.grad, atol=1e-6)
    # row 2 (s = 1.031 > 1.03, A > 0) is clipped as a whole; the others are not
    assert x.grad[2].abs().sum() == 0 and (x.grad[[0, 1, 3]].abs().sum(1) > 0).all()


def test_ppo_clip_padding_with_infinite_old_logprobs_stays_finite() -> None:
    new = torch.tensor([[0.0, -1.0]], requires_grad=True)
    per_token, _ = loss(
        "ppo_clip", new, torch.tensor([[0.0, -math.inf]]), torch.tensor([1.0]), torch.tensor([[1.0, 0.0]])
    )
    assert torch.isfinite(per_token).all()


def test_psr_nsr_gradient_reaches_only_the_selected_samples() -> None:
    rewards, groups = torch.tensor([1.0, 0.0, 1.0, 0.0]), torch.tensor([0, 0, 1, 1])
    new, mask = torch.full((4, 3), -1.0), torch.ones(4, 3)
    psr = ADVANTAGE_ESTIMATORS.get("psr_nsr")(rewards, groups, negative_weight=0.0)
    nsr = ADVANTAGE_ESTIMATORS.get("psr_nsr")(rewards, groups, positive_weight=0.0)
    _, g_psr, _ = grads("reinforce", new, new, psr, mask)
    _, g_nsr, _ = grads("reinforce", new, new, nsr, mask)
    correct = rewards.bool()
    assert (g_psr[correct] < 0).all() and (g_psr[~correct] == 0).all()  # PSR: raise correct ones only
    assert (g_nsr[~correct] > 0).all() and (g_nsr[correct] == 0).all()  # NSR: push down wrong ones only
    w = ADVANTAGE_ESTIMATORS.get("w_reinforce")(rewards, groups)
    _, g_w, _ = grads("reinforce", new, new, w, mask)
    assert torch.allclose(g_w[correct], torch.full_like(g_w[correct], -0.1))
    assert torch.allclose(g_w[~correct], torch.ones_like(g_w[~correct]))


def test_wrapper_typo_in_inner_params_is_an_error() -> None:
    args = (torch.zeros(1, 2), torch.zeros(1, 2), torch.tensor([1.0]), torch.ones(1, 2))
    with pytest.raises(RlvrError, match="inner_params.*clip_cc"):
        loss(
            "forking_tokens", *args, entropy=torch.ones(1, 2), inner="dual_clip", inner_params={"clip_cc": 2}
        )
    with pytest.raises(RlvrError, match="unknown policy loss"):
        loss("forking_tokens", *args, entropy=torch.ones(1, 2), inner="nope")


# The trainer's loss context (src/rlvr/train/learn/update.py) plus what the not-yet-wired losses name.
def _context(B: int, T: int) -> dict:
    return {
        "clip_low": 0.2,
        "clip_high": 0.28,
        "entropy": torch.rand(B, T),
        "sampling_logprobs": -torch.rand(B, T),
        "truncated": torch.tensor([True] + [False] * (B - 1)),
        "entropy_with_grad": torch.rand(B, T, requires_grad=True),
        "group_index": torch.arange(B) // 2,
        "completion_ids": torch.randint(0, 1000, (B, T)),
        "logsumexp": torch.rand(B, T, requires_grad=True),
    }


REQUIRED_PARAMS = {"hicra": {"tokenizer": "tiny-random"}}  # a loss's params with no default


@pytest.mark.parametrize("name", POLICY_LOSSES.names())
def test_every_loss_runs_with_the_trainer_context(name: str) -> None:
    torch.manual_seed(1)
    B, T = 4, 6
    mask = torch.ones(B, T)
    mask[1, 4:] = 0
    mask[3, 2:] = 0
    new = (-torch.rand(B, T) * 3).requires_grad_(True)
    old = new.detach() + torch.randn(B, T) * 0.3
    old[mask == 0] = 0.0  # what the trainer leaves in padding
    fn = POLICY_LOSSES.get(name)
    kwargs = accepted_context(fn, _context(B, T), REQUIRED_PARAMS.get(name, {}), "algo.loss_params")
    for adv in (torch.randn(B), torch.randn(B, T)):
        per_token, stats = fn(new, old, adv, mask, **kwargs)
        assert per_token.shape == (B, T) and torch.isfinite(per_token).all()
        assert all(isinstance(v, float) and math.isfinite(v) for v in stats.values())
        (per_token * token_weights(mask, "token-mean")).sum().backward()
        assert torch.isfinite(new.grad).all()
        new.grad = None
