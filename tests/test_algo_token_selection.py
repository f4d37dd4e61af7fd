"""Forking tokens, Clip-Cov and KL-Cov: which tokens get a gradient, and how much."""

from __future__ import annotations

import math

import pytest
import torch

from rlvr.algo import POLICY_LOSSES
from rlvr.algo.token_selection import token_covariance, top_fraction


def run(name: str, new: torch.Tensor, old: torch.Tensor, adv: torch.Tensor, mask: torch.Tensor, **kw):
    new = new.clone().requires_grad_(True)
    per_token, stats = POLICY_LOSSES.get(name)(new, old, adv, mask, **kw)
    (per_token * mask).sum().backward()
    return per_token.detach(), new.grad, stats


ENTROPY = torch.tensor([[0.1, 2.0, 0.3, 9.0], [1.5, 0.2, 0.05, 0.4]])
MASK = torch.tensor([[1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 1.0, 1.0]])  # the 9.0 is padding


def test_forking_tokens_gradient_only_through_top_entropy_tokens() -> None:
    new = torch.full((2, 4), -1.0)
    _, grad, stats = run(
        "forking_tokens",
        new,
        new,
        torch.tensor([1.0, -2.0]),
        MASK,
        entropy=ENTROPY,
        top_q=0.3,
        inner="reinforce",
    )
    # 7 valid tokens, top 30% → ceil(2.1) = 3: entropies 2.0, 1.5, 0.4 (padding's 9.0 does not count)
    expected = torch.tensor([[0.0, -1.0, 0.0, 0.0], [2.0, 0.0, 0.0, 2.0]])
    assert torch.equal(grad, expected)
    assert stats["forking_frac"] == pytest.approx(3 / 7)


def test_forking_tokens_forwards_clip_context_to_ppo() -> None:
    old = torch.zeros(2, 4)
    new = torch.zeros(2, 4)
    new[0, 1] = 0.5  # selected, ratio 1.65 > 1 + clip_high for A > 0: PPO gives it no gradient
    _, grad, stats = run(
        "forking_tokens",
        new,
        old,
        torch.tensor([1.0, 1.0]),
        MASK,
        entropy=ENTROPY,
        top_q=0.3,
        clip_low=0.2,
        clip_high=0.2,
    )
    assert grad[0, 1] == 0.0 and grad[1, 0] == pytest.approx(-1.0) and grad[1, 3] == pytest.approx(-1.0)
    assert grad[0, 0] == 0.0 and stats["clip_frac"] > 0
    _, wide, _ = run(
        "forking_tokens",
        new,
        old,
        torch.tensor([1.0, 1.0]),
        MASK,
        entropy=ENTROPY,
        top_q=0.3,
        clip_low=0.2,
        clip_high=1.0,
    )
    assert wide[0, 1] == pytest.approx(-math.exp(0.5))  # a wider clip_high reaches the inner loss


def test_top_fraction_keeps_at_least_one_and_validates() -> None:
    assert top_fraction(ENTROPY, MASK, 1e-9).sum() == 1
    assert top_fraction(ENTROPY, MASK, 1.0).sum() == 7
    with pytest.raises(ValueError, match="top_q"):
        POLICY_LOSSES.get("forking_tokens")(ENTROPY, ENTROPY, torch.ones(2), MASK, entropy=ENTROPY, top_q=0.0)


# Two sequences of three tokens; A = (2, -2). Mean log π = -7.9/6, mean A = 0, so the covariance term is
# (log π + 7.9/6)·A: row 0: 2.43, -3.37, 2.23; row 1: 1.37, -2.43, 2.37.
LOGP = torch.tensor([[-0.1, -3.0, -0.2], [-2.0, -0.1, -2.5]])
ADV = torch.tensor([2.0, -2.0])
FULL = torch.ones(2, 3)


def test_token_covariance_hand_values() -> None:
    mean = -7.9 / 6
    expected = (LOGP - mean) * torch.tensor([[2.0], [-2.0]])
    assert torch.allclose(token_covariance(LOGP, ADV, FULL), expected)


def test_clip_cov_detaches_the_covariance_band_except_ppo_clipped_tokens() -> None:
    candidates = torch.tensor([[True, False, True], [True, False, True]])  # cov in (1, 5)
    values, grad, stats = run("clip_cov", LOGP, LOGP, ADV, FULL, clip_cov_ratio=1.0)
    assert torch.equal(grad == 0, candidates)  # all candidates fit in the budget: all detached
    assert torch.allclose(grad[~candidates], torch.tensor([-2.0, 2.0]))  # the rest: plain PG, -A
    ppo, _ = POLICY_LOSSES.get("ppo_clip")(LOGP, LOGP, ADV, FULL)
    assert torch.equal(values, ppo)  # detaching keeps the loss value
    assert stats["cov_detached_frac"] == pytest.approx(4 / 6)
    # a token PPO already clipped is not a candidate (its gradient is gone anyway)
    old = LOGP.clone()
    old[0, 0] -= 0.5  # ratio 1.65 with A > 0
    _, grad2, stats2 = run("clip_cov", LOGP, old, ADV, FULL, clip_cov_ratio=1.0)
    assert stats2["cov_detached_frac"] == pytest.approx(3 / 6)
    assert grad2[0, 0] == 0.0 and (grad2[candidates][1:] == 0).all()


def test_clip_cov_detaches_a_random_subset_of_the_budget() -> None:
    generator = torch.Generator().manual_seed(0)
    _, grad, stats = run("clip_cov", LOGP, LOGP, ADV, FULL, clip_cov_ratio=0.34, generator=generator)
    # budget int(0.34 * 6) = 2 of the 4 candidates
    detached = grad == 0
    assert detached.sum() == 2
    assert not (detached & torch.tensor([[False, True, False], [False, True, False]])).any()
    assert stats["cov_detached_frac"] == pytest.approx(2 / 6)


def test_kl_cov_penalises_the_top_covariance_tokens() -> None:
    old = LOGP - 0.1  # the policy moved: log π - log π_old = 0.1 everywhere
    values, grad, stats = run("kl_cov", LOGP, old, ADV, FULL, kl_cov_ratio=0.34, kl_coef=1.0)
    r = math.exp(0.1)
    # top int(0.34 * 6) = 2 by covariance: (0, 0) = 2.43 and (1, 2) = 2.37
    selected = torch.tensor([[True, False, False], [False, False, True]])
    adv = torch.tensor([[2.0] * 3, [-2.0] * 3])
    assert torch.allclose(values, -r * adv + 0.1 * selected)
    assert torch.allclose(grad, -r * adv + 1.0 * selected)
    assert stats["kl_cov_frac"] == pytest.approx(2 / 6)
    # on-policy the penalty is 0 and has no gradient
    _, grad_on, _ = run("kl_cov", LOGP, LOGP, ADV, FULL, kl_cov_ratio=0.34)
    assert torch.allclose(grad_on, -adv)
