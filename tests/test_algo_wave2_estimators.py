"""The algorithm zoo's second wave, estimators: ArenaRL, GRPOVI, LENS, GREAM's SRPO and ReBN.

Each against numbers worked out by hand (the arithmetic is in the comments) on small batches, with
the edge cases the abstracts name: compressed reward ranges (ArenaRL), rewards already at their
bounds (GRPOVI), all-wrong groups (LENS), sparse successes (GREAM); plus all-equal groups, groups of
one, empty batches and bad parameters.
"""

from __future__ import annotations

import math

import pytest
import torch
from tiny import TINY_RUN

from rlvr import api
from rlvr.algo import (
    ADVANTAGE_ESTIMATORS,
    arenarl_advantages,
    gream_advantages,
    grpo_advantages,
    grpovi_advantages,
    lens_advantages,
    rebn_advantages,
)
from rlvr.algo.ranking import net_win_rate
from rlvr.algo.sparse_signal import increase_variance, sequence_confidence
from rlvr.config import load_config
from rlvr.log import read_jsonl

LOG = math.log


def _idx(*sizes: int) -> torch.Tensor:
    return torch.arange(len(sizes)).repeat_interleave(torch.tensor(sizes, dtype=torch.long))


def _close(a: torch.Tensor, b: list[float], tol: float = 1e-4) -> None:
    assert a.shape == (len(b),), (a.shape, b)
    assert torch.allclose(a.float(), torch.tensor(b), atol=tol), (a.tolist(), b)


def test_registered_by_name() -> None:
    for name in ("arenarl", "grpovi", "lens", "gream", "rebn"):
        assert name in ADVANTAGE_ESTIMATORS


# ---------------------------------------------------------------------------------------- ArenaRL
def test_arenarl_ranks_a_compressed_range_like_a_wide_one() -> None:
    # group 0: 0.50 / 0.52 / 0.51 (a "collapsed" reward model); group 1: 0 / 100 / 1, same order.
    # net win rate (wins − losses)/(n − 1): lowest (0 − 2)/2 = −1, top (2 − 0)/2 = 1, middle 0;
    # std of (−1, 1, 0) = sqrt((1 + 1 + 0)/2) = 1, so the normalised scores are the same.
    rewards = torch.tensor([0.50, 0.52, 0.51, 0.0, 100.0, 1.0])
    out = arenarl_advantages(rewards, _idx(3, 3))
    _close(out, [-1.0, 1.0, 0.0, -1.0, 1.0, 0.0])
    # grpo, by contrast, sees the 100 as an outlier: the middle member is below the mean
    assert grpo_advantages(rewards, _idx(3, 3))[5] < -0.5


def test_arenarl_ties_share_the_match() -> None:
    # (1, 1, 0, 0.5): a 1 ties the other 1 (0), beats 0 and 0.5 → 2/3; 0 loses all → −1;
    # 0.5 beats 0, loses to both 1s → (1 − 2)/3 = −1/3. Sum 2/3 + 2/3 − 1 − 1/3 = 0.
    rewards = torch.tensor([1.0, 1.0, 0.0, 0.5])
    raw = arenarl_advantages(rewards, _idx(4), normalize_std=False)
    _close(raw, [2 / 3, 2 / 3, -1.0, -1 / 3])
    # normalised: Σs² = 4/9 + 4/9 + 1 + 1/9 = 2, std = sqrt(2/3) = 0.81650
    std = math.sqrt(2 / 3)
    _close(arenarl_advantages(rewards, _idx(4)), [2 / 3 / std, 2 / 3 / std, -1 / std, -1 / 3 / std])


def test_arenarl_tie_margin() -> None:
    # margin 0.015: 0.50–0.51 and 0.52–0.51 tie, 0.52 beats 0.50 → (−1/2, 1/2, 0)
    out = net_win_rate(torch.tensor([0.50, 0.52, 0.51]), _idx(3), tie_margin=0.015)
    _close(out, [-0.5, 0.5, 0.0])


def test_arenarl_edge_cases() -> None:
    # all equal → all tie → 0 (no NaN); a group of one has no opponent → 0
    out = arenarl_advantages(torch.tensor([3.0, 3.0, 3.0, 7.0]), _idx(3, 1))
    _close(out, [0.0, 0.0, 0.0, 0.0])
    assert arenarl_advantages(torch.zeros(0), torch.zeros(0, dtype=torch.long)).shape == (0,)
    with pytest.raises(ValueError, match="tie_margin"):
        arenarl_advantages(torch.tensor([1.0, 0.0]), _idx(2), tie_margin=-0.1)


# ----------------------------------------------------------------------------------------- GRPOVI
def test_increase_variance_pushes_levels_to_the_bounds() -> None:
    # group (0, 0.2, 0.3, 1) in its range [0, 1], mean 0.375 (sum 1.5). Vertices (low | block | high):
    #   0 | 0.2 | 0.3, 1 → block = 1.5 − 2 = −0.5 < 0, infeasible
    #   0, 0.2 | 0.3 | 1 → block = 1.5 − 1 = 0.5 → (0, 0, 0.5, 1), Σx² = 1.25 (original: 1.13)
    #   0 | 0.2, 0.3 | 1 → block = 0.25 → Σx² = 1.125; 0 | 0.2, 0.3, 1 → block 0.5 → 0.75
    # group (0, 0.4, 0.6, 1), sum 2: 0, 0.4 | 0.6 | 1 → block = 1 → (0, 0, 1, 1), Σx² = 2 (max possible)
    # group (0, 0.1, 1), sum 1.1: the only feasible vertex above the original is none
    #   (0 | 0.1 | 1 is the original; 0, 0.1 | 1 needs block 1.1 > 1) → unchanged
    rewards = torch.tensor([0.3, 0.0, 1.0, 0.2, 0.0, 0.4, 0.6, 1.0, 0.0, 0.1, 1.0])
    out = increase_variance(rewards, _idx(4, 4, 3))
    _close(out, [0.5, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.1, 1.0], tol=1e-6)
    # the group means are kept
    _close(out[:4].mean().reshape(1), [0.375], tol=1e-6)


def test_increase_variance_with_fixed_bounds() -> None:
    # (0.2, 0.4) in [0, 1], sum 0.6: 0.2 → 0 and 0.4 → 0.6 (Σx² 0.36 > 0.2); the other vertex
    # (0.2 → block, 0.4 → 1) needs block −0.4, infeasible
    out = increase_variance(torch.tensor([0.2, 0.4]), _idx(2), low=0.0, high=1.0)
    _close(out, [0.0, 0.6], tol=1e-6)


def test_grpovi_advantages_and_its_grpo_special_cases() -> None:
    # adjusted (0, 0, 0.5, 1), mean 0.375: deviations (−0.375, −0.375, 0.125, 0.625),
    # Σd² = 0.140625·2 + 0.015625 + 0.390625 = 0.6875, std = sqrt(0.6875/3) = 0.478714
    std = math.sqrt(0.6875 / 3)
    out = grpovi_advantages(torch.tensor([0.0, 0.2, 0.3, 1.0]), _idx(4))
    _close(out, [-0.375 / std, -0.375 / std, 0.125 / std, 0.625 / std])
    # 0/1 rewards already lie at their bounds: GRPOVI is GRPO; an all-equal group and a group of one get 0
    binary = torch.tensor([1.0, 0.0, 0.0, 1.0, 0.0, 2.0, 2.0, 5.0])
    index = _idx(5, 2, 1)
    assert torch.equal(grpovi_advantages(binary, index), grpo_advantages(binary, index))
    _close(grpovi_advantages(binary, index)[5:], [0.0, 0.0, 0.0])
    assert grpovi_advantages(torch.zeros(0), torch.zeros(0, dtype=torch.long)).shape == (0,)


def test_grpovi_bad_bounds() -> None:
    rewards, index = torch.tensor([0.2, 0.4]), _idx(2)
    with pytest.raises(ValueError, match="low"):
        grpovi_advantages(rewards, index, low=0.3)
    with pytest.raises(ValueError, match="high"):
        grpovi_advantages(rewards, index, high=0.3)
    with pytest.raises(ValueError, match="low"):
        grpovi_advantages(rewards, index, low=1.0, high=0.0)


# ------------------------------------------------------------------------------------------- LENS
def test_sequence_confidence_is_the_geometric_mean_token_probability() -> None:
    # rows: (0.9, 0.9 | pad) → 0.9; (0.25, 1 | pad) → sqrt(0.25) = 0.5; (0.2 | pad, pad) → 0.2; empty → 0
    logprobs = torch.tensor(
        [[LOG(0.9), LOG(0.9), -100.0], [LOG(0.25), 0.0, -100.0], [LOG(0.2), -100.0, -100.0], [-5.0] * 3]
    )
    _close(sequence_confidence(logprobs, torch.tensor([2, 2, 1, 0])), [0.9, 0.5, 0.2, 0.0], tol=1e-6)


def test_lens_penalises_confident_mistakes_and_rescues_negative_groups() -> None:
    # group 0 = (1, 0, 0, 0): grpo mean 0.25, std sqrt((0.5625 + 3·0.0625)/3) = 0.5 → (1.5, −0.5, −0.5, −0.5)
    #   confidences (0.5, 0.9, 0.5, 0.2), penalty 0.5: wrong rows −0.5 − 0.5·c → −0.95, −0.75, −0.6;
    #   the correct row keeps 1.5 whatever its confidence
    # group 1 = (0, 0, 0), all wrong: grpo 0; confidences (0.8, 0 (empty), 0.2) → −0.4, 0, −0.1
    pad = -100.0
    logprobs = torch.tensor(
        [
            [LOG(0.5)] * 3,
            [LOG(0.9), LOG(0.9), pad],
            [LOG(0.25), 0.0, pad],
            [LOG(0.2), pad, pad],
            [LOG(0.8), LOG(0.8), pad],
            [pad, pad, pad],
            [LOG(0.2), pad, pad],
        ]
    )
    lengths = torch.tensor([3, 2, 2, 1, 2, 0, 1])
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0])
    out = lens_advantages(rewards, _idx(4, 3), lengths=lengths, sampling_logprobs=logprobs, penalty=0.5)
    _close(out, [1.5, -0.95, -0.75, -0.6, -0.4, 0.0, -0.1])


def test_lens_edge_cases() -> None:
    # every token certain (log-prob 0: confidence 1) →
    # (1, 0.4, 0) with threshold 0.5: grpo mean 0.4667, std sqrt((0.28444 + 0.00444 + 0.21778)/2) = 0.50332
    # → (1.05962, −0.13246, −0.92715); the 0.4 and the 0 are wrong: −0.25 each
    rewards = torch.tensor([1.0, 0.4, 0.0, 0.0])
    index, lengths, certain = _idx(3, 1), torch.tensor([2, 2, 2, 2]), torch.zeros(4, 2)
    base = grpo_advantages(rewards, index)
    _close(base[:3], [1.05962, -0.13246, -0.92715])
    out = lens_advantages(rewards, index, lengths, certain, penalty=0.25)
    _close(out, [1.05962, -0.13246 - 0.25, -0.92715 - 0.25, -0.25])  # a lone wrong sample: −0.25
    # penalty 0 is GRPO; an all-correct equal group stays 0
    assert torch.equal(lens_advantages(rewards, index, lengths, certain, penalty=0.0), base)
    _close(lens_advantages(torch.tensor([1.0, 1.0]), _idx(2), lengths[:2], certain[:2]), [0.0, 0.0])
    empty = torch.zeros(0, dtype=torch.long)
    assert lens_advantages(torch.zeros(0), empty, empty, torch.zeros(0, 2)).shape == (0,)
    with pytest.raises(ValueError, match="penalty"):
        lens_advantages(rewards, index, lengths, certain, penalty=-1.0)
    with pytest.raises(ValueError, match="one row per reward"):
        lens_advantages(rewards, index, lengths, torch.zeros(3, 2))


# -------------------------------------------------------------------------------------- GREAM SRPO
def test_gream_bonus_is_calibrated_to_the_success_rate() -> None:
    # bonus 1. group 0 = (1, 0, 0, 0): p 0.25, shaped (1.75, 0, 0, 0), mean 0.4375
    #   → (1.3125, −0.4375 ×3), i.e. Dr. GRPO's (0.75, −0.25) × (1 + 0.75)
    # group 1 = (1, 1, 1, 0): p 0.75, shaped (1.25 ×3, 0), mean 0.9375 → (0.3125 ×3, −0.9375) = × 1.25
    # group 2 all wrong → 0; group 3 a lone success: p 1, no bonus → 0; group 4 all right → 0
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0])
    out = gream_advantages(rewards, _idx(4, 4, 2, 1, 2))
    _close(
        out,
        [1.3125, -0.4375, -0.4375, -0.4375, 0.3125, 0.3125, 0.3125, -0.9375, 0, 0, 0, 0, 0],
    )


def test_gream_graded_rewards_and_params() -> None:
    # (0.75, 0.25), threshold 0.5, bonus 2: p 0.5, shaped (0.75 + 2·0.5, 0.25) = (1.75, 0.25),
    # mean 1.0 → (0.75, −0.75); without the bonus (Dr. GRPO) it would be (0.25, −0.25)
    _close(gream_advantages(torch.tensor([0.75, 0.25]), _idx(2), bonus=2.0), [0.75, -0.75])
    # with std division and 0/1 rewards the bonus only rescales a two-level group: it is GRPO
    binary, index = torch.tensor([1.0, 0.0, 0.0, 0.0]), _idx(4)
    _close(gream_advantages(binary, index, normalize_std=True), grpo_advantages(binary, index).tolist())
    assert gream_advantages(torch.zeros(0), torch.zeros(0, dtype=torch.long)).shape == (0,)
    with pytest.raises(ValueError, match="bonus"):
        gream_advantages(binary, index, bonus=-1.0)


# ------------------------------------------------------------------------------------------- ReBN
def test_rebn_normalises_returns_over_the_batch() -> None:
    # no token rewards: rewards (1, 0), lengths (2, 1) → returns [1, 1], [0, ·]; valid 1, 1, 0:
    # mean 2/3, std sqrt(((1/3)²·2 + (2/3)²)/2) = sqrt(1/3) = 0.57735 → [0.57735, 0.57735], [−1.15470, 0]
    out = rebn_advantages(torch.tensor([1.0, 0.0]), _idx(1, 1), torch.tensor([2, 1]))
    assert torch.allclose(out, torch.tensor([[0.57735, 0.57735], [-1.15470, 0.0]]), atol=1e-4)
    # the two rows in one group or in two: the baseline is the batch's either way
    assert torch.equal(out, rebn_advantages(torch.tensor([1.0, 0.0]), _idx(2), torch.tensor([2, 1])))


def test_rebn_credits_a_turn_reward_to_the_tokens_before_it() -> None:
    # row 0: turn reward 0.5 on token 0, outcome 1 on token 1 → returns (discount 1) [1.5, 1];
    # row 1: nothing → [0, 0]. Valid 1.5, 1, 0, 0: mean 0.625, deviations 0.875, 0.375, −0.625, −0.625,
    # Σd² = 1.6875, std = sqrt(1.6875/3) = 0.75 → [1.16667, 0.5], [−0.83333, −0.83333]
    rewards, lengths = torch.tensor([1.0, 0.0]), torch.tensor([2, 2])
    token_rewards = torch.tensor([[0.5, 0.0], [0.0, 0.0]])
    out = rebn_advantages(rewards, _idx(2), lengths, token_rewards=token_rewards)
    assert torch.allclose(out, torch.tensor([[1.16667, 0.5], [-0.83333, -0.83333]]), atol=1e-4)
    # discount 0.5: row 0 returns [0.5 + 0.5·1, 1] = [1, 1] → ±0.5 around 0.5, std sqrt(1/3)
    out = rebn_advantages(rewards, _idx(2), lengths, token_rewards=token_rewards, discount=0.5)
    assert torch.allclose(out, torch.tensor([[0.86603, 0.86603], [-0.86603, -0.86603]]), atol=1e-4)


def test_rebn_edge_cases() -> None:
    # all returns equal → 0, not NaN; one valid token → 0; empty batch → [0, 0]
    out = rebn_advantages(torch.tensor([1.0, 1.0]), _idx(2), torch.tensor([2, 1]))
    assert torch.equal(out, torch.zeros(2, 2))
    assert torch.equal(rebn_advantages(torch.tensor([3.0]), _idx(1), torch.tensor([1])), torch.zeros(1, 1))
    empty = rebn_advantages(
        torch.zeros(0), torch.zeros(0, dtype=torch.long), torch.zeros(0, dtype=torch.long)
    )
    assert empty.shape == (0, 0)
    with pytest.raises(ValueError, match="discount"):
        rebn_advantages(torch.tensor([1.0]), _idx(1), torch.tensor([1]), discount=1.5)


def test_lens_reads_each_rows_sampled_logprobs_in_a_run(tmp_path) -> None:
    """A real step: every logged advantage is LENS's of the logged rewards and sampled log-probs
    (tiny-random's tokens have probability ~2e-5, so a penalty of 1e4 makes the confidence visible)."""
    overrides = [
        *TINY_RUN,
        "algo.advantage=lens",
        "algo.advantage_params={penalty: 10000.0, success_threshold: 0.6}",
        "algo.dynamic_sampling=false",
        "train.steps=1",
        "train.log_trajectories=true",
        "eval.before=false",
        f"output_dir={tmp_path}",
        "name=run",
    ]
    api.train(load_config(None, overrides), quiet=True)
    rows = read_jsonl(tmp_path / "run" / "trajectories.jsonl")
    logprobs = [[x for seg in r["segments"] for x in seg["logprobs"]] for r in rows]
    width = max(len(x) for x in logprobs)
    padded = torch.tensor([x + [0.0] * (width - len(x)) for x in logprobs])
    rewards, groups = torch.tensor([r["reward"] for r in rows]), torch.tensor([r["group"] for r in rows])
    lengths = torch.tensor([len(x) for x in logprobs])
    expected = lens_advantages(rewards, groups, lengths, padded, penalty=1e4, success_threshold=0.6)
    penalties = expected - grpo_advantages(rewards, groups)
    assert penalties.min() < -0.01, "no visible confidence penalty: the test checks too little"
    assert [r["advantage"] for r in rows] == pytest.approx(expected.tolist(), abs=1e-4)
