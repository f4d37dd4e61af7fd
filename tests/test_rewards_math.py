"""The ``math`` and ``choice`` rewards: answer forms, equivalence properties, adversarial inputs."""

from __future__ import annotations

import time
from decimal import Decimal
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlvr.data.example import Example
from rlvr.rewards import RewardPool, RewardSpec, get_reward


def ex(reference: str) -> Example:
    return Example(id="m", prompt=[{"role": "user", "content": "q"}], reference=reference)


def math(answer: str, reference: str) -> float:
    return get_reward("math")(f"<answer>{answer}</answer>", ex(reference))


@pytest.mark.parametrize(
    ("answer", "reference", "expected"),
    [
        # percentages
        (r"50\%", "0.5", 1.0),
        ("50%", "1/2", 1.0),
        ("0.5", "50%", 1.0),
        # units and currency
        ("10 cm", "10", 1.0),
        (r"10\text{ cm}", "10", 1.0),
        (r"5 \mathrm{m/s}", "5", 1.0),
        (r"\$10", "10", 1.0),
        ("$10", "10", 1.0),
        (r"\$12", "10", 0.0),
        # intervals and sets
        ("(1, 2]", "(1,2]", 1.0),
        ("[1, 2]", "(1,2]", 0.0),
        (r"[1, 2] \cup [3, 4]", r"[1,2]\cup[3,4]", 1.0),
        (r"\{1,2,3\}", r"\{3,2,1\}", 1.0),
        (r"\{1,2\}", r"\{1,2,3\}", 0.0),
        # tuples are ordered
        ("(1,2)", "(1,2)", 1.0),
        ("(1,2)", "(2,1)", 0.0),
        # matrices
        (r"\begin{pmatrix}1&2\\3&4\end{pmatrix}", r"\begin{pmatrix}1&2\\3&4\end{pmatrix}", 1.0),
        (r"\begin{pmatrix}1&2\\3&4\end{pmatrix}", r"\begin{pmatrix}1&2\\3&5\end{pmatrix}", 0.0),
        # LaTeX against plain text, symbolic forms
        ("sqrt(2)/2", r"\frac{\sqrt{2}}{2}", 1.0),
        (r"\dfrac{3}{4}", "0.75", 1.0),
        (r"2\pi", r"\pi \cdot 2", 1.0),
        ("x^2 + 2x + 1", "(x+1)^2", 1.0),
        ("x = 3", "3", 1.0),
        ("1,000,000", "1000000", 1.0),
        (r"\pi", "3.14", 0.0),
    ],
)
def test_math_answer_forms(answer, reference, expected):
    assert math(answer, reference) == expected


def _forms(value: Fraction) -> list[str]:
    """Ways a person or model writes ``value`` (a number with a terminating decimal)."""
    p, q = value.numerator, value.denominator
    decimal = str(Decimal(p) / Decimal(q))
    sign, magnitude = ("-", -p) if p < 0 else ("", p)
    forms = [decimal, f"${decimal}$", f"{p}/{q}", rf"{sign}\frac{{{magnitude}}}{{{q}}}"]
    forms.append(rf"${sign}\frac{{{magnitude * 3}}}{{{q * 3}}}$")  # not reduced
    if q == 1:
        forms += [str(p), f"${p}$", f"{p}.0"]
    return forms


terminating = st.builds(
    Fraction, st.integers(-5000, 5000), st.sampled_from([1, 2, 4, 5, 8, 10, 16, 20, 25, 40, 100])
)


@settings(max_examples=30, deadline=None)
@given(terminating, st.data())
def test_equivalent_forms_of_a_number_are_accepted(value, data):
    forms = _forms(value)
    answer = data.draw(st.sampled_from(forms), label="answer")
    reference = data.draw(st.sampled_from(forms), label="reference")
    assert math(answer, reference) == 1.0


@settings(max_examples=30, deadline=None)
@given(terminating, terminating, st.data())
def test_different_numbers_are_rejected(a, b, data):
    if a == b:
        b = a + Fraction(1, 8)
    answer = data.draw(st.sampled_from(_forms(a)), label="answer")
    reference = data.draw(st.sampled_from(_forms(b)), label="reference")
    assert math(answer, reference) == 0.0


def test_overlong_answers_are_errors_not_parses():
    with pytest.raises(ValueError, match="max_answer_chars"):
        get_reward("math")("<answer>" + "1+" * 5000 + "1</answer>", ex("2"))


def test_adversarial_answers_never_hang_the_pool():
    """Exponent towers, deep nesting and megabyte answers come back in bounded time, as errors."""
    timeout = 1.5
    adversarial = [
        r"<answer>10^{10^{10}}</answer>",
        r"\boxed{9^{9^{9^{9}}}}",
        "<answer>9^9^9^9</answer>",
        "<answer>" + r"\frac{" * 400 + "1" + "}{2}" * 400 + "</answer>",
        "<answer>" + "(" * 5000 + "1" + ")" * 5000 + "</answer>",
        "<answer>" + "9" * (1 << 20) + "</answer>",  # a megabyte answer
        "x" * (1 << 20) + r"\boxed{" * 2000,  # a megabyte of text with unbalanced boxes
    ]
    completions = [*adversarial, "<answer>4</answer>", "<answer>5</answer>"]
    with RewardPool([RewardSpec(name="math")], workers=2, timeout_s=timeout) as pool:
        start = time.monotonic()
        results = pool.score(completions, [ex("4")] * len(completions))
        elapsed = time.monotonic() - start
        stats = pool.take_stats()["math"]
    # Each call is bounded by the timeout; two workers share the batch.
    assert elapsed < timeout * len(adversarial) / 2 + 5.0
    assert [r.total for r in results[-2:]] == [1.0, 0.0]  # the batch is still scored
    for result in results[: len(adversarial)]:
        assert result.total in (0.0, None)  # never rewarded
        assert result.ok or result.errors["math"]
    assert results[0].errors["math"] == f"timeout after {timeout:g}s"
    assert results[5].errors["math"].startswith("ValueError: answer of")
    assert stats["calls"] == len(completions)
    assert stats["errors"] == sum(not r.ok for r in results) >= 2 and stats["timeouts"] >= 1


# -- multiple choice -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("completion", "expected"),
    [
        ("The answer is (B).", 1.0),
        ("Answer: B", 1.0),
        (r"so \boxed{B}", 1.0),
        (r"\boxed{\text{(B)}}", 1.0),
        ("<answer>b</answer>", 1.0),
        ("Answer: **B) 42**", 1.0),
        ("Answer: Option B", 1.0),
        ("(A) looks wrong, (C) too, so (B)", 1.0),
        ("Answer: C", 0.0),
        ("Both are fine", 0.0),  # a capital starting a word is not an option
        ("I think B", 0.0),  # a bare letter without a cue is not read
    ],
)
def test_choice_reward(completion, expected):
    assert get_reward("choice")(completion, ex("B")) == expected


def test_choice_reference_forms_and_errors():
    reward = get_reward("choice")
    assert reward("Answer: D", ex("(D) 17")) == 1.0
    with pytest.raises(ValueError, match="not an option letter"):
        reward("Answer: D", ex("seventeen"))
