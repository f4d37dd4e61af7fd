"""Loss modifiers: sampler importance correction, low-probability reweighting, overlong filtering,
entropy bonus."""

from __future__ import annotations

import math

import pytest
import torch

from rlvr.algo import POLICY_LOSSES, entropy_bonus_loss, overlong_mask


def run(name: str, new: torch.Tensor, old: torch.Tensor, adv: torch.Tensor, mask: torch.Tensor, **kw):
    new = new.clone().requires_grad_(True)
    per_token, stats = POLICY_LOSSES.get(name)(new, old, adv, mask, **kw)
    (per_token * mask).sum().backward()
    return per_token.detach(), new.grad, stats


OLD = torch.tensor([[-1.0, -2.0]])
SAMPLER = torch.tensor([[-1.5, -1.9]])  # sampler ratios π_old/π_sampler: e^0.5 = 1.65, e^-0.1 = 0.905
ONE = torch.ones(1, 2)


def test_tis_weights_by_truncated_sampler_ratio() -> None:
    values, grad, stats = run(
        "tis", OLD, OLD, torch.tensor([1.0]), ONE, sampling_logprobs=SAMPLER, cap=1.5, inner="reinforce"
    )
    w = torch.tensor([[1.5, math.exp(-0.1)]])
    assert torch.allclose(values, w * -OLD)
    assert torch.allclose(grad, -w)
    assert stats["tis_capped_frac"] == 0.5
    assert stats["tis_weight_mean"] == pytest.approx((1.5 + math.exp(-0.1)) / 2)


def test_masked_is_drops_tokens_or_sequences_outside_the_band() -> None:
    kw = dict(sampling_logprobs=SAMPLER, inner="reinforce")
    _, grad, stats = run("masked_is", OLD, OLD, torch.tensor([1.0]), ONE, low=0.8, high=1.2, **kw)
    assert grad.tolist() == [[0.0, -1.0]] and stats["is_masked_frac"] == 0.5
    # sequence level: geometric mean ratio e^0.2 = 1.22
    _, grad_seq, _ = run("masked_is", OLD, OLD, torch.tensor([1.0]), ONE, high=1.2, level="sequence", **kw)
    assert grad_seq.tolist() == [[0.0, 0.0]]
    _, grad_keep, _ = run("masked_is", OLD, OLD, torch.tensor([1.0]), ONE, high=1.3, level="sequence", **kw)
    assert grad_keep.tolist() == [[-1.0, -1.0]]
    with pytest.raises(ValueError, match="level"):
        run("masked_is", OLD, OLD, torch.tensor([1.0]), ONE, level="batch", **kw)


def test_lowprob_downweight_scales_advantages_by_token_probability() -> None:
    old = torch.tensor([[0.9, 0.1]]).log()
    _, grad, stats = run(
        "lowprob_downweight", old, old, torch.tensor([1.0]), ONE, alpha=0.5, inner="reinforce"
    )
    assert torch.allclose(grad, torch.tensor([[-0.95, -0.55]]))  # A·(α·p + 1 − α)
    assert stats["adv_weight_mean"] == pytest.approx(0.75)
    _, unchanged, _ = run(
        "lowprob_downweight", old, old, torch.tensor([1.0]), ONE, alpha=0.0, inner="reinforce"
    )
    assert torch.allclose(unchanged, torch.tensor([[-1.0, -1.0]]))
    # wrapping PPO: on-policy gradient is the same reweighted -A·w
    _, ppo, _ = run("lowprob_downweight", old, old, torch.tensor([2.0]), ONE, alpha=0.5)
    assert torch.allclose(ppo, torch.tensor([[-1.9, -1.1]]))


def test_overlong_mask_and_filter_drop_truncated_completions() -> None:
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    truncated = torch.tensor([True, False])
    assert overlong_mask(mask, truncated).tolist() == [[0.0, 0.0], [1.0, 0.0]]
    new = torch.full((2, 2), -1.0)
    _, grad, stats = run("overlong_filter", new, new, torch.tensor([1.0, 1.0]), mask, truncated=truncated)
    assert grad.tolist() == [[0.0, 0.0], [-1.0, 0.0]]
    assert stats["overlong_masked_frac"] == pytest.approx(2 / 3)


def test_entropy_bonus_adds_minus_coef_entropy_with_gradient() -> None:
    entropy = torch.tensor([[0.5, 1.0]], requires_grad=True)
    assert torch.allclose(entropy_bonus_loss(entropy.detach(), 0.1), torch.tensor([[-0.05, -0.1]]))
    new = torch.full((1, 2), -1.0)
    per_token, stats = POLICY_LOSSES.get("entropy_bonus")(
        new, new, torch.tensor([0.0]), ONE, entropy_with_grad=entropy, coef=0.1
    )
    assert torch.allclose(per_token, torch.tensor([[-0.05, -0.1]]))
    per_token.sum().backward()
    assert torch.allclose(entropy.grad, torch.tensor([[-0.1, -0.1]]))  # minimising the loss raises entropy
    _, stats2 = POLICY_LOSSES.get("entropy_bonus")(
        new, new, torch.tensor([0.0]), ONE, entropy_with_grad=entropy, coef=0.1, entropy_coef=0.3
    )
    assert stats["entropy_coef"] == 0.1 and stats2["entropy_coef"] == 0.3  # a controller's value wins


def test_modifiers_nest_and_forward_the_trainer_context() -> None:
    # tis(cap 1.5) over forking_tokens(top half by entropy) over reinforce
    entropy = torch.tensor([[0.1, 3.0]])
    _, grad, stats = run(
        "tis",
        OLD,
        OLD,
        torch.tensor([1.0]),
        ONE,
        sampling_logprobs=SAMPLER,
        entropy=entropy,
        cap=1.5,
        inner="forking_tokens",
        inner_params={"top_q": 0.5, "inner": "reinforce"},
    )
    assert torch.allclose(grad, torch.tensor([[0.0, -math.exp(-0.1)]]))
    assert stats["forking_frac"] == 0.5 and "tis_weight_mean" in stats
