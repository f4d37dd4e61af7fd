"""Advantage estimators and reward shaping against hand-computed values."""

from __future__ import annotations

import itertools
import math
import statistics

import pytest
import torch

from rlvr.algo import ADVANTAGE_ESTIMATORS, REWARD_SHAPERS, adaptive_length_penalty, passk_advantages
from rlvr.algo.passk import passk_group_advantages
from rlvr.registry import accepted_context

# groups of different sizes: 4, 2 (all equal) and 1
REWARDS = torch.tensor([1.0, 0.0, 0.0, 1.0, 2.0, 2.0, 5.0])
GROUPS = torch.tensor([0, 0, 0, 0, 1, 1, 2])


def est(name: str, rewards=REWARDS, groups=GROUPS, **kw) -> torch.Tensor:
    return ADVANTAGE_ESTIMATORS.get(name)(rewards, groups, **kw)


def test_dr_grpo_is_mean_centred_without_std() -> None:
    assert est("dr_grpo").tolist() == [0.5, -0.5, -0.5, 0.5, 0.0, 0.0, 0.0]


def test_rloo_leaves_one_out_and_groups_of_one_get_zero() -> None:
    # r=1 in group 0: others (0, 0, 1) average 1/3 → 2/3; group of one has no baseline → 0
    expected = [2 / 3, -2 / 3, -2 / 3, 2 / 3, 0.0, 0.0, 0.0]
    assert torch.allclose(est("rloo"), torch.tensor(expected))


def test_batch_std_uses_group_mean_and_batch_std() -> None:
    sd = statistics.stdev(REWARDS.tolist())
    expected = [0.5 / sd, -0.5 / sd, -0.5 / sd, 0.5 / sd, 0.0, 0.0, 0.0]
    assert torch.allclose(est("batch_std", eps=0.0), torch.tensor(expected), atol=1e-6)


def test_reinforce_pp_normalises_over_the_batch_ignoring_groups() -> None:
    values = REWARDS.tolist()
    mean, sd = statistics.mean(values), statistics.stdev(values)
    expected = torch.tensor([(r - mean) / sd for r in values])
    assert torch.allclose(est("reinforce_pp", eps=0.0), expected, atol=1e-6)
    # the group of one and the all-equal group still get signal: there is no group baseline
    assert est("reinforce_pp")[4:].abs().min() > 0


def test_reinforce_pp_baseline_scales_by_std_of_centred_rewards() -> None:
    # centred: ±0.5 four times, 0 three times → sum of squares 1, n-1 = 6 → std sqrt(1/6)
    expected = torch.tensor([0.5, -0.5, -0.5, 0.5, 0.0, 0.0, 0.0]) * math.sqrt(6)
    assert torch.allclose(est("reinforce_pp_baseline", eps=0.0), expected, atol=1e-6)


def test_remax_subtracts_the_greedy_reward() -> None:
    adv = est("remax", baseline_rewards=torch.tensor([1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 5.0]))
    assert adv.tolist() == [0.0, -1.0, -1.0, 0.0, 2.0, 2.0, 0.0]


def test_psr_nsr_and_w_reinforce_weights() -> None:
    rewards, groups = torch.tensor([1.0, 0.0, 0.7, 0.2]), torch.tensor([0, 0, 1, 1])
    assert est("psr_nsr", rewards, groups).tolist() == [1.0, -1.0, 1.0, -1.0]
    assert est("psr_nsr", rewards, groups, negative_weight=0.0).tolist() == [1.0, 0.0, 1.0, 0.0]  # PSR
    assert est("psr_nsr", rewards, groups, positive_weight=0.0).tolist() == [0.0, -1.0, 0.0, -1.0]  # NSR
    assert torch.allclose(est("w_reinforce", rewards, groups), torch.tensor([0.1, -1.0, 0.1, -1.0]))
    # no baseline: an all-correct group still gets (positive) signal
    assert est("w_reinforce", torch.ones(3), torch.zeros(3, dtype=torch.long)).tolist() == pytest.approx(
        [0.1] * 3
    )


@pytest.mark.parametrize(
    "name", ["grpo", "dr_grpo", "batch_std", "rloo", "reinforce_pp", "reinforce_pp_baseline", "passk", "alp"]
)
def test_all_equal_rewards_give_zero_not_nan(name: str) -> None:
    rewards, groups = torch.full((6,), 0.7), torch.tensor([0, 0, 0, 1, 1, 1])
    fn = ADVANTAGE_ESTIMATORS.get(name)
    context = {"lengths": torch.full((6,), 5.0), "max_new_tokens": 10}
    adv = fn(rewards, groups, **accepted_context(fn, context, {}, "test"))
    assert torch.isfinite(adv).all()
    assert adv.abs().max() < 1e-6


def test_passk_hand_values() -> None:
    # n=4, one correct, k=2: 6 pairs, 3 hold the correct one → mean 1/2, std 1/2.
    # correct: every pair scores 1 → (1-1/2)/(1/2) = 1; wrong: its 3 pairs score 1, 0, 0 → (1-1-1)/3 = -1/3
    adv = passk_advantages(torch.tensor([1.0, 0.0, 0.0, 0.0]), torch.zeros(4, dtype=torch.long), k=2)
    assert torch.allclose(adv, torch.tensor([1.0, -1 / 3, -1 / 3, -1 / 3]))


def _brute_force_passk(correct: list[bool], k: int) -> list[float]:
    subsets = list(itertools.combinations(range(len(correct)), k))
    score = {s: float(any(correct[i] for i in s)) for s in subsets}
    mean = sum(score.values()) / len(subsets)
    std = math.sqrt(sum((v - mean) ** 2 for v in score.values()) / len(subsets))
    if std == 0:
        return [0.0] * len(correct)
    return [statistics.mean((score[s] - mean) / std for s in subsets if i in s) for i in range(len(correct))]


@pytest.mark.parametrize("n,c,k", [(4, 1, 2), (5, 2, 3), (6, 1, 4), (8, 3, 2), (6, 4, 3), (7, 2, 7)])
def test_passk_matches_enumerating_all_subsets(n: int, c: int, k: int) -> None:
    correct = [True] * c + [False] * (n - c)
    pos, neg = passk_group_advantages(n, c, k)
    expected = _brute_force_passk(correct, k)
    assert [pos if x else neg for x in correct] == pytest.approx(expected, abs=1e-9)


def test_passk_k1_is_grpo_with_population_std_and_caps_k() -> None:
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 0.0, 1.0])
    groups = torch.tensor([0, 0, 0, 0, 1, 1, 1])
    expected = []
    for g in (0, 1):
        values = rewards[groups == g].tolist()
        mean, sd = statistics.mean(values), statistics.pstdev(values)
        expected += [(v - mean) / sd for v in values]
    assert torch.allclose(passk_advantages(rewards, groups, k=1), torch.tensor(expected), atol=1e-6)
    # k larger than the group is capped at the group size: group 1 (size 3) then scores pass@3 = 1 → 0
    capped = passk_advantages(rewards, groups, k=10)
    assert capped[4:].tolist() == [0.0, 0.0, 0.0]
    # fewer wrong samples than k: every subset holds a correct one, nothing to learn
    assert (
        passk_advantages(torch.tensor([1.0, 1.0, 1.0, 0.0]), torch.zeros(4, dtype=torch.long), k=2)
        .abs()
        .max()
        == 0
    )


def test_passk_fines_wrong_samples_less_than_grpo() -> None:
    rewards, groups = torch.tensor([1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]), torch.zeros(8, dtype=torch.long)
    k1, k4 = passk_advantages(rewards, groups, k=1), passk_advantages(rewards, groups, k=4)
    assert k4[1].abs() < k1[1].abs()  # exploration: wrong answers are pushed down less


def test_adaptive_length_penalty_scales_by_pass_rate() -> None:
    rewards = torch.tensor([1.0, 1.0, 0.0, 1.0, 0.0, 0.0])
    groups = torch.tensor([0, 0, 0, 0, 1, 1])
    lengths = torch.tensor([10.0, 20.0, 20.0, 5.0, 20.0, 10.0])
    shaped = adaptive_length_penalty(rewards, groups, lengths, max_new_tokens=20, beta=0.1)
    # group 0: pass rate 3/4; group 1: pass rate 0 → floor 1/2
    expected = [1 - 0.0375, 1 - 0.075, -0.075, 1 - 0.01875, -0.05, -0.025]
    assert torch.allclose(shaped, torch.tensor(expected))
    assert REWARD_SHAPERS.get("adaptive_length_penalty") is adaptive_length_penalty


def test_alp_estimator_is_mean_centred_shaped_reward() -> None:
    rewards, groups = torch.tensor([1.0, 1.0]), torch.tensor([0, 0])
    adv = ADVANTAGE_ESTIMATORS.get("alp")(rewards, groups, lengths=torch.tensor([4.0, 8.0]), max_new_tokens=8)
    # both correct (pass rate 1): penalties 0.05 and 0.1 → the shorter one is preferred
    assert torch.allclose(adv, torch.tensor([0.025, -0.025]))


def test_estimators_take_only_the_context_they_name() -> None:
    context = {"lengths": torch.ones(7), "max_new_tokens": 8}
    assert accepted_context(ADVANTAGE_ESTIMATORS.get("rloo"), context, {}, "x") == {}
    assert set(accepted_context(ADVANTAGE_ESTIMATORS.get("alp"), context, {}, "x")) == {
        "lengths",
        "max_new_tokens",
    }
