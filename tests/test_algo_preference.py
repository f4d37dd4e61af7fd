"""Preference losses: hand-computed values, the implicit rewards in the stats, and which need a reference."""

from __future__ import annotations

import math

import pytest
import torch

from rlvr.algo import PREFERENCE_LOSSES, preference_metrics

BETA = 0.5
# two pairs; summed log-probs over each completion, and its length in tokens
CHOSEN, REJECTED = torch.tensor([-10.0, -20.0]), torch.tensor([-12.0, -15.0])
REF_CHOSEN, REF_REJECTED = torch.tensor([-11.0, -19.5]), torch.tensor([-11.0, -16.0])
LEN_CHOSEN, LEN_REJECTED = torch.tensor([5.0, 8.0]), torch.tensor([4.0, 5.0])
ARGS = (CHOSEN, REJECTED, REF_CHOSEN, REF_REJECTED, LEN_CHOSEN, LEN_REJECTED)


def neg_log_sigmoid(z: float) -> float:
    return math.log(1.0 + math.exp(-z))


def run(name: str, *args, **kw):
    return PREFERENCE_LOSSES.get(name)(*args, **kw)


def test_registered_names() -> None:
    assert PREFERENCE_LOSSES.names() == ["dpo", "dpo_norm", "ipo", "simpo"]


def test_dpo_value_and_stats() -> None:
    loss, stats = run("dpo", *ARGS, beta=BETA)
    # log-ratios: chosen (1, -0.5), rejected (-1, 1); margins 2, -1.5; times beta: 1, -0.75
    assert loss.tolist() == pytest.approx([neg_log_sigmoid(1.0), neg_log_sigmoid(-0.75)])
    assert stats == pytest.approx(
        {
            "rewards/chosen": 0.5 * (1.0 - 0.5) / 2,
            "rewards/rejected": 0.5 * (-1.0 + 1.0) / 2,
            "rewards/margin": 0.5 * (2.0 - 1.5) / 2,
            "rewards/accuracy": 0.5,  # pair 0 ranked right (0.5 > -0.5), pair 1 not (-0.25 < 0.5)
            "logps/chosen": -15.0,
            "logps/rejected": -13.5,
        }
    )


def test_dpo_label_smoothing_is_conservative_dpo() -> None:
    loss, _ = run("dpo", *ARGS, beta=BETA, label_smoothing=0.2)
    expected = [0.8 * neg_log_sigmoid(z) + 0.2 * neg_log_sigmoid(-z) for z in (1.0, -0.75)]
    assert loss.tolist() == pytest.approx(expected)
    with pytest.raises(ValueError, match="label_smoothing"):
        run("dpo", *ARGS, beta=BETA, label_smoothing=0.5)


def test_ipo_regresses_the_length_averaged_margin_onto_one_over_two_beta() -> None:
    loss, stats = run("ipo", *ARGS, beta=BETA)
    # per-token log-ratios: chosen (1/5, -0.5/8), rejected (-1/4, 1/5); target 1/(2·0.5) = 1
    h = [0.2 - (-0.25), -0.0625 - 0.2]
    assert loss.tolist() == pytest.approx([(h[0] - 1.0) ** 2, (h[1] - 1.0) ** 2])
    assert stats["rewards/chosen"] == pytest.approx(0.5 * (0.2 - 0.0625) / 2)
    assert stats["rewards/margin"] == pytest.approx(0.5 * (h[0] + h[1]) / 2)


def test_simpo_average_logprob_margin_and_no_reference() -> None:
    loss, stats = run("simpo", CHOSEN, REJECTED, None, None, LEN_CHOSEN, LEN_REJECTED, beta=2.0, gamma=0.5)
    # average log-probs: chosen (-2, -2.5), rejected (-3, -3); z = 2·(c − r) − 0.5
    assert loss.tolist() == pytest.approx([neg_log_sigmoid(1.5), neg_log_sigmoid(0.5)])
    assert stats["rewards/chosen"] == pytest.approx(2.0 * (-2.0 - 2.5) / 2)
    assert stats["rewards/rejected"] == pytest.approx(-6.0)
    assert stats["rewards/margin"] == pytest.approx(1.5)
    assert stats["rewards/accuracy"] == 1.0
    with_ref, _ = run("simpo", *ARGS, beta=2.0, gamma=0.5)
    assert torch.equal(loss, with_ref)  # reference log-probs are ignored
    no_margin, _ = run("simpo", *ARGS, beta=2.0, gamma=0.0)
    assert no_margin.tolist() == pytest.approx([neg_log_sigmoid(2.0), neg_log_sigmoid(1.0)])


def test_simpo_default_margin_is_trl_simpo_gamma() -> None:
    loss, _ = run("simpo", *ARGS, beta=2.0)
    assert loss.tolist() == pytest.approx([neg_log_sigmoid(1.5), neg_log_sigmoid(0.5)])


def test_dpo_norm_divides_each_log_ratio_by_its_length() -> None:
    loss, stats = run("dpo_norm", *ARGS, beta=BETA)
    h = [0.2 - (-0.25), -0.0625 - 0.2]
    assert loss.tolist() == pytest.approx([neg_log_sigmoid(0.5 * h[0]), neg_log_sigmoid(0.5 * h[1])])
    assert stats["rewards/rejected"] == pytest.approx(0.5 * (-0.25 + 0.2) / 2)
    assert stats["rewards/accuracy"] == 0.5


@pytest.mark.parametrize("name", ["dpo", "ipo", "dpo_norm"])
def test_losses_with_a_reference_refuse_none(name: str) -> None:
    with pytest.raises(ValueError, match="reference"):
        run(name, CHOSEN, REJECTED, None, REF_REJECTED, LEN_CHOSEN, LEN_REJECTED)
    with pytest.raises(ValueError, match="reference"):
        run(name, CHOSEN, REJECTED, REF_CHOSEN, None, LEN_CHOSEN, LEN_REJECTED)


@pytest.mark.parametrize("name", ["dpo", "ipo", "simpo", "dpo_norm"])
def test_gradient_raises_chosen_and_lowers_rejected(name: str) -> None:
    chosen, rejected = CHOSEN.clone().requires_grad_(True), REJECTED.clone().requires_grad_(True)
    loss, stats = run(name, chosen, rejected, REF_CHOSEN, REF_REJECTED, LEN_CHOSEN, LEN_REJECTED, beta=BETA)
    loss.sum().backward()
    assert (chosen.grad < 0).all() and (rejected.grad > 0).all()
    assert all(isinstance(v, float) for v in stats.values())


def test_empty_completion_gives_a_finite_loss() -> None:
    zero = torch.zeros(1)
    for name in PREFERENCE_LOSSES.names():
        loss, _ = run(name, zero, zero, zero, zero, zero, zero)
        assert torch.isfinite(loss).all()


def test_preference_metrics_are_means_over_pairs() -> None:
    stats = preference_metrics(
        torch.tensor([1.0, 0.0, 2.0]),
        torch.tensor([0.0, 0.0, 3.0]),
        torch.tensor([-3.0]),
        torch.tensor([-6.0]),
    )
    assert stats["rewards/accuracy"] == pytest.approx(1 / 3)  # a tie is not a win
    assert stats["rewards/margin"] == pytest.approx(0.0)
    assert stats["logps/rejected"] == -6.0
