"""SFT + RL in one loss: SFT term, CHORD's weights and schedule, LUFFY's shaped loss on given tokens."""

from __future__ import annotations

import math

import pytest
import torch

from rlvr.algo import POLICY_LOSSES, chord_mu, chord_token_weights, ppo_clip_loss, sft_token_loss


def test_sft_token_loss_is_masked_negative_logprob() -> None:
    logprobs = torch.tensor([[-1.0, -2.5, -math.inf]], requires_grad=True)
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    loss = sft_token_loss(logprobs, mask)
    assert loss.tolist() == [[1.0, 2.5, 0.0]]
    loss.sum().backward()
    assert logprobs.grad.tolist() == [[-1.0, -1.0, 0.0]]


def test_chord_token_weights_are_p_times_one_minus_p_and_detached() -> None:
    logprobs = torch.log(torch.tensor([[0.5, 0.9, 1e-3, 1.0]])).requires_grad_(True)
    weights = chord_token_weights(logprobs)
    assert weights[0].tolist() == pytest.approx([0.25, 0.9 * 0.1, 1e-3 * 0.999, 0.0])
    assert not weights.requires_grad


def test_chord_mu_warms_up_linearly_then_decays_by_cosine() -> None:
    kw = {"total_steps": 110, "mu_peak": 0.8, "warmup_steps": 10, "mu_end": 0.1}
    assert chord_mu(0, **kw) == 0.0
    assert chord_mu(5, **kw) == pytest.approx(0.4)
    assert chord_mu(10, **kw) == pytest.approx(0.8)
    assert chord_mu(35, **kw) == pytest.approx(0.1 + 0.7 * 0.5 * (1 + math.cos(math.pi / 4)))
    assert chord_mu(60, **kw) == pytest.approx(0.45)  # halfway through the decay
    assert chord_mu(110, **kw) == pytest.approx(0.1)
    assert chord_mu(500, **kw) == pytest.approx(0.1)
    assert chord_mu(0, total_steps=10, mu_peak=0.5, warmup_steps=0, mu_end=0.0) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="warmup_steps"):
        chord_mu(0, total_steps=5, mu_peak=0.5, warmup_steps=10, mu_end=0.0)
    with pytest.raises(ValueError, match="mu_peak"):
        chord_mu(0, total_steps=5, mu_peak=1.5, warmup_steps=1, mu_end=0.0)


def luffy(new, old, adv, mask, **kw):
    new = new.clone().requires_grad_(True)
    per_token, stats = POLICY_LOSSES.get("luffy")(new, old, adv, mask, **kw)
    (per_token * mask).sum().backward()
    return per_token.detach(), new.grad, stats


GAMMA, A = 0.1, 2.0
# tokens 0, 1 given (π = 0.5, 0.02); 2, 3 sampled (ratio e^0.1 inside the clip, e^0.5 outside)
NEW = torch.tensor([[math.log(0.5), math.log(0.02), -1.0, -0.5]])
OLD = torch.tensor([[math.nan, -math.inf, -1.1, -1.0]])  # no old log-prob exists for given tokens
GIVEN = torch.tensor([[1.0, 1.0, 0.0, 0.0]])
MASK = torch.ones(1, 4)


def test_luffy_given_tokens_get_the_shaped_ratio_value_and_gradient() -> None:
    values, grad, stats = luffy(NEW, OLD, torch.tensor([A]), MASK, given_mask=GIVEN, gamma=GAMMA)
    for i, pi in enumerate((0.5, 0.02)):
        assert float(values[0, i]) == pytest.approx(-A * pi / (pi + GAMMA))
        # d/dlog π of −A·π/(π+γ) = −A·γ·π/(π+γ)²: no clip, no old log-prob
        assert float(grad[0, i]) == pytest.approx(-A * GAMMA * pi / (pi + GAMMA) ** 2)
    assert torch.isfinite(values).all() and torch.isfinite(grad).all()
    assert stats["luffy/given_share"] == pytest.approx(0.5)


def test_luffy_sampled_tokens_match_ppo_clip_exactly() -> None:
    values, grad, stats = luffy(
        NEW, OLD, torch.tensor([A]), MASK, given_mask=GIVEN, clip_low=0.2, clip_high=0.3
    )
    new = NEW.clone().requires_grad_(True)
    sampled = MASK * (1 - GIVEN)
    ppo, ppo_stats = ppo_clip_loss(new, OLD, torch.tensor([A]), sampled, 0.2, 0.3)
    (ppo * sampled).sum().backward()
    assert torch.equal(values[0, 2:], ppo.detach()[0, 2:])
    assert torch.equal(grad[0, 2:], new.grad[0, 2:])
    assert grad[0, 3] == 0.0 and grad[0, 2] != 0.0  # e^0.5 > 1.3 is clipped, e^0.1 is not
    assert stats["clip_frac"] == ppo_stats["clip_frac"] == pytest.approx(0.5)  # over sampled tokens only


def test_luffy_without_given_tokens_is_ppo_clip() -> None:
    old = torch.tensor([[-0.6, -3.0, -1.1, -1.0]])
    adv = torch.tensor([[1.0, -2.0, 0.5, 1.5]])
    values, grad, stats = luffy(NEW, old, adv, MASK)
    new = NEW.clone().requires_grad_(True)
    ppo, ppo_stats = ppo_clip_loss(new, old, adv, MASK)
    (ppo * MASK).sum().backward()
    assert torch.equal(values, ppo.detach()) and torch.equal(grad, new.grad)
    assert stats == {**ppo_stats, "luffy/given_share": 0.0}


def test_luffy_per_sequence_and_per_token_advantages_agree() -> None:
    seq, grad_seq, _ = luffy(NEW, OLD, torch.tensor([A]), MASK, given_mask=GIVEN)
    tok, grad_tok, _ = luffy(NEW, OLD, torch.full((1, 4), A), MASK, given_mask=GIVEN)
    assert torch.equal(seq, tok) and torch.equal(grad_seq, grad_tok)


def test_luffy_given_share_counts_only_trained_tokens() -> None:
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0]])
    given = torch.tensor([[1.0, 0.0, 0.0, 1.0]])  # the padded given token does not count
    _, _, stats = luffy(NEW, OLD, torch.tensor([A]), mask, given_mask=given)
    assert stats["luffy/given_share"] == pytest.approx(1 / 3)
    with pytest.raises(ValueError, match="gamma"):
        luffy(NEW, OLD, torch.tensor([A]), MASK, given_mask=GIVEN, gamma=0.0)


def test_luffy_padding_may_hold_any_finite_value() -> None:
    new = torch.tensor([[math.log(0.5), -1.0, 100.0]])  # the last token is padding
    old, mask = torch.tensor([[0.0, -1.1, 0.0]]), torch.tensor([[1.0, 1.0, 0.0]])
    values, grad, _ = luffy(new, old, torch.tensor([A]), mask, given_mask=torch.tensor([[1.0, 0.0, 0.0]]))
    assert torch.isfinite(values).all() and torch.isfinite(grad).all()
