"""pass@k, mean@k and maj@k against hand-computed values and the binomial definition."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rlvr.eval import aggregate_pass_at_k, maj_at_k, mean_at_k, pass_at_k


def test_pass_at_k_hand_computed() -> None:
    assert pass_at_k(5, 2, 1) == pytest.approx(0.4)
    # 1 - C(3,2)/C(5,2) = 1 - 3/10
    assert pass_at_k(5, 2, 2) == pytest.approx(0.7)
    # 1 - C(3,3)/C(5,3) = 1 - 1/10
    assert pass_at_k(5, 2, 3) == pytest.approx(0.9)
    # fewer than k wrong samples: every draw of 4 contains a correct one
    assert pass_at_k(5, 2, 4) == 1.0


def test_pass_at_k_extremes() -> None:
    assert pass_at_k(8, 0, 1) == 0.0
    assert pass_at_k(8, 0, 8) == 0.0
    assert pass_at_k(8, 8, 1) == 1.0
    assert pass_at_k(8, 8, 8) == 1.0
    assert pass_at_k(1, 1, 1) == 1.0


def test_pass_at_k_large_n_is_stable() -> None:
    # C(10000, 500) overflows a float; the product form does not.
    value = pass_at_k(10_000, 3, 500)
    miss = (9500 / 10000) * (9499 / 9999) * (9498 / 9998)  # C(9997, 500) / C(10000, 500)
    assert value == pytest.approx(1 - miss)
    assert 0.0 < value < 1.0


@pytest.mark.parametrize(("n", "c", "k"), [(5, 2, 6), (5, 6, 1), (5, -1, 1), (5, 2, 0)])
def test_pass_at_k_rejects_bad_arguments(n: int, c: int, k: int) -> None:
    with pytest.raises(ValueError):
        pass_at_k(n, c, k)


@given(st.integers(1, 40).flatmap(lambda n: st.tuples(st.just(n), st.integers(0, n), st.integers(1, n))))
def test_pass_at_k_matches_binomial_definition(nck: tuple[int, int, int]) -> None:
    n, c, k = nck
    expected = 1 - math.comb(n - c, k) / math.comb(n, k)
    assert pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12)


@given(st.integers(2, 30).flatmap(lambda n: st.tuples(st.just(n), st.integers(0, n))))
def test_pass_at_k_grows_with_k(nc: tuple[int, int]) -> None:
    n, c = nc
    values = [pass_at_k(n, c, k) for k in range(1, n + 1)]
    assert all(a <= b + 1e-12 for a, b in zip(values, values[1:], strict=False))
    assert values[0] == pytest.approx(c / n)


def test_mean_at_k() -> None:
    assert mean_at_k([1.0, 0.0, 0.5, 0.5]) == pytest.approx(0.5)
    assert mean_at_k([0.25]) == 0.25
    with pytest.raises(ValueError):
        mean_at_k([])


def test_maj_at_k_majority_answer_decides() -> None:
    answers = ["3", "4", "4", None, "4"]
    assert maj_at_k(answers, [True, False, False, False, False]) == 0.0
    assert maj_at_k(answers, [False, True, True, False, True]) == 1.0


def test_maj_at_k_none_does_not_vote() -> None:
    # Three unparsed samples must not outvote the single real answer.
    assert maj_at_k([None, None, None, "7"], [False, False, False, True]) == 1.0
    assert maj_at_k([None, None], [False, False]) == 0.0


def test_maj_at_k_tie_goes_to_first_seen_answer() -> None:
    assert maj_at_k(["a", "b", "b", "a"], [True, False, False, True]) == 1.0
    assert maj_at_k(["b", "a", "a", "b"], [False, True, True, False]) == 0.0
    assert maj_at_k([None, "x", "y"], [False, False, True]) == 0.0


def test_maj_at_k_length_mismatch() -> None:
    with pytest.raises(ValueError, match="length"):
        maj_at_k(["a"], [True, False])


def test_aggregate_pass_at_k() -> None:
    result = aggregate_pass_at_k([(5, 2), (5, 0), (5, 5)], ks=[1, 2])
    assert result == {
        "pass@1": pytest.approx((0.4 + 0.0 + 1.0) / 3),
        "pass@2": pytest.approx((0.7 + 0.0 + 1.0) / 3),
    }


def test_aggregate_pass_at_k_errors() -> None:
    with pytest.raises(ValueError):
        aggregate_pass_at_k([(4, 1), (2, 1)], ks=[4])
    with pytest.raises(ValueError):
        aggregate_pass_at_k([], ks=[1])


def test_sampled_eval_scores_each_completion_against_its_own_problem() -> None:
    """Regression: prompts are generated in chunks, and each chunk's prompt_index restarts at 0."""
    from rlvr.data import Example
    from rlvr.eval.evaluate import evaluate
    from rlvr.rewards import RewardResult
    from rlvr.rollout import Completion

    class EchoEngine:  # answers every prompt with its own id, as one group per prompt
        def generate(self, prompts, params):
            return [
                [Completion(i, p, [1], [0.0], "stop", text=str(p[0])) for _ in range(params.n)]
                for i, p in enumerate(prompts)
            ]

    examples = [Example(id=str(i), prompt=[], reference=str(i)) for i in range(10)]

    def score(completions, exs, sizes):
        return [RewardResult(float(c.text == e.reference), {}, {}) for c, e in zip(completions, exs)]

    metrics = evaluate(
        EchoEngine(), [[i] for i in range(10)], examples, score, 4, samples=2, pass_k=[1], chunk=4
    )
    assert metrics["eval/accuracy"] == 1.0
    assert metrics["eval/pass@1"] == 1.0


def test_sampled_eval_reports_majority_vote_accuracy() -> None:
    """maj@k: a problem counts when its samples' most common answer is a correct one; answers vote
    by value ("5" and "5.0" together) wherever they are written."""
    from rlvr.data import Example
    from rlvr.eval.evaluate import evaluate
    from rlvr.rewards import RewardResult
    from rlvr.rollout import Completion

    answers = {0: ["7", "<answer>5</answer>", "The answer is 5.0"], 1: ["3", "4", "<answer>4</answer>"]}

    class VotingEngine:  # each prompt's samples answer as listed; greedy gives the first
        def generate(self, prompts, params):
            return [
                [Completion(i, p, [1], [0.0], "stop", text=answers[p[0]][j]) for j in range(params.n)]
                for i, p in enumerate(prompts)
            ]

    examples = [Example(id="0", prompt=[], reference="5"), Example(id="1", prompt=[], reference="3")]

    def score(completions, exs, sizes):
        from rlvr.eval.evaluate import vote

        return [
            RewardResult(float(vote(c.text) == vote(e.reference)), {}, {}) for c, e in zip(completions, exs)
        ]

    metrics = evaluate(VotingEngine(), [[0], [1]], examples, score, 4, samples=3, pass_k=[1, 3])
    assert metrics["eval/maj@3"] == 0.5  # problem 0: 5 (twice) wins and is right; problem 1: 4, wrong
    assert metrics["eval/pass@3"] == 1.0 and metrics["eval/pass@1"] == pytest.approx((2 / 3 + 1 / 3) / 2)
    assert metrics["eval/accuracy"] == 0.5  # greedy: the first answer of each, 7 and 3
    assert "eval/maj@1" not in evaluate(VotingEngine(), [[0]], examples[:1], score, 4, samples=1)
