"""Answer extraction: each mode, the auto order, and pathological megabyte inputs."""

from __future__ import annotations

import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rlvr.errors import RlvrError
from rlvr.rewards import EXTRACT_MODES, extract_answer


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("<answer> 42 </answer>", "42"),
        ("<answer>1</answer> then <answer>2</answer>", "2"),
        ("<answer>1</answer> then <answer>2", None),  # the last answer is unfinished: none at all
        ("<answer>5", None),
        ("<Answer>x</ANSWER>", "x"),
        ("<answer>   </answer>", None),
        ("<answer>a<answer>b</answer>", "b"),
        ("no tags at all", None),
    ],
)
def test_answer_tag(text, expected):
    assert extract_answer(text, "answer_tag") == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (r"so \boxed{\frac{1}{2}}.", r"\frac{1}{2}"),
        (r"\boxed{1} and later \boxed{2}", "2"),
        (r"\boxed{x^{2} + \sqrt{y_{1}}}", r"x^{2} + \sqrt{y_{1}}"),
        (r"\boxed{\boxed{3}}", "3"),
        # Nested boxes: the outer box is the answer, inner box commands are dropped.
        (r"\boxed{\frac{1}{\boxed{2}}}", r"\frac{1}{2}"),
        (r"\boxed{x = \boxed{3}}", "x = 3"),
        (r"\boxed{\fbox{1} + \boxed{\boxed{2}}} = 3", "1 + 2"),
        (r"\boxed{2 \boxed{3}", None),  # the outer box never closes: the box inside it is no answer
        (r"\boxed{\boxed{}}", None),
        (r"\boxed{\{1, 2\}}", r"\{1, 2\}"),  # escaped braces are text, not nesting
        (r"\boxed{7} then a cut-off \boxed{8", None),  # the last box is unfinished
        (r"\fbox{9}", "9"),
        (r"\boxed {4}", "4"),
        (r"\boxed{}", None),
        ("nothing boxed", None),
    ],
)
def test_boxed(text, expected):
    assert extract_answer(text, "boxed") == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Answer: 42.", "42"),
        ("**Answer:** 42", "42"),
        ("The final answer is $\\frac{1}{2}$.", "$\\frac{1}{2}$"),
        ("the answer is: 3", "3"),
        ("first the answer is 5, no wait, the answer is 6", "6"),
        ("Answer: 1\nthinking more\nANSWER: 2\n", "2"),
        ("Answer:\n\n17\n", "17"),
        ("the answers are many", None),
    ],
)
def test_answer_line(text, expected):
    assert extract_answer(text, "answer_line") == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("it is -28", "-28"),
        ("total: 1,234,567 apples", "1234567"),
        ("pi is about 3.14159", "3.14159"),
        ("half is 1/2", "1/2"),
        ("x = -7/8", "-7/8"),
        ("10-5", "5"),  # a binary minus is not a sign
        ("(-3)", "-3"),
        ("\u22124", "-4"),  # Unicode minus
        ("values 1,2,3,4", "4"),  # a list, not a thousands separator
        ("costs $1,000.", "1000"),
        ("no digits here", None),
    ],
)
def test_last_number(text, expected):
    assert extract_answer(text, "last_number") == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("(B)", "B"),
        ("Answer: C", "C"),
        (r"\boxed{D}", "D"),
        (r"\boxed{\text{(D)}}", "D"),
        ("<answer> $B$ </answer>", "B"),
        ("<answer>c</answer>", "C"),  # a lone lower-case letter is an option
        ("The answer is (B) 42.", "B"),
        ("Answer: **B**", "B"),
        ("Answer: option (c)", "C"),
        ("<answer>A) 12</answer>", "A"),
        ("first (A), then (C)", "C"),  # the last parenthesised letter
        ("Answer: 42", None),
        ("Answer: Apple", None),  # a word is not a letter
        ("I think A number", None),
        ("nothing", None),
    ],
)
def test_choice(text, expected):
    assert extract_answer(text, "choice") == expected


def test_auto_prefers_tag_then_boxed_then_line_then_number():
    assert extract_answer(r"Answer: 3 \boxed{2} <answer>1</answer> 4") == "1"
    assert extract_answer(r"Answer: 3 \boxed{2} 4") == "2"
    assert extract_answer("Answer: 3\n4") == "3"
    assert extract_answer("3 then 4") == "4"
    assert extract_answer("<answer>5 unclosed") is None
    assert extract_answer("nothing") is None


# A completion that opens a box or an answer tag and never closes it gives no answer: not in the
# mode that reads boxes, and not in any other mode by falling back to what else the text holds.
UNFINISHED = [
    r"Let me compute: 7 + 5. So the answer is \boxed{12",
    r"\boxed{ 7 + 5 = 12 and then 3",
    r"We get 12. Final: \boxed{",
    r"x = \boxed{\frac{1}{2}",  # nested braces close, the box does not
    r"\boxed{\frac{1}{\boxed{2}}",  # a closed box inside an unclosed one
    r"\boxed{12} wait, no: \boxed{13",  # an earlier box does not stand in for the unfinished one
    r"\boxed{4 Answer: (B) \boxed{5}",  # a box opened early and never closed holds the rest
    "<answer>12",
    "Answer: 12\n<answer>13",
    "<answer>(B)</answer> no, <answer>(C",
    r"<answer>\boxed{12</answer>",  # a complete tag around an unfinished box
    r"<answer>12</answer> then \boxed{13",
]


@pytest.mark.parametrize("text", UNFINISHED)
@pytest.mark.parametrize("mode", EXTRACT_MODES)
def test_an_unfinished_answer_is_no_answer_in_any_mode(text, mode):
    assert extract_answer(text, mode) is None


@pytest.mark.parametrize(
    ("text", "mode", "expected"),
    [
        (r"\boxed{12}}", "boxed", "12"),  # a stray closing brace after the box is harmless
        (r"\{ \boxed{12}", "auto", "12"),  # an escaped brace is text, not an open box
        (r"{ \boxed{12}", "boxed", "12"),  # a plain brace left open does not hold an answer
        ("<answer>a<answer>b</answer>", "answer_tag", "b"),  # the last <answer> is closed
        ("</answer> it is 12", "last_number", "12"),  # a stray closing tag opens nothing
        (r"\boxed{12} and <answer>12</answer>", "auto", "12"),
    ],
)
def test_finished_answers_around_stray_braces_and_tags_still_count(text, mode, expected):
    assert extract_answer(text, mode) == expected


def test_unknown_mode_lists_allowed():
    with pytest.raises(RlvrError) as info:
        extract_answer("x", "tags")
    assert "tags" in str(info.value)
    for mode in EXTRACT_MODES:
        assert mode in str(info.value)


PATHOLOGICAL = [
    "a" * 1_000_000,
    "<answer>" * 120_000,
    "</answer>" * 120_000,
    "\\boxed{" * 150_000,
    "{" * 1_000_000,
    "answer answer is " * 60_000,
    "answer:\n**\n" * 100_000,
    "1," * 500_000,
    "-" * 1_000_000,
    "1" * 1_000_000,
    ".5" * 500_000,
    "1,123" * 200_000 + "4",
    "(" * 1_000_000,
    "(A)" * 300_000,
    "Answer: " + "(" * 1_000_000,
]


@pytest.mark.parametrize("mode", EXTRACT_MODES)
def test_megabyte_inputs_are_linear_time(mode):
    started = time.perf_counter()
    for text in PATHOLOGICAL:
        extract_answer(text, mode)
    # Linear scans take ~0.1 s per megabyte here; anything quadratic would take hours.
    assert time.perf_counter() - started < 10


_TAG_FREE = st.text(alphabet=st.characters(blacklist_characters="<>"), min_size=1).filter(str.strip)


@given(before=st.text(alphabet=st.characters(blacklist_characters="<>")), answer=_TAG_FREE)
def test_answer_tag_round_trip(before, answer):
    assert extract_answer(f"{before}<answer>{answer}</answer>", "answer_tag") == answer.strip()


@given(st.integers(min_value=-(10**12), max_value=10**12))
def test_last_number_round_trips_formatted_integers(n):
    assert extract_answer(f"so the total is {n:,}", "last_number") == str(n)
