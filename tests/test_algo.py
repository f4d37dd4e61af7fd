"""Advantages, losses, KL estimators, aggregation and filters against hand-computed values."""

from __future__ import annotations

import math

import pytest
import torch

from rlvr.algo import (
    ADVANTAGE_ESTIMATORS,
    KL_ESTIMATORS,
    POLICY_LOSSES,
    grpo_advantages,
    informative_groups,
    token_weights,
)
from rlvr.errors import RlvrError


def test_grpo_advantages_mean_and_std_per_group() -> None:
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 2.0, 2.0])
    groups = torch.tensor([0, 0, 0, 0, 1, 1])
    adv = grpo_advantages(rewards, groups, eps=0.0)
    # group 0: mean 0.5, unbiased std sqrt(1/3); group 1 all equal -> zero, not NaN
    s = math.sqrt(1 / 3)
    assert torch.allclose(adv, torch.tensor([0.5 / s, -0.5 / s, -0.5 / s, 0.5 / s, 0.0, 0.0]), atol=1e-5)


def test_grpo_without_std_is_mean_centred_only() -> None:
    rewards = torch.tensor([3.0, 1.0, 5.0])
    adv = grpo_advantages(rewards, torch.tensor([0, 0, 1]), normalize_std=False)
    assert adv.tolist() == [1.0, -1.0, 0.0]


def test_groups_of_different_sizes() -> None:
    rewards = torch.tensor([1.0, 0.0, 1.0, 0.0, 0.0])
    groups = torch.tensor([0, 0, 1, 1, 1])
    adv = grpo_advantages(rewards, groups, normalize_std=False)
    assert torch.allclose(adv, torch.tensor([0.5, -0.5, 2 / 3, -1 / 3, -1 / 3]))


def test_registry_lookup_and_error_lists_names() -> None:
    assert ADVANTAGE_ESTIMATORS.get("grpo") is grpo_advantages
    with pytest.raises(RlvrError, match="allowed: .*grpo"):
        ADVANTAGE_ESTIMATORS.get("nope")


def test_ppo_clip_loss_values_and_clip_fraction() -> None:
    old = torch.zeros(1, 3)
    # ratios e^0.5≈1.65 (clipped at 1.28 for A>0), e^-0.5≈0.61 (clipped at 0.8 for A<0 → max), 1
    new = torch.tensor([[0.5, -0.5, 0.0]])
    mask = torch.ones(1, 3)
    loss, stats = POLICY_LOSSES.get("ppo_clip")(
        new, old, torch.tensor([1.0]), mask, clip_low=0.2, clip_high=0.28
    )
    assert torch.allclose(loss, torch.tensor([[-1.28, -math.exp(-0.5), -1.0]]), atol=1e-5)
    assert stats["clip_frac"] == pytest.approx(1 / 3)
    loss_neg, _ = POLICY_LOSSES.get("ppo_clip")(
        new, old, torch.tensor([-1.0]), mask, clip_low=0.2, clip_high=0.28
    )
    # negative advantage: -min(r*A, clip(r)*A) = max(r, clip(r)) → e^0.5, 0.8, 1
    assert torch.allclose(loss_neg, torch.tensor([[math.exp(0.5), 0.8, 1.0]]), atol=1e-5)


def test_ppo_clip_gradient_zero_where_clipped() -> None:
    new = torch.tensor([[0.5, 0.0]], requires_grad=True)
    loss, _ = POLICY_LOSSES.get("ppo_clip")(new, torch.zeros(1, 2), torch.tensor([1.0]), torch.ones(1, 2))
    loss.sum().backward()
    assert new.grad[0, 0] == 0.0  # ratio 1.65 > 1.2: clipped, no gradient
    assert new.grad[0, 1] == pytest.approx(-1.0)  # d(-r)/dlogp at r=1


def test_kl_estimators_hand_values() -> None:
    lp, ref = torch.tensor([-1.0]), torch.tensor([-2.0])
    assert KL_ESTIMATORS.get("k1")(lp, ref).item() == pytest.approx(1.0)
    assert KL_ESTIMATORS.get("k2")(lp, ref).item() == pytest.approx(0.5)
    assert KL_ESTIMATORS.get("k3")(lp, ref).item() == pytest.approx(math.exp(-1) - 1 + 1)
    same = KL_ESTIMATORS.get("k3")(lp, lp)
    assert same.item() == 0.0


def test_k3_is_unbiased_estimate_of_kl() -> None:
    torch.manual_seed(0)
    p = torch.tensor([0.7, 0.2, 0.1])
    q = torch.tensor([0.4, 0.4, 0.2])
    samples = torch.multinomial(p, 200_000, replacement=True)
    est = KL_ESTIMATORS.get("k3")(p.log()[samples], q.log()[samples]).mean()
    exact = (p * (p / q).log()).sum()
    assert est.item() == pytest.approx(exact.item(), abs=3e-3)


def test_aggregation_weights() -> None:
    mask = torch.tensor([[1.0, 1.0, 1.0, 1.0], [1.0, 1.0, 0.0, 0.0]])
    loss = torch.tensor([[1.0, 1.0, 1.0, 1.0], [4.0, 4.0, 9.0, 9.0]])
    agg = {
        m: float((loss * token_weights(mask, m, max_tokens=8)).sum())
        for m in ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm")
    }
    assert agg["token-mean"] == pytest.approx((4 + 8) / 6)
    assert agg["seq-mean-token-mean"] == pytest.approx((1 + 4) / 2)
    assert agg["seq-mean-token-sum"] == pytest.approx((4 + 8) / 2)
    assert agg["seq-mean-token-sum-norm"] == pytest.approx((4 + 8) / (2 * 8))
    with pytest.raises(ValueError, match="allowed"):
        token_weights(mask, "mean-of-everything")


def test_informative_groups_drops_all_equal() -> None:
    rewards = torch.tensor([1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.5])
    groups = torch.tensor([0, 0, 1, 1, 2, 2, 3])
    assert informative_groups(rewards, groups).tolist() == [False, True, False, False]
