"""The ``math`` and ``choice`` rewards: answer forms, equivalence properties, adversarial inputs."""

from __future__ import annotations

import time
from decimal import Decimal
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlvr.data.example import Example
from rlvr.errors import RlvrError
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


# Cases where math-verify alone (rlvr before issue 15) gave a wrong verdict, and adversarial answers a
# policy could write to score with a wrong answer. docs/rewards.md tabulates them ("Agreement with
# external references"); keep the two in step.
AGREEMENT_CASES = [
    # (completion, reference, expected, what it checks)
    ("<answer>1.5e-4</answer>", "0.00015", 1.0, "scientific notation, not 1.5e - 4"),
    ("<answer>0.00015</answer>", "1.5e-4", 1.0, "scientific notation in the reference"),
    ("<answer>6.02e23</answer>", r"6.02\times10^{23}", 1.0, "e-notation = LaTeX power of ten"),
    (r"<answer>6.02\times10^{23}</answer>", "6.02e23", 1.0, "LaTeX power of ten = e-notation"),
    ("<answer>6.022e23</answer>", "602200000000000000000000", 1.0, "e-notation = the integer"),
    ("<answer>1.6e-4</answer>", "0.00015", 0.0, "a different number in e-notation"),
    ("<answer>2e-1</answer>", "2e - 1", 1.0, "Euler's number in the reference: 2e - 1 stays 2e - 1"),
    ("<answer>2e-1</answer>", "0.2", 1.0, "no Euler's number in the reference: 2e-1 is 0.2"),
    ("<answer>x<3</answer>", r"(-\infty,3)", 1.0, "solved inequality = interval"),
    (r"<answer>(-\infty,3)</answer>", "x<3", 1.0, "interval = inequality"),
    (r"<answer>x \le 3</answer>", r"(-\infty,3)", 0.0, "closed end is not the open interval"),
    ("<answer>1<x<2</answer>", "(1,2)", 1.0, "double inequality = interval"),
    (r"<answer>x<1 \text{ or } x>2</answer>", r"(-\infty,1)\cup(2,\infty)", 1.0, "'or' = union"),
    ("<answer>2x<6</answer>", r"(-\infty,3)", 0.0, "an unsolved inequality is not the answer"),
    ("<answer>(x-1)(x-2)<0</answer>", "(1,2)", 0.0, "restating the problem is not the answer"),
    ("<answer>x+1=4</answer>", "x=3", 0.0, "restating the equation is not the answer"),
    ("<answer>6/2=3</answer>", "3", 1.0, "a worked equality: its right side"),
    ("<answer>2=3</answer>", "3", 0.0, "a false equality with the right number last"),
    ("<answer>0.0000002</answer>", "0.0000001", 0.0, "tiny numbers: 6 significant figures"),
    ("<answer>1e-7</answer>", "0.0000001", 1.0, "tiny numbers: equal ones still match"),
    (r"<answer>2\cdot10^{-20}</answer>", "10^{-20}", 0.0, "tiny exact numbers are not chopped to 0"),
    ("<answer>(0.0000002, 1)</answer>", "(0.0000001, 1)", 0.0, "tiny numbers inside a tuple"),
    ("<answer>0.0333333</answer>", "1/30", 1.0, "a rounded decimal, 6 significant figures"),
    (r"\boxed{\frac{1}{\boxed{2}}}", "2", 0.0, "nested box: the inner number is not the answer"),
    (r"\boxed{\frac{1}{\boxed{2}}}", "1/2", 1.0, "nested box: the outer box is"),
    (r"\boxed{x = \boxed{3}}", "3", 1.0, "nested box around the value"),
    (r"\boxed{x = \boxed{3}}", "5", 0.0, "nested box around a wrong value"),
    (r"The answer is \boxed{}. It is 7", "7", 1.0, "empty box: the later answer counts"),
    (r"\boxed{3} or maybe \boxed{2}", "3", 0.0, "several boxes: only the last counts"),
    (r"\boxed{2, 3}", "3", 0.0, "a list of candidates is not the answer"),
    ("<answer>1,2,3,4,5</answer>", "3", 0.0, "a list of every candidate"),
    (r"<answer>3 \text{ or } 4</answer>", "3", 0.0, "two alternatives"),
    (r"<answer>\pm 3</answer>", "3", 0.0, "plus or minus"),
    (r"<answer>x \in \{3, 4\}</answer>", "3", 0.0, "membership in a candidate set"),
    ("<answer>0.5</answer>", r"0.5\%", 0.0, "0.5 is not 0.5%"),
    (r"<answer>50\%</answer>", "1/2", 1.0, "50% is one half"),
    ("<answer>50</answer>", r"\frac{1}{2}", 0.0, "50 is not one half"),
    ("<answer>0.5000001</answer>", "0.5", 0.0, "a reference stated exactly is compared exactly"),
    ("<answer>12.5000004</answer>", "12.5", 0.0, "no rounding to 6 decimal places"),
    ("<answer>.50</answer>", "1/2", 1.0, "the same exact number written two ways"),
    ("<answer>1/3</answer>", "0.333333", 0.0, "a rounded reference is taken as written"),
    (r"\boxed{ 7 + 5 = 12 and then 3", "3", 0.0, "an unclosed box: no answer, not the last number"),
    (r"\boxed{7} then a cut-off \boxed{8", "7", 0.0, "an unclosed last box: no earlier box instead"),
    ("<answer>12", "12", 0.0, "an unclosed answer tag: no answer"),
]


@pytest.mark.parametrize(("completion", "reference", "expected", "why"), AGREEMENT_CASES)
def test_agreement_cases(completion, reference, expected, why):
    assert get_reward("math")(completion, ex(reference)) == expected, why


@pytest.mark.parametrize(
    ("answer", "reference", "expected"),
    [
        # A reference every number of which a decimal states exactly: exact equality, nothing else.
        ("0.5000001", "0.5", 0.0),
        ("0.4999999", "0.5", 0.0),
        ("0.500000000000000001", "0.5", 0.0),  # equal as binary floats, not as numbers
        ("0.1000001", "0.1", 0.0),
        ("1000001", "1000000", 0.0),
        ("1000000.1", "1000000", 0.0),
        ("x = 0.5000001", "0.5", 0.0),
        (r"0.5000001\text{ cm}", "0.5", 0.0),
        (r"50.00001\%", "0.5", 0.0),
        ("(0.5000001, 1)", "(0.5, 1)", 0.0),
        ("0.5000001", "x = 0.5", 0.0),
        (r"\begin{pmatrix}0.5000001\end{pmatrix}", r"\begin{pmatrix}0.5\end{pmatrix}", 0.0),
        ("2.0000001x + 1", "2x + 1", 0.0),
        # ... while every exact way of writing the same number still counts.
        ("1/2", "0.5", 1.0),
        (".50", "0.5", 1.0),
        ("0.500", "1/2", 1.0),
        (r"50\%", "0.5", 1.0),
        ("x = 0.5", "0.5", 1.0),
        ("12.50", r"\frac{25}{2}", 1.0),
        ("1000000.0", "1000000", 1.0),
        ("(0.50, 1.0)", "(1/2, 1)", 1.0),
        ("2.0x + 1", "2x + 1", 1.0),
        ("0.500000000000000000000000000001", "0.500000000000000000000000000001", 1.0),
        # A reference no decimal states keeps 6 significant figures for a decimal answer.
        ("0.333333", "1/3", 1.0),
        ("0.333334", "1/3", 0.0),
        ("1.41421356", r"\sqrt{2}", 1.0),
    ],
)
def test_numbers_the_reference_states_exactly_are_compared_exactly(answer, reference, expected):
    assert math(answer, reference) == expected


def test_a_tolerance_applies_only_when_configured():
    reward = get_reward("math")
    close = "<answer>0.5000001</answer>"
    assert reward(close, ex("0.5")) == 0.0
    assert reward(close, ex("0.5"), tolerance=1e-6) == 1.0
    assert reward("<answer>0.5001</answer>", ex("0.5"), tolerance=1e-6) == 0.0
    assert reward("<answer>1000001</answer>", ex("1000000"), tolerance=1e-6) == 1.0  # relative
    assert reward("<answer>1000002</answer>", ex("1000000"), tolerance=1e-6) == 0.0
    assert reward("<answer>x = 0.4999999</answer>", ex("0.5"), tolerance=1e-6) == 1.0
    assert reward("<answer>0.0000001</answer>", ex("0"), tolerance=1e-6) == 1.0  # absolute at 0
    assert reward("<answer>0.3333</answer>", ex("1/3"), tolerance=1e-3) == 1.0
    assert reward("<answer>(0.5000001, 1)</answer>", ex("(0.5, 1)"), tolerance=1e-6) == 0.0  # numbers only
    with pytest.raises(RlvrError):
        RewardSpec(name="math", params={"tolerance": -0.1})
    assert RewardSpec(name="math", params={"tolerance": 1e-6}).params["tolerance"] == 1e-6


@pytest.mark.parametrize(
    ("completion", "reference"),
    [
        (r"\boxed{ 7 + 5 = 12 and then 3", "3"),
        (r"We get 12. Final answer: \boxed{", "12"),
        (r"So the answer is \boxed{12", "12"),
        (r"\boxed{12} or rather \boxed{13", "12"),
        ("<answer>12", "12"),
        ("<answer>12</answer> no wait <answer>13", "12"),
    ],
)
def test_an_unfinished_answer_scores_zero_not_an_error(completion, reference):
    example = ex(reference)
    assert get_reward("math")(completion, example) == 0.0
    assert get_reward("exact_match")(completion, example) == 0.0
    assert get_reward("numeric_closeness")(completion, example, extract="auto") == 0.0


@pytest.mark.parametrize(
    ("answer", "reference", "expected"),
    [
        ("1/2", "0.5", 1.0),  # a fraction is a number (read as a float, it was no answer)
        (".50", "1/2", 1.0),
        ("0.500000000000000001", "0.5", "below 1"),  # not exact: through a float it scored 1.0
        ("0.5000001", "0.5", "below 1"),
        ("-1/2", "0.5", 0.0),
    ],
)
def test_numeric_closeness_reads_numbers_exactly(answer, reference, expected):
    score = get_reward("numeric_closeness")(f"<answer>{answer}</answer>", ex(reference))
    if expected == "below 1":
        assert 0.99 < score < 1.0
    else:
        assert score == expected


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
