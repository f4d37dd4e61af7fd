"""Trainer-side estimation: reward shaping, KL folded into the reward, adaptive coefficients, and
the config errors that need the registries (raised before any model is loaded)."""

from __future__ import annotations

import pytest
import torch
from tiny import TINY_RUN

from rlvr import api
from rlvr.algo import ADVANTAGE_ESTIMATORS, adaptive_length_penalty
from rlvr.config import load_config
from rlvr.config.schema import ShapingItem
from rlvr.errors import RlvrError
from rlvr.train.learn.controllers import Coefficients
from rlvr.train.learn.estimate import (
    check_algorithm,
    estimate_advantages,
    kl_token_rewards,
    sampled_kl,
    shape_rewards,
)

# two completions of one prompt: lengths 2 and 1 (padded to 2)
MASK = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
SAMPLING = torch.tensor([[-1.0, -2.0], [-0.5, 0.0]])
REFERENCE = torch.tensor([[-1.5, -2.0], [-0.75, -9.0]])  # padding differs wildly: must not count
REWARDS = torch.tensor([1.0, 0.0])
GROUP = torch.tensor([0, 0])


def test_in_reward_kl_is_k1_of_the_sampled_tokens_times_the_coefficient() -> None:
    kl = sampled_kl(SAMPLING, REFERENCE, MASK)
    assert torch.equal(kl, torch.tensor([[0.5, 0.0], [0.25, 0.0]]))
    assert torch.allclose(kl_token_rewards(kl, MASK, coef=0.1), torch.tensor([[-0.05, 0.0], [-0.025, 0.0]]))


def test_kl_in_reward_changes_sequence_advantages_by_the_summed_penalty() -> None:
    token_rewards = kl_token_rewards(sampled_kl(SAMPLING, REFERENCE, MASK), MASK, coef=0.1)
    plain = estimate_advantages("dr_grpo", {}, REWARDS, GROUP, {})
    charged = estimate_advantages("dr_grpo", {}, REWARDS, GROUP, {"token_rewards": token_rewards})
    assert torch.allclose(plain.advantages, torch.tensor([0.5, -0.5]))
    # rewards become [1 - 0.05, 0 - 0.025]; their mean is 0.4625
    assert torch.allclose(charged.rewards, torch.tensor([0.95, -0.025]))
    assert torch.allclose(charged.advantages, torch.tensor([0.4875, -0.4875]))


def test_kl_in_reward_reaches_a_token_level_estimator_per_token() -> None:
    token_rewards = kl_token_rewards(sampled_kl(SAMPLING, REFERENCE, MASK), MASK, coef=0.1)
    context = {
        "values": torch.zeros(2, 2),
        "lengths": MASK.sum(1),
        "token_rewards": token_rewards,
    }
    params = {"gamma": 1.0, "lam": 1.0, "normalize": False}
    out = estimate_advantages("gae", params, REWARDS, GROUP, context)
    # V = 0, γ = λ = 1: the advantage is the reward-to-go; row 0: -0.05 then the final reward 1
    assert torch.allclose(out.advantages, torch.tensor([[0.95, 1.0], [-0.025, 0.0]]))
    assert torch.allclose(out.targets["returns"], out.advantages)
    assert torch.equal(out.rewards, REWARDS)  # not also charged per sequence


def test_an_estimator_taking_values_must_return_value_targets(monkeypatch) -> None:
    def bad(rewards, group_index, values):
        return rewards

    monkeypatch.setitem(ADVANTAGE_ESTIMATORS._table, "test_values_without_returns", bad)
    with pytest.raises(RlvrError, match="returns"):
        estimate_advantages("test_values_without_returns", {}, REWARDS, GROUP, {"values": torch.zeros(2, 2)})


def test_shapers_apply_in_order_with_the_context_they_name() -> None:
    rewards = torch.tensor([1.0, 1.0, 0.0, 1.0])
    index = torch.tensor([0, 0, 1, 1])
    lengths = torch.tensor([4.0, 8.0, 8.0, 2.0])
    context = {"lengths": lengths, "max_new_tokens": 8}
    shaping = [
        ShapingItem(name="adaptive_length_penalty", params={"beta": 0.5}),
        ShapingItem(name="adaptive_length_penalty", params={"beta": 0.2, "success_threshold": 0.8}),
    ]
    out = shape_rewards(rewards, index, shaping, context)
    # by hand, first shaper: group 0 all solved (rate 1): 1 - .5*.5 = .75, 1 - .5*1 = .5;
    # group 1 rate .5: 0 - .5*1*.5 = -.25, 1 - .5*.25*.5 = .9375
    first = torch.tensor([0.75, 0.5, -0.25, 0.9375])
    assert torch.allclose(adaptive_length_penalty(rewards, index, lengths, 8, beta=0.5), first)
    # second, on the shaped rewards with threshold .8: group 0 has none >= .8 (floor 1/2),
    # group 1 one of two
    expected = first - 0.2 * (lengths / 8) * torch.tensor([0.5, 0.5, 0.5, 0.5])
    assert torch.allclose(out, expected)
    # shaping + mean-centring is exactly the `alp` estimator
    alp = ADVANTAGE_ESTIMATORS.get("alp")(rewards, index, lengths, 8, beta=0.5)
    one = shape_rewards(rewards, index, shaping[:1], context)
    grpo = estimate_advantages("grpo", {"normalize_std": False}, one, index, {})
    assert torch.allclose(grpo.advantages, alp)


def test_adaptive_coefficients_follow_their_controllers() -> None:
    cfg = load_config(
        None,
        [
            "algo.kl_coef=0.1",
            "algo.kl_target=0.1",
            "algo.kl_horizon=100",
            "algo.loss=entropy_bonus",
            "algo.entropy_target=1.0",
            "algo.entropy_coef_init=0.001",
            "algo.entropy_coef_step=0.0005",
        ],
    ).algo
    coefs = Coefficients.from_config(cfg)
    assert coefs.loss_context() == {"entropy_coef": 0.001}
    coefs.update(cfg, {"update/kl": 0.3, "reward/kl": 0.0, "update/entropy": 0.5}, samples=10)
    # KL 3x the target: +clip(2, 0.2) * 10/100 = +2%; entropy below target: +step
    assert coefs.kl == pytest.approx(0.102) and coefs.entropy == pytest.approx(0.0015)
    assert coefs.metrics(cfg) == {"algo/kl_coef": coefs.kl, "algo/entropy_coef": coefs.entropy}
    coefs.update(cfg, {"update/loss": 0.0}, samples=10)  # no KL or entropy observed: unchanged
    assert coefs.kl == pytest.approx(0.102) and coefs.entropy == pytest.approx(0.0015)
    in_reward = cfg.model_copy(update={"kl_in_reward": True})
    coefs.update(in_reward, {"update/kl": 0.3, "reward/kl": 0.09}, samples=10)  # reads reward/kl
    assert coefs.kl == pytest.approx(0.102 * 0.99)
    assert Coefficients(**coefs.state()) == coefs
    fixed = Coefficients.from_config(load_config(None, ["algo.kl_coef=0.1"]).algo)
    fixed.update(cfg.model_copy(update={"kl_target": None, "entropy_target": None}), {"update/kl": 1.0}, 10)
    assert fixed.kl == 0.1 and fixed.entropy is None and fixed.loss_context() == {}


@pytest.mark.parametrize(
    ("overrides", "needle"),
    [
        (["algo.advantage=gae"], r"algo\.critic\.kind: the estimator 'gae' needs values"),
        (["algo.critic.kind=head"], r"algo\.critic\.kind: the estimator 'grpo' takes no values"),
        (["algo.advantage=nope"], r"algo\.advantage: unknown advantage estimator 'nope'"),
        (["algo.advantage_params={gama: 1}"], r"algo\.advantage_params: unknown parameter\(s\) gama"),
        (["algo.entropy_target=1.0"], r"algo\.entropy_target: the loss 'ppo_clip' takes no entropy_coef"),
        (["rewards.shaping=[{name: nope}]"], r"rewards\.shaping\[0\]\.name: unknown reward shaping 'nope'"),
        (
            ["rewards.shaping=[{name: adaptive_length_penalty, params: {betta: 1}}]"],
            r"rewards\.shaping\[0\]\.params: unknown parameter\(s\) betta",
        ),
    ],
)
def test_algorithm_errors_name_the_key_before_any_model_work(tmp_path, overrides, needle) -> None:
    cfg = load_config(None, [*TINY_RUN, f"output_dir={tmp_path}", "name=bad", *overrides])
    with pytest.raises(RlvrError, match=needle):
        check_algorithm(cfg)
    with pytest.raises(RlvrError, match=needle):
        api.train(cfg, quiet=True)
    assert not (tmp_path / "bad").exists()  # raised before the run directory (or a model) was made


@pytest.mark.parametrize(
    ("override", "needle"),
    [
        ("algo.kl_target=0.1", r"algo\.kl_target needs algo\.kl_coef > 0"),
        (
            "algo.critic.model=tiny-random",
            r"algo\.critic\.model applies only to algo\.critic\.kind: separate",
        ),
        ("algo.critic.kind=value", r"algo\.critic\.kind: .*'head'"),
        ("algo.entropy_coef_init=1.0", r"algo\.entropy_coef_init must lie within"),
        ("rewards.shaping=[{name: x, beta: 1}]", r"rewards\.shaping\.0\.beta: unknown key"),
    ],
)
def test_config_errors_of_the_new_knobs(override: str, needle: str) -> None:
    with pytest.raises(RlvrError, match=needle):
        load_config(None, [override])
    load_config(None, [])  # the defaults are valid: every new knob is off
