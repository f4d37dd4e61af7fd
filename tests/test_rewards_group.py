"""Group rewards (majority vote), self-certainty, gates, the batch deadline and per-verifier stats."""

from __future__ import annotations

import importlib
import math
import sys
import time
from pathlib import Path

import pytest
import torch

from rlvr.data.example import Example
from rlvr.errors import RlvrError
from rlvr.rewards import RewardPool, RewardSpec, get_reward
from rlvr.rewards.self_reward import majority_answer, self_certainty, self_certainty_from_logits

_TESTS = str(Path(__file__).resolve().parent)
if _TESTS not in sys.path:
    sys.path.insert(0, _TESTS)
FIX = importlib.import_module("reward_fixtures").__name__


def ex(reference: str | None = None, id: str = "g", **kwargs) -> Example:
    return Example(id=id, prompt=[{"role": "user", "content": "q"}], reference=reference, **kwargs)


def tagged(*answers: str) -> list[str]:
    return [f"<answer>{a}</answer>" if a else "no idea" for a in answers]


# -- majority vote -------------------------------------------------------------------------------


def test_majority_vote_uses_math_equivalence_by_default():
    reward = get_reward("majority_vote")
    group = tagged("1/2", "0.5", r"\frac{1}{2}", "3", "3", "")
    assert reward(group, ex()) == [1.0, 1.0, 1.0, 0.0, 0.0, 0.0]
    # As text, "3" is the only answer given twice.
    assert reward(group, ex(), equivalence="text") == [0.0, 0.0, 0.0, 1.0, 1.0, 0.0]


def test_majority_vote_needs_agreement_and_answers():
    reward = get_reward("majority_vote")
    assert reward(tagged("1", "2", "3", "1"), ex(), min_agreement=0.5) == [1.0, 0.0, 0.0, 1.0]
    assert reward(tagged("1", "2", "3", "1"), ex(), min_agreement=0.75) == [0.0] * 4
    assert reward(tagged("", ""), ex()) == [0.0, 0.0]


def test_majority_answer_breaks_ties_by_first_answer():
    assert majority_answer(["b", "a", "a", "b"]) == ("b", [True, False, False, True])
    assert majority_answer([None, None]) == (None, [False, False])


def test_group_and_per_completion_rewards_in_one_pool():
    specs = [RewardSpec(name="majority_vote"), RewardSpec(name="math", weight=2.0)]
    groups = [tagged("4", "4", "5"), tagged("7", "8", "8", "8")]
    examples = [ex("4", id="a"), ex("7", id="b")]
    with RewardPool(specs, workers=2) as pool:
        nested = pool.score_groups(groups, examples)
        with pytest.raises(RlvrError, match="group_sizes"):
            pool.score(groups[0], [examples[0]] * 3)
        with pytest.raises(ValueError, match="group_sizes"):
            pool.score(groups[0], [examples[0]] * 3, group_sizes=[2])
    assert [[r.components for r in g] for g in nested] == [
        [
            {"majority_vote": 1.0, "math": 1.0},
            {"majority_vote": 1.0, "math": 1.0},
            {"majority_vote": 0.0, "math": 0.0},
        ],
        [{"majority_vote": 0.0, "math": 1.0}] + [{"majority_vote": 1.0, "math": 0.0}] * 3,
    ]
    assert nested[0][0].total == 3.0


def test_group_rewards_see_the_whole_group_and_pool_kwargs():
    spec = RewardSpec(name="fixture_group_len")
    assert spec.group
    with RewardPool([spec], workers=1) as pool:
        results = pool.score(["aaa", "a", "aa", "bb", "b"], [ex()] * 5, group_sizes=[3, 2])
    assert [r.total for r in results] == [3.2, 1.0, 2.1, 2.1, 1.0]


def test_group_errors_reach_every_member_and_only_that_group():
    spec = RewardSpec(name="fixture_group_misbehave", label="g")
    with RewardPool([spec], workers=1, timeout_s=1.0) as pool:
        results = pool.score(["a", "spin", "short", "x", "ok", "ok"], [ex()] * 6, group_sizes=[2, 2, 2])
        stats = pool.take_stats()["g"]
    assert [r.errors.get("g") for r in results[:2]] == ["timeout after 1s"] * 2
    assert all("returned 1 values for a group of 2" in r.errors["g"] for r in results[2:4])
    assert [r.total for r in results[4:]] == [0.0, 0.0]
    assert stats["calls"] == 3 and stats["timeouts"] == 1 and stats["errors"] == 2


def test_verifier_cannot_route_to_a_group_reward():
    with pytest.raises(ValueError, match="group reward"):
        get_reward("verifier")("x", ex(verifier="majority_vote"))


# -- self-certainty and confidence ---------------------------------------------------------------


def test_self_certainty_is_zero_for_uniform_and_grows_when_peaked():
    uniform = [[math.log(1 / 4)] * 4] * 3
    assert self_certainty(uniform) == pytest.approx(0.0)
    peaked = [[math.log(0.97), math.log(0.01), math.log(0.01), math.log(0.01)]]
    assert self_certainty(peaked) > 1.0


def test_self_certainty_matches_the_full_distribution_formula():
    torch.manual_seed(0)
    logits = torch.randn(2, 5, 11)
    logprobs = torch.log_softmax(logits, -1)
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]])
    batched = self_certainty_from_logits(logits, mask)
    for row in range(2):
        tokens = logprobs[row][: int(mask[row].sum())].tolist()
        assert batched[row].item() == pytest.approx(self_certainty(tokens), rel=1e-5)
        # Top-k with the rest of the mass spread evenly: exact when the rest is already even.
    flat_tail = [[math.log(0.5)] + [math.log(0.5 / 9)] * 2]
    assert self_certainty(flat_tail, vocab_size=10) == pytest.approx(
        self_certainty([[math.log(0.5)] + [math.log(0.5 / 9)] * 9])
    )


def test_logprob_rewards_get_their_inputs_from_the_pool():
    specs = [RewardSpec(name="confidence"), RewardSpec(name="self_certainty")]
    uniform = [[math.log(0.5)] * 2]
    with RewardPool(specs, workers=1) as pool:
        [result] = pool.score(
            ["x"], [ex()], token_logprobs=[[math.log(0.5), math.log(0.5)]], top_logprobs=[uniform]
        )
        [missing] = pool.score(["x"], [ex()])
    assert result.components == {"confidence": pytest.approx(0.5), "self_certainty": pytest.approx(0.0)}
    assert (
        "token_logprobs" in missing.errors["confidence"]
        and "top_logprobs" in missing.errors["self_certainty"]
    )


# -- gates -----------------------------------------------------------------------------------------


def test_a_gated_bonus_counts_only_when_its_gate_passes():
    specs = [
        RewardSpec(name="math"),
        RewardSpec(name="think_format", weight=0.5, gate="math"),
        RewardSpec(name="repetition_penalty", gate="think_format", gate_min=0.5),
    ]
    completions = [
        "<think>two and two</think><answer>4</answer>",  # correct, well formed
        "<think>two and two</think><answer>5</answer>",  # wrong: no format bonus
        "<answer>4</answer>",  # correct, no think
    ]
    with RewardPool(specs, workers=1) as pool:
        results = pool.score(completions, [ex("4")] * 3)
    assert [r.components["think_format"] for r in results] == [1.0, 0.0, 0.0]
    assert [r.total for r in results] == [1.5, 0.0, 1.0]


def test_gates_are_checked_when_the_pool_is_built():
    with pytest.raises(RlvrError, match="gate 'mth'"):
        RewardPool([RewardSpec(name="math"), RewardSpec(name="format", gate="mth")], workers=1)
    with pytest.raises(RlvrError, match="cycle"):
        RewardPool(
            [RewardSpec(name="math", gate="format"), RewardSpec(name="format", gate="math")], workers=1
        )
    with pytest.raises(RlvrError, match="itself"):
        RewardSpec(name="math", gate="math")


# -- the batch deadline and stats ------------------------------------------------------------------


def test_the_batch_deadline_turns_stragglers_into_errors():
    # 16 calls of 0.5 s on one worker need 8 s; the 3 s deadline lets at most 6 finish. Every
    # margin is seconds wide: one call needs 0.5 s of the 3 s, the batch may overrun by 3 s.
    spec = RewardSpec(name=f"{FIX}:sleep_then_len", label="s", params={"seconds": 0.5})
    with RewardPool([spec], workers=1, timeout_s=30.0, batch_deadline_s=3.0) as pool:
        start = time.monotonic()
        results = pool.score(["ab"] * 16, [ex()] * 16)
        elapsed = time.monotonic() - start
        stats = pool.take_stats()["s"]
        after = pool.score(["abc"], [ex()], batch_deadline_s=10.0)
    done = [r for r in results if r.ok]
    late = [r for r in results if not r.ok]
    assert elapsed < 6.0 and 1 <= len(done) <= 6 and len(done) + len(late) == 16
    assert all(r.errors == {"s": "batch deadline"} and r.total is None for r in late)
    assert stats["deadlines"] == len(late) == stats["errors"] and stats["calls"] == 16
    assert after[0].total == 3.0
    with pytest.raises(RlvrError, match="batch_deadline_s"):
        RewardPool([spec], workers=1, batch_deadline_s=0)


def test_stats_are_also_kept_per_routed_verifier():
    batch = [ex("4", verifier="math"), ex("4", verifier="math"), ex("4", verifier="no_such_reward")]
    with RewardPool([RewardSpec(name="verifier")], workers=1) as pool:
        pool.score(tagged("4", "5", "4"), batch)
        stats = pool.take_stats()
    assert stats["verifier"]["calls"] == 3 and stats["verifier"]["errors"] == 1
    assert stats["verifier/math"] == {"calls": 2, "errors": 0, "timeouts": 0, "crashes": 0, "deadlines": 0}
    assert stats["verifier/no_such_reward"]["errors"] == 1


def test_a_failing_worker_setup_is_every_calls_error():
    with RewardPool([RewardSpec(name="fixture_bad_setup", params={"path": "/nowhere"})], workers=1) as pool:
        results = pool.score(["a", "b"], [ex(), ex()])
    for result in results:
        assert result.errors["fixture_bad_setup"] == (
            "reward 'fixture_bad_setup' set-up failed in the worker: OSError: cannot load /nowhere"
        )
