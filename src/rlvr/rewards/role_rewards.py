"""Rewards that score one role by another's outputs (role games, :mod:`rlvr.roles`; docs/roles.md).

The game puts the other roles' outputs into the scored example's ``metadata``; these functions run
in the reward pool like any reward (worker processes, hard timeouts, errors counted), and model-
written code runs only in the sandbox (:mod:`rlvr.rewards.sandbox`).

- ``generated_tests`` (group, the coder): the fraction of the test writer's *valid* test suites
  (those the example's reference solution passes) that a program passes. No valid suite: 0.0
  with ``generated_tests/valid_suites`` 0, so a bad test writer never rewards a coder.
- ``test_discrimination`` (group, the test writer): 0 for a suite the reference fails (a wrong
  test) or one that tests nothing; else ``0.5 + 0.5 × the fraction of the coder's wrong programs
  (by the hidden tests) that the suite rejects`` (1.0 when the coder wrote no wrong program). The
  CURE reward (seeds/000:1) in spirit: a test earns by separating correct from incorrect code.
- ``verdict_agreement`` (the verifier): 1.0 when the verdict in the reply (its last "Score: 1",
  correct, or "Score: 0", wrong, read as the ``judge`` reward reads a judge's reply) agrees with
  the truth about the answer shown (``metadata.answer_correct``, from the solver's verifier); a
  reply with no "Score:" line earns 0 (the judge would fall back to the last number; a verifier in
  training must state its verdict), counted by ``verdict_agreement/verdict_given``.

A model-written test suite that does not parse, or holds no assert about the function, is the test
writer's failure (reward 0), never a reward error; the sandbox failing to start still is one.
"""

from __future__ import annotations

from typing import Annotated, Any

from annotated_types import Gt

from rlvr.data.example import Example
from rlvr.rewards import sandbox
from rlvr.rewards.code import extract_code, function_program
from rlvr.rewards.judge import _SCORE, parse_score
from rlvr.rewards.registry import register_group_reward, register_reward

_MAX_CODE_CHARS = 20_000


def _decide_backend(params: dict[str, Any]) -> None:
    sandbox.require_isolation(params.get("allow_unsafe_sandbox") is True)


def suite_result(
    program: str, tests: str, example: Example, limits: sandbox.Limits, unsafe: bool
) -> tuple[int, int] | None:
    """(asserts passed, asserts about the function) when ``program`` (model-written code, assembled
    as the ``code`` reward does) runs ``tests``; a program that kills its harness or overruns passes
    none. None when the suite cannot judge anything (it does not parse, or no assert of it calls
    the function)."""
    if len(tests) > _MAX_CODE_CHARS:
        return None
    code, prelude = function_program(program[:_MAX_CODE_CHARS], example)
    try:
        result = sandbox.run_function_tests(
            code, tests, example.metadata.get("entry_point"), limits, prelude=prelude, allow_unsafe=unsafe
        )
    except ValueError:  # the suite does not parse
        return None
    if result.error is not None and not result.started:  # the sandbox never came up: a reward error
        raise RuntimeError(f"sandbox ({result.backend}) failed: {result.error}")
    total = int(result.report.get("total") or 0)
    if total == 0:
        return None
    finished = (
        result.error is None and result.report.get("reached_end") and result.report.get("status") == "ok"
    )
    return (int(result.report.get("passed", 0)) if finished else 0), total


def suite_passes(
    program: str, tests: str, example: Example, limits: sandbox.Limits, unsafe: bool
) -> bool | None:
    """Whether ``program`` passes every assert of ``tests`` (None: :func:`suite_result`'s)."""
    result = suite_result(program, tests, example, limits, unsafe)
    return None if result is None else result[0] == result[1]


def _reference(example: Example) -> str:
    reference = example.metadata.get("reference_code", example.reference)
    if not isinstance(reference, str) or not reference.strip():
        raise ValueError(f"{example.where}: no reference solution (reference or metadata.reference_code)")
    return reference


def _strings(example: Example, key: str) -> list[str]:
    values = example.metadata.get(key)
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise ValueError(f"{example.where}: metadata.{key} must be a list of strings (set by the role game)")
    return values


def _sandboxed_group_reward(name: str):  # noqa: ANN202 - a decorator
    """Register a group reward that runs model-written code in the sandbox (probed at start)."""
    return register_group_reward(
        name, preload=("rlvr.rewards.sandbox",), check=_decide_backend, setup=_decide_backend
    )


@_sandboxed_group_reward("generated_tests")
def generated_tests_reward(
    completions: list[str],
    example: Example,
    *,
    case_timeout_s: Annotated[float, Gt(0)] = 1.0,
    total_timeout_s: Annotated[float, Gt(0)] = 3.0,
    allow_unsafe_sandbox: bool = False,
) -> list[dict[str, float]]:
    """Each program's pass rate over the test writer's valid suites (``metadata.generated_tests``)."""
    limits = sandbox.Limits(case_s=case_timeout_s, total_s=total_timeout_s)
    suites = [extract_code(t) for t in _strings(example, "generated_tests")]
    reference = _reference(example)
    valid = [s for s in suites if suite_passes(reference, s, example, limits, allow_unsafe_sandbox)]
    scores = []
    for completion in completions:
        program = extract_code(completion)
        passed = sum(bool(suite_passes(program, s, example, limits, allow_unsafe_sandbox)) for s in valid)
        scores.append({"score": passed / len(valid) if valid else 0.0, "valid_suites": float(len(valid))})
    return scores


@_sandboxed_group_reward("test_discrimination")
def discrimination_reward(
    completions: list[str],
    example: Example,
    *,
    case_timeout_s: Annotated[float, Gt(0)] = 1.0,
    total_timeout_s: Annotated[float, Gt(0)] = 3.0,
    allow_unsafe_sandbox: bool = False,
) -> list[dict[str, float]]:
    """Each suite's validity (the reference passes it) and how many of the coder's wrong programs
    (``metadata.programs`` where ``metadata.programs_correct`` is false) it rejects."""
    limits = sandbox.Limits(case_s=case_timeout_s, total_s=total_timeout_s)
    programs = [extract_code(p) for p in _strings(example, "programs")]
    correct = example.metadata.get("programs_correct")
    if not isinstance(correct, list) or len(correct) != len(programs):
        raise ValueError(f"{example.where}: metadata.programs_correct must have one flag per program")
    wrong = [p for p, ok in zip(programs, correct) if not ok]
    reference = _reference(example)
    scores = []
    for completion in completions:
        suite = extract_code(completion)
        on_reference = suite_result(reference, suite, example, limits, allow_unsafe_sandbox)
        right = on_reference[0] / on_reference[1] if on_reference else 0.0  # asserts that hold
        valid = right == 1.0
        caught = 0.0
        if valid:  # only a right suite's rejections mean the program was wrong
            rejected = sum(
                suite_passes(p, suite, example, limits, allow_unsafe_sandbox) is False for p in wrong
            )
            caught = rejected / len(wrong) if wrong else 1.0
        scores.append(
            {
                "score": 0.5 * right + 0.5 * caught,
                "valid": float(valid),
                "right_asserts": right,
                "rejects_wrong": caught,
            }
        )
    return scores


@register_reward("verdict_agreement")
def verdict_agreement_reward(
    completion: str, example: Example, *, max_score: Annotated[float, Gt(0)] = 1.0
) -> dict[str, float]:
    """1.0 when the reply's verdict agrees with ``metadata.answer_correct``; 0.0 otherwise or without one."""
    truth = example.metadata.get("answer_correct")
    if not isinstance(truth, bool):
        raise ValueError(
            f"{example.where}: metadata.answer_correct must be true or false (set by the role game)"
        )
    found = list(_SCORE.finditer(completion[-2000:]))
    if not found:  # stricter than the judge's fallback to the last number: a verdict must be stated
        return {"score": 0.0, "verdict_given": 0.0, "says_correct": 0.0}
    says_correct = parse_score(found[-1].group(0), max_score) >= 0.5
    return {"score": float(says_correct == truth), "verdict_given": 1.0, "says_correct": float(says_correct)}
