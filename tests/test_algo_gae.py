"""GAE, the clipped value loss, KL folded into rewards and the adaptive coefficient controllers."""

from __future__ import annotations

import math

import pytest
import torch

from rlvr.algo import (
    ADVANTAGE_ESTIMATORS,
    adaptive_entropy_coef,
    adaptive_kl_coef,
    gae_advantages_and_returns,
    kl_penalized_rewards,
    value_loss,
)

NAN = float("nan")
MASK = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
VALUES = torch.tensor([[0.5, 0.5, 0.5], [1.0, 0.5, NAN]])  # padding holds garbage


def test_gae_with_gamma_lambda_one_is_return_minus_value() -> None:
    rewards = torch.tensor([[0.0, 0.0, 1.0], [0.0, 2.0, NAN]])
    adv, ret = gae_advantages_and_returns(rewards, VALUES, MASK, gamma=1.0, lam=1.0)
    assert torch.equal(adv, torch.tensor([[0.5, 0.5, 0.5], [1.0, 1.5, 0.0]]))
    assert torch.equal(ret, torch.tensor([[1.0, 1.0, 1.0], [2.0, 2.0, 0.0]]))


def test_gae_hand_values_with_discount() -> None:
    rewards = torch.tensor([[0.0, 0.0, 1.0]])
    adv, ret = gae_advantages_and_returns(rewards, VALUES[:1], MASK[:1], gamma=0.5, lam=0.5)
    # δ2 = 1 - .5 = .5; δ1 = .5*.5 - .5 = -.25; δ0 = -.25; A1 = -.25 + .25*.5; A0 = -.25 + .25*A1
    a1 = -0.25 + 0.25 * 0.5
    a0 = -0.25 + 0.25 * a1
    assert torch.allclose(adv, torch.tensor([[a0, a1, 0.5]]))
    assert torch.allclose(ret, adv + 0.5)


def test_registered_gae_places_the_reward_on_the_last_token() -> None:
    fn = ADVANTAGE_ESTIMATORS.get("gae")
    adv, targets = fn(
        torch.tensor([1.0, 2.0]),
        torch.tensor([0, 0]),
        values=VALUES,
        lengths=torch.tensor([3.0, 2.0]),
        gamma=1.0,
        lam=1.0,
        normalize=False,
    )
    assert torch.equal(adv, torch.tensor([[0.5, 0.5, 0.5], [1.0, 1.5, 0.0]]))
    # the critic's targets: advantages + values (the return-to-go here), 0 on padding
    assert torch.equal(targets["returns"], torch.tensor([[1.0, 1.0, 1.0], [2.0, 2.0, 0.0]]))
    # per-token rewards (e.g. a KL penalty) are added before the recursion
    extra = torch.tensor([[-0.1, 0.0, 0.0], [0.0, 0.0, 0.0]])
    adv2, _ = fn(
        torch.tensor([1.0, 2.0]),
        torch.tensor([0, 0]),
        values=VALUES,
        lengths=torch.tensor([3.0, 2.0]),
        lam=1.0,
        token_rewards=extra,
        normalize=False,
    )
    assert torch.allclose(adv2[0], torch.tensor([0.4, 0.5, 0.5]))
    whitened, targets = fn(
        torch.tensor([1.0, 2.0]), torch.tensor([0, 0]), values=VALUES, lengths=torch.tensor([3.0, 2.0])
    )
    valid = MASK.bool()
    assert whitened[valid].mean().abs() < 1e-6 and whitened[valid].std() == pytest.approx(1.0, abs=1e-5)
    assert whitened[1, 2] == 0.0
    # whitening touches the advantages only; the returns stay in reward units
    _, ret = gae_advantages_and_returns(
        torch.tensor([[0.0, 0.0, 1.0], [0.0, 2.0, 0.0]]), VALUES, MASK, gamma=1.0, lam=0.95
    )
    assert torch.allclose(targets["returns"], ret)


def test_value_loss_clips_around_old_values() -> None:
    values = torch.tensor([[1.0, 0.0, 7.0]], requires_grad=True)
    old = torch.tensor([[0.5, 0.5, 0.0]])
    returns = torch.tensor([[2.0, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    loss, stats = value_loss(values, old, returns, mask, clip_range=0.2)
    # t0: max((1-2)², (0.7-2)²) / 2 = 0.845 ; t1: max(0², (0.3-0)²) / 2 = 0.045 ; padding 0
    assert torch.allclose(loss, torch.tensor([[0.845, 0.045, 0.0]]))
    assert stats["value_clip_frac"] == 1.0
    loss.sum().backward()
    assert values.grad.tolist() == [[0.0, 0.0, 0.0]]  # both valid tokens are on the clipped branch


def test_kl_penalized_rewards() -> None:
    kl = torch.tensor([[0.1, 0.2, 0.3], [0.4, 0.5, math.inf]])
    out = kl_penalized_rewards(torch.tensor([1.0, 2.0]), kl, MASK, coef=0.5)
    assert torch.allclose(out, torch.tensor([[-0.05, -0.1, 0.85], [-0.2, 1.75, 0.0]]))


def test_adaptive_kl_coef_moves_towards_target() -> None:
    assert adaptive_kl_coef(0.1, observed_kl=0.3, target=0.1, horizon=100, n_steps=10) == pytest.approx(0.102)
    assert adaptive_kl_coef(0.1, observed_kl=0.09, target=0.1, horizon=100, n_steps=10) == pytest.approx(
        0.099
    )
    with pytest.raises(ValueError):
        adaptive_kl_coef(0.1, 0.1, target=0.0)


def test_adaptive_entropy_coef_steps_and_clamps() -> None:
    assert adaptive_entropy_coef(1e-3, entropy=0.5, target=1.0, step=5e-4) == pytest.approx(1.5e-3)
    assert adaptive_entropy_coef(1e-3, entropy=1.5, target=1.0, step=5e-4) == pytest.approx(5e-4)
    assert adaptive_entropy_coef(2e-4, entropy=2.0, target=1.0, step=5e-4) == 0.0
    assert adaptive_entropy_coef(1e-2, entropy=0.1, target=1.0, max_coef=1e-2) == 1e-2
