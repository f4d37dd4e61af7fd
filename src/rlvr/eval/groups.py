"""Accuracy per group of held-out problems (``eval.group_by``).

One accuracy over 200 problems hides where a model gains and where it loses: on chain_sum a run can
gain 15 points on additions while it loses 10 on subtractions. ``eval.group_by`` names one or more
groupings; each problem's group is the ``/``-joined value of each, and the eval reports
``eval/accuracy/<group>`` and ``eval/size/<group>`` beside the overall numbers.

A grouping is either a registered function ``Example -> str`` (built-ins below; register your own on
:data:`GROUPINGS`) or ``metadata.<dotted path>`` into ``Example.metadata`` (for reasoning-gym tasks
the task's own fields are under ``metadata.rg_entry.metadata``, e.g.
``metadata.rg_entry.metadata.num_digits``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

from rlvr.data.example import Example
from rlvr.errors import RlvrError
from rlvr.registry import Registry
from rlvr.rewards.extract import as_number

GROUPINGS: Registry[Callable[[Example], str]] = Registry("eval grouping")
META_PREFIX = "metadata."

# an arithmetic expression: numbers joined by operators, e.g. "15 - 43" or "3 * 4 + 2"
_EXPRESSION = re.compile(r"-?\d+(?:\.\d+)?(?:\s*[-+*/]\s*-?\d+(?:\.\d+)?)+")
_TOKEN = re.compile(r"\d+(?:\.\d+)?|[-+*/]")


@GROUPINGS.register("answer_sign")
def answer_sign(example: Example) -> str:
    """``negative`` / ``zero`` / ``positive`` for a numeric reference answer, else ``non-numeric``."""
    numerator, _, denominator = (example.reference or "").partition("/")  # "3/4" is a number too
    top, bottom = as_number(numerator), as_number(denominator) if denominator else 1.0
    if top is None or not bottom:
        return "non-numeric"
    value = top / bottom
    return "negative" if value < 0 else "zero" if value == 0 else "positive"


@GROUPINGS.register("operators")
def operators(example: Example) -> str:
    """The operators of the last arithmetic expression in the question, in order (``+``, ``-+``, …).

    ``none`` when the question holds no expression.
    """
    expressions = _EXPRESSION.findall(example.question)
    if not expressions:
        return "none"
    found, want_operand = [], True
    for token in _TOKEN.findall(expressions[-1]):
        if token[0].isdigit():
            want_operand = False
        elif not want_operand:  # a sign in front of an operand ("15 - -3") is not an operator
            found.append(token)
            want_operand = True
    return "".join(found) or "none"


@GROUPINGS.register("data_source")
def data_source(example: Example) -> str:
    """Where the example came from (a reasoning-gym task, a file stem): for mixed datasets."""
    return example.data_source


def _metadata_value(example: Example, path: str) -> Any:
    value: Any = example.metadata
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            keys = ", ".join(map(str, value)) if isinstance(value, dict) else "-"
            raise RlvrError(
                f"eval.group_by: example {example.id!r} has no metadata.{path} "
                f"(stopped at '{part}'; keys there: {keys})"
            )
        value = value[part]
    return value


def check_groupings(names: Sequence[str]) -> None:
    """Raise a clear error for a name that is neither registered nor a ``metadata.`` path."""
    for name in names:
        if name.startswith(META_PREFIX):
            if not name[len(META_PREFIX) :]:
                raise RlvrError(
                    "eval.group_by: 'metadata.' needs a key path, e.g. metadata.rg_entry.metadata.num_digits"
                )
            continue
        if name not in GROUPINGS:
            raise RlvrError(
                f"eval.group_by: unknown grouping '{name}'; allowed: {', '.join(GROUPINGS.names())} "
                f"or metadata.<path>"
            )


def group_of(example: Example, names: Sequence[str]) -> str:
    """The group key of ``example`` under the groupings ``names`` (``""`` when there are none)."""
    parts = []
    for name in names:
        if name.startswith(META_PREFIX):
            parts.append(str(_metadata_value(example, name[len(META_PREFIX) :])))
        else:
            parts.append(GROUPINGS.get(name)(example))
    return "/".join(parts)


def grouped_accuracy(groups: Sequence[str], correct: Sequence[bool]) -> dict[str, float]:
    """``eval/accuracy/<group>`` and ``eval/size/<group>`` for each group, groups sorted by name."""
    totals: dict[str, list[int]] = {}
    for group, ok in zip(groups, correct, strict=True):
        counts = totals.setdefault(group, [0, 0])
        counts[0] += int(ok)
        counts[1] += 1
    metrics: dict[str, float] = {}
    for group in sorted(totals):
        right, size = totals[group]
        metrics[f"eval/accuracy/{group}"] = right / size
        metrics[f"eval/size/{group}"] = float(size)
    return metrics
