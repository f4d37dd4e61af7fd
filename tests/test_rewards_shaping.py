"""Shaping rewards: strict think/answer structure, repetition penalty, cosine-scaled length."""

from __future__ import annotations

import pytest

from rlvr.data.example import Example
from rlvr.rewards import get_reward


def ex(reference: str | None = None) -> Example:
    return Example(id="s", prompt=[{"role": "user", "content": "q"}], reference=reference)


@pytest.mark.parametrize(
    ("completion", "prefilled", "expected"),
    [
        ("<think>hmm</think><answer>4</answer>", False, 1.0),
        ("  <think>\nhmm\n</think>\n\n<answer> 4 </answer>\n", False, 1.0),
        ("hmm</think><answer>4</answer>", True, 1.0),  # the prompt ended with <think>
        ("<think></think><answer>4</answer>", False, 0.0),  # empty reasoning
        ("<think>hmm</think><answer> </answer>", False, 0.0),
        ("preamble <think>hmm</think><answer>4</answer>", False, 0.0),
        ("<think>hmm</think> aside <answer>4</answer>", False, 0.0),
        ("<think>hmm</think><answer>4</answer> trailing", False, 0.0),
        ("<answer>4</answer><think>hmm</think>", False, 0.0),
        ("<think>a</think><think>b</think><answer>4</answer>", False, 0.0),
        ("<think>hmm <answer>4</answer></think>", False, 0.0),
    ],
)
def test_think_format(completion, prefilled, expected):
    assert get_reward("think_format")(completion, ex(), prefilled_think=prefilled) == expected


def test_format_with_require_think_is_the_lenient_variant():
    # Verified behaviour of the existing `format` reward: text around the tags is allowed.
    assert (
        get_reward("format")("ok <think>a</think> so <answer>4</answer> done", ex(), require_think=True)
        == 1.0
    )
    assert get_reward("think_format")("ok <think>a</think> so <answer>4</answer> done", ex()) == 0.0


def test_repetition_penalty():
    reward = get_reward("repetition_penalty")
    assert reward("the quick brown fox jumps over the lazy dog", ex()) == 0.0
    assert reward("too short", ex()) == 0.0
    looping = "I am stuck. " * 50
    assert reward(looping, ex()) == pytest.approx(-1.0 * (1 - 3 / 148))
    assert reward(looping, ex(), max_penalty=-0.5) == pytest.approx(-0.5 * (1 - 3 / 148))
    assert reward("a b a b a b", ex(), ngram=2) == pytest.approx(-(1 - 2 / 5))


def test_cosine_length_orders_answers_as_the_paper_says():
    reward = get_reward("cosine_length")

    def score(answer: str, tokens: int, **kwargs) -> float:
        return reward(
            f"<answer>{answer}</answer>", ex("42"), max_tokens=1000, completion_tokens=tokens, **kwargs
        )

    correct_short, correct_long = score("42", 100), score("42", 900)
    wrong_short, wrong_long = score("41", 100), score("41", 900)
    assert correct_short > correct_long > wrong_long > wrong_short
    assert score("42", 0) == pytest.approx(1.0) and score("42", 1000) == pytest.approx(0.5)
    assert score("41", 0) == pytest.approx(-1.0) and score("41", 1000) == pytest.approx(-0.5)
    assert score("42", 500) == pytest.approx(0.75)  # the cosine's midpoint
    assert score("42", 1001) == -1.0 and score("42", 10, finish_reason="length") == -1.0
    assert score("42", 10, exceed=-5.0, finish_reason="length") == -5.0


def test_cosine_length_uses_any_correctness_reward_and_needs_tokens():
    reward = get_reward("cosine_length")
    example = ex("Paris")
    kwargs = {"max_tokens": 100, "completion_tokens": 0, "correct_reward": "exact_match"}
    assert reward("<answer>Paris</answer>", example, **kwargs) == pytest.approx(1.0)
    assert reward("<answer>paris</answer>", example, **kwargs) == pytest.approx(-1.0)
    params = {"case_sensitive": False}
    assert reward("<answer>paris</answer>", example, correct_params=params, **kwargs) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="completion_tokens"):
        reward("<answer>Paris</answer>", example, max_tokens=100)
