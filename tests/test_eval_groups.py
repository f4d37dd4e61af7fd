"""Accuracy per group of held-out problems: the groupings and their errors."""

from __future__ import annotations

import pytest

from rlvr.config import load_config
from rlvr.data import Example
from rlvr.errors import RlvrError
from rlvr.eval.groups import answer_sign, check_groupings, group_of, grouped_accuracy, operators


def _example(question: str, reference: str | None = "1", **metadata) -> Example:
    return Example(
        id="q7", prompt=[{"role": "user", "content": question}], reference=reference, metadata=metadata
    )


@pytest.mark.parametrize(
    ("reference", "sign"),
    [
        ("-28", "negative"),
        ("0", "zero"),
        ("-0", "zero"),
        ("17", "positive"),
        ("+3", "positive"),
        ("1,024", "positive"),
        ("3/4", "positive"),
        ("0/5", "zero"),
        ("3/0", "non-numeric"),
        ("x=2", "non-numeric"),
        (None, "non-numeric"),
    ],
)
def test_answer_sign(reference, sign) -> None:
    assert answer_sign(_example("?", reference)) == sign


@pytest.mark.parametrize(
    ("question", "ops"),
    [
        ("State the final answer to the following arithmetic problem: 15 - 43 =", "-"),
        ("State the final answer to the following arithmetic problem: 4 + 1 - 7 =", "+-"),
        ("What is 15 - -3?", "-"),  # the second minus is a sign
        ("What is -5 + 3 * 2?", "+*"),
        ("Compute 2.5 / 0.5", "/"),
        ("Earlier: 1 + 1. Now: 9 - 2 =", "-"),  # the last expression counts
        ("How many letters are in 'banana'?", "none"),
    ],
)
def test_operators(question, ops) -> None:
    assert operators(_example(question)) == ops


def test_group_of_joins_groupings_and_reads_metadata_paths() -> None:
    example = _example("What is 3 - 8?", "-5", rg_entry={"metadata": {"num_digits": 1}})
    assert group_of(example, ["operators", "answer_sign"]) == "-/negative"
    assert group_of(example, ["metadata.rg_entry.metadata.num_digits"]) == "1"
    assert group_of(example, []) == ""
    with pytest.raises(
        RlvrError, match=r"example 'q7' has no metadata.rg_entry.digits \(stopped at 'digits'"
    ):
        group_of(example, ["metadata.rg_entry.digits"])


def test_unknown_grouping_is_a_config_error_naming_the_key() -> None:
    check_groupings(["operators", "metadata.a.b"])
    with pytest.raises(
        RlvrError, match="unknown grouping 'sign'; allowed: answer_sign, data_source, operators"
    ):
        check_groupings(["sign"])
    with pytest.raises(RlvrError, match=r"eval\.group_by"):
        load_config(None, ["eval.group_by=[sign]"])


def test_grouped_accuracy_counts_each_group() -> None:
    metrics = grouped_accuracy(["+", "-", "+", "-", "-"], [True, False, True, True, False])
    assert metrics == {
        "eval/accuracy/+": 1.0,
        "eval/size/+": 2.0,
        "eval/accuracy/-": pytest.approx(1 / 3),
        "eval/size/-": 3.0,
    }
    with pytest.raises(ValueError):
        grouped_accuracy(["+"], [True, False])


def test_evaluate_reports_groups_and_one_record_per_problem() -> None:
    from rlvr.eval.evaluate import evaluate
    from rlvr.rewards import RewardResult
    from rlvr.rollout import Completion

    class AnswerEngine:  # answers "a - b" right and "a + b" with 0
        def generate(self, prompts, params):
            return [[Completion(i, p, [1], [0.0], "stop", text=str(p[0]))] for i, p in enumerate(prompts)]

    questions = [(3, "+", 4), (9, "-", 2), (2, "-", 9), (5, "+", 5)]
    examples = [_example(f"{a} {op} {b} =", str(a + b if op == "+" else a - b)) for a, op, b in questions]
    prompts = [[a - b if op == "-" else 0] for a, op, b in questions]

    def score(completions, exs, sizes):
        return [RewardResult(float(c.text == e.reference), {}, {}) for c, e in zip(completions, exs)]

    records: list[dict] = []
    metrics = evaluate(
        AnswerEngine(),
        prompts,
        examples,
        score,
        4,
        chunk=3,
        group_by=["operators", "answer_sign"],
        records=records,
    )
    assert metrics["eval/accuracy"] == 0.5
    assert metrics["eval/accuracy/+/positive"] == 0.0 and metrics["eval/size/+/positive"] == 2.0
    assert metrics["eval/accuracy/-/positive"] == 1.0 and metrics["eval/accuracy/-/negative"] == 1.0
    assert [(r["completion"], r["reference"], r["correct"], r["group"]) for r in records] == [
        ("0", "7", False, "+/positive"),
        ("7", "7", True, "-/positive"),
        ("-7", "-7", True, "-/negative"),
        ("0", "10", False, "+/positive"),
    ]
