"""The built-in reward functions, called directly (the pool tests cover running them in workers)."""

from __future__ import annotations

import threading
from decimal import Decimal
from fractions import Fraction

import pytest
import reasoning_gym
from hypothesis import given, settings
from hypothesis import strategies as st

from rlvr.data.example import Example
from rlvr.errors import RlvrError
from rlvr.rewards import get_reward, list_rewards, register_reward


def _example(reference=None, **metadata):
    return Example(id="ex", prompt=[{"role": "user", "content": "q"}], reference=reference, metadata=metadata)


@pytest.fixture(scope="module")
def chain_sum():
    data = reasoning_gym.create_dataset(
        "chain_sum", size=5, seed=0, min_terms=2, max_terms=2, min_digits=1, max_digits=2
    )
    return [_example(reference=entry["answer"], rg_entry=entry) for entry in data]


def test_builtins_are_registered():
    names = set(list_rewards())
    assert {
        "reasoning_gym",
        "math",
        "exact_match",
        "format",
        "length_penalty",
        "overlong",
        "verifier",
    } <= names


def test_registry_rejects_taken_names_and_import_path_names():
    def first(completion, example):
        return 1.0

    def second(completion, example):
        return 2.0

    register_reward("test_builtin_taken")(first)
    register_reward("test_builtin_taken")(first)  # the same function again (a re-import) is fine
    assert get_reward("test_builtin_taken") is first
    with pytest.raises(RlvrError, match="test_builtin_taken"):
        register_reward("test_builtin_taken")(second)
    with pytest.raises(RlvrError, match="import path"):
        register_reward("pkg.mod:fn")


def test_get_reward_resolves_import_paths():
    assert get_reward("rlvr.rewards.builtin:format_reward") is get_reward("format")
    with pytest.raises(RlvrError, match="format_rewardd"):
        get_reward("rlvr.rewards.builtin:format_rewardd")


# -- reasoning_gym -------------------------------------------------------------------------------


def test_reasoning_gym_scores_with_the_task_scorer(chain_sum):
    reward = get_reward("reasoning_gym")
    for example in chain_sum:
        answer = example.metadata["rg_entry"]["answer"]
        wrong = str(int(answer) + 1)
        assert reward(f"thinking <answer>{answer}</answer>", example) == 1.0
        assert reward(f"<answer>{wrong}</answer>", example) == 0.0
        assert reward(f"the result is {answer}", example) == 0.0  # no tag: no answer
        assert reward(f"the result is {answer}", example, extract="auto") == 1.0


def test_reasoning_gym_without_entry_is_an_error_not_zero():
    with pytest.raises(ValueError, match="rg_entry"):
        get_reward("reasoning_gym")("<answer>1</answer>", _example(reference="1"))


# -- math ----------------------------------------------------------------------------------------

HALF = ["1/2", "0.5", r"\frac{1}{2}", r"\frac12", r"$\frac{1}{2}$", r"\boxed{\frac{1}{2}}"]


@pytest.mark.parametrize("reference", HALF)
@pytest.mark.parametrize("answer", HALF)
def test_math_equivalent_forms(answer, reference):
    assert get_reward("math")(f"<answer>{answer}</answer>", _example(reference)) == 1.0


@pytest.mark.parametrize(
    ("answer", "reference", "expected"),
    [
        ("3", "4", 0.0),
        ("3", "3.0", 1.0),
        ("-28", "-28", 1.0),
        ("1,000", "1000", 1.0),
        (r"\sqrt{2}/2", r"\frac{\sqrt{2}}{2}", 1.0),
        ("x^2+1", "1+x^2", 1.0),
        ("0.333", "1/3", 0.0),
        ("banana", "5", 0.0),
    ],
)
def test_math_decisions(answer, reference, expected):
    assert get_reward("math")(f"<answer>{answer}</answer>", _example(reference)) == expected


def test_math_extracts_boxed_and_last_number():
    reward = get_reward("math")
    assert reward(r"so the result is \boxed{\frac{3}{4}}", _example("0.75")) == 1.0
    assert reward("we get 12 then 14", _example("14")) == 1.0
    assert reward("no answer here", _example("14")) == 0.0


def test_math_cannot_judge_without_a_usable_reference():
    with pytest.raises(ValueError, match="reference"):
        get_reward("math")("<answer>1</answer>", _example(None))
    with pytest.raises(ValueError, match="cannot parse"):
        get_reward("math")("<answer>1</answer>", _example("\\"))


def test_math_works_outside_the_main_thread():
    # math-verify's default signal.alarm timeout raises in threads; peers turned that into 0.0.
    results = []
    thread = threading.Thread(
        target=lambda: results.append(get_reward("math")("<answer>0.5</answer>", _example(r"\frac{1}{2}")))
    )
    thread.start()
    thread.join()
    assert results == [1.0]


@settings(max_examples=40, deadline=None)
@given(st.integers(-1000, 1000), st.integers(-1000, 1000))
def test_math_integers_match_iff_equal(a, b):
    assert get_reward("math")(f"<answer>{a}</answer>", _example(str(b))) == float(a == b)


@settings(max_examples=40, deadline=None)
@given(st.integers(-999, 999), st.sampled_from([1, 2, 4, 5, 8, 10, 20, 25]))
def test_math_fraction_equals_its_decimal(p, q):
    decimal = Decimal(p) / Decimal(q)
    assert get_reward("math")(rf"<answer>\frac{{{p}}}{{{q}}}</answer>", _example(str(decimal))) == 1.0
    other = Fraction(p, q) + Fraction(1, 3)
    assert get_reward("math")(f"<answer>{other}</answer>", _example(str(decimal))) == 0.0


# -- exact_match, format -------------------------------------------------------------------------


def test_exact_match():
    reward = get_reward("exact_match")
    assert reward("<answer>  Paris </answer>", _example(" Paris")) == 1.0
    assert reward("<answer>paris</answer>", _example("Paris")) == 0.0
    assert reward("<answer>paris</answer>", _example("Paris"), case_sensitive=False) == 1.0
    assert reward("no answer", _example("Paris"), extract="answer_tag") == 0.0
    with pytest.raises(ValueError, match="reference"):
        reward("<answer>x</answer>", _example(None))


@pytest.mark.parametrize(
    ("completion", "reference", "params", "expected"),
    [
        ("<answer>-12</answer>", "-12", {}, 1.0),
        ("<answer>-10</answer>", "-12", {}, 1.0 - 2 / 12),
        ("<answer>-1</answer>", "-12", {}, 1.0 - 11 / 12),
        ("<answer>12</answer>", "-12", {}, 0.0),  # wrong sign: twice the reference away
        ("<answer>1,000</answer>", "990", {}, 1.0 - 10 / 990),
        ("<answer>3</answer>", "0", {}, 0.0),  # small references are judged on a scale of 1
        ("<answer>0.5</answer>", "0", {}, 0.5),
        ("<answer>-20</answer>", "-12", {"tolerance": 2.0}, 1.0 - 8 / 24),
        ("<answer>twelve</answer>", "-12", {}, 0.0),
        ("<answer>nan</answer>", "-12", {}, 0.0),
        ("-12 without tags", "-12", {}, 0.0),
        ("-12 without tags", "-12", {"extract": "last_number"}, 1.0),
    ],
)
def test_numeric_closeness(completion, reference, params, expected):
    reward = get_reward("numeric_closeness")
    assert reward(completion, _example(reference), **params) == pytest.approx(expected)


def test_numeric_closeness_checks_the_data_before_training():
    from rlvr.config.schema import RewardItem, RewardsConfig
    from rlvr.errors import RlvrError
    from rlvr.rewards.scoring import check_reward_examples

    cfg = RewardsConfig(functions=[RewardItem(name="exact_match"), RewardItem(name="numeric_closeness")])
    check_reward_examples(cfg, [_example("-12"), _example("3.5")])
    with pytest.raises(RlvrError, match=r"rewards.functions\[1\] \(numeric_closeness\).*'ex'.*'Paris'"):
        check_reward_examples(cfg, [_example("-12"), _example("Paris")])


def test_numeric_closeness_needs_a_numeric_reference():
    reward = get_reward("numeric_closeness")
    with pytest.raises(ValueError, match="needs numeric reference answers.*None"):
        reward("<answer>1</answer>", _example(None))
    with pytest.raises(ValueError, match="needs numeric reference answers.*'x \\+ 1'"):
        reward("<answer>1</answer>", _example("x + 1"))


@pytest.mark.parametrize(
    ("completion", "require_think", "expected"),
    [
        ("<answer>4</answer>", False, 1.0),
        ("reasoning <answer> 4 </answer> done", False, 1.0),
        ("<answer></answer>", False, 0.0),
        ("<answer>  </answer>", False, 0.0),
        ("<answer>4</answer><answer>5</answer>", False, 0.0),
        ("<answer>4", False, 0.0),
        ("</answer>4<answer>", False, 0.0),
        ("4", False, 0.0),
        ("<think>hm</think><answer>4</answer>", True, 1.0),
        ("<answer>4</answer><think>hm</think>", True, 0.0),
        ("<think>hm <answer>4</answer></think>", True, 0.0),
        ("<answer>4</answer>", True, 0.0),
    ],
)
def test_format(completion, require_think, expected):
    assert get_reward("format")(completion, _example(), require_think=require_think) == expected


# -- length rewards ------------------------------------------------------------------------------


def test_length_penalty():
    reward = get_reward("length_penalty")
    assert reward("x", _example(), max_tokens=100, completion_tokens=50) == -0.5
    assert reward("x", _example(), max_tokens=100, coef=0.1, completion_tokens=100) == pytest.approx(-0.1)
    with pytest.raises(ValueError, match="completion_tokens"):
        reward("x", _example(), max_tokens=100)


@pytest.mark.parametrize(
    ("tokens", "finish_reason", "expected"),
    [
        (0, "stop", 0.0),
        (80, "stop", 0.0),
        (90, "stop", -0.5),
        (99, "stop", -0.95),
        (100, "stop", -1.0),
        (150, "stop", -1.0),
        (10, "length", -1.0),
    ],
)
def test_overlong_dapo_shape(tokens, finish_reason, expected):
    reward = get_reward("overlong")
    value = reward(
        "x", _example(), max_tokens=100, buffer=20, completion_tokens=tokens, finish_reason=finish_reason
    )
    assert value == pytest.approx(expected)


def test_overlong_without_buffer_is_a_hard_cliff():
    reward = get_reward("overlong")
    # DAPO: with no buffer, exactly max_tokens is still fine and one more token is -1.
    assert reward("x", _example(), max_tokens=100, buffer=0, completion_tokens=100) == 0.0
    assert reward("x", _example(), max_tokens=100, buffer=0, completion_tokens=101) == -1.0
    with pytest.raises(ValueError, match="buffer"):
        reward("x", _example(), max_tokens=100, buffer=101, completion_tokens=1)


# -- verifier routing ----------------------------------------------------------------------------


def test_verifier_routes_by_example(chain_sum):
    reward = get_reward("verifier")
    rg_example = chain_sum[0]
    rg_example.verifier = "reasoning_gym"
    answer = rg_example.metadata["rg_entry"]["answer"]
    assert reward(f"<answer>{answer}</answer>", rg_example) == 1.0
    math_example = Example(id="m", prompt=[], reference="0.5", verifier="math")
    assert reward(r"\boxed{\frac12}", math_example) == 1.0
    assert reward(r"\boxed{\frac12}", math_example, reward_params={"math": {"extract": "answer_tag"}}) == 0.0
    assert reward("<answer>0.5</answer>", _example("0.5"), default="exact_match") == 1.0
    overlong = {"overlong": {"max_tokens": 10, "buffer": 5}}
    cut = Example(id="o", prompt=[], verifier="overlong")
    assert reward("x", cut, reward_params=overlong, completion_tokens=1, finish_reason="length") == -1.0
    with pytest.raises(ValueError, match="names no verifier"):
        reward("x", _example("1"))
