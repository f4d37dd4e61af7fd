"""Small Python function tasks with hidden unit tests, generated here (``data.task: code_functions``).

Each problem asks for one function of one argument (``add_seven(x)``, ``count_fives(xs)``,
``first_three_chars(s)`` …) described in a sentence; its hidden tests are five asserts on seeded
inputs, computed from the reference solution. Nine families × a constant from 2 to 20 make 171
problems; a fixed shuffle puts 51 of them in the held-out split and the rest in training (disjoint
by problem), so held-out accuracy measures families seen with constants not seen. Sized for the
bundled 135M model: it solves some of them before training, not all.

The examples are for the ``code`` reward (``metadata.tests``, ``entry_point``) and the coder /
test-writer game (:mod:`rlvr.roles.coder_tester`: ``metadata.description``, ``reference_code``).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from rlvr.data.example import Example

_WORDS = (
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
    "sixteen seventeen eighteen nineteen twenty"
).split()
HELD_OUT = 51


def _ints(rng: random.Random) -> Any:
    return rng.randint(-20, 40)


def _lists(rng: random.Random) -> Any:
    return [rng.randint(0, 9) for _ in range(rng.randint(0, 7))]


def _strings(rng: random.Random) -> Any:
    return "".join(rng.choice("abcdefgh") for _ in range(rng.randint(0, 8)))


# (name, argument, description, body, inputs); {w} is the constant as a word, {k} as a number
_FAMILIES: tuple[tuple[str, str, str, str, Callable[[random.Random], Any]], ...] = (
    ("add_{w}", "x", "returns x plus {k}", "return x + {k}", _ints),
    ("times_{w}", "x", "returns x multiplied by {k}", "return x * {k}", _ints),
    ("minus_{w}", "x", "returns x minus {k}", "return x - {k}", _ints),
    (
        "is_multiple_of_{w}",
        "x",
        "returns True if x is divisible by {k}, otherwise False",
        "return x % {k} == 0",
        _ints,
    ),
    (
        "count_{w}s",
        "xs",
        "returns how many times the number {k} appears in the list xs",
        "return xs.count({k})",
        _lists,
    ),
    (
        "sum_plus_{w}",
        "xs",
        "returns the sum of the numbers in the list xs plus {k}",
        "return sum(xs) + {k}",
        _lists,
    ),
    ("repeat_{w}_times", "s", "returns the string s repeated {k} times", "return s * {k}", _strings),
    ("first_{w}_chars", "s", "returns the first {k} characters of the string s", "return s[:{k}]", _strings),
    ("pad_{w}", "s", "returns the string s followed by {k} dots", "return s + '.' * {k}", _strings),
)


def _problem(family: int, k: int) -> Example:
    name_t, arg, desc_t, body_t, inputs = _FAMILIES[family]
    name = name_t.format(w=_WORDS[k], k=k)
    description = f"`{name}({arg})` {desc_t.format(k=k)}"
    reference = f"def {name}({arg}):\n    {body_t.format(k=k)}\n"
    namespace: dict[str, Any] = {}
    exec(reference, namespace)  # noqa: S102 - our own reference solution, built above
    solve = namespace[name]
    rng = random.Random(f"{family}:{k}")
    cases = [inputs(rng) for _ in range(5)]
    tests = "".join(f"assert {name}({case!r}) == {solve(case)!r}\n" for case in cases)
    question = (
        f"Write a Python function `{name}({arg})` that {desc_t.format(k=k)}. Reply with the whole "
        "function in a ```python code block."
    )
    return Example(
        id=f"code_functions/{name}",
        prompt=[{"role": "user", "content": question}],
        reference=reference,
        data_source="code_functions",
        verifier="code",
        metadata={
            "tests": tests,
            "entry_point": name,
            "description": description,
            "reference_code": reference,
        },
    )


def all_problems() -> list[Example]:
    """Every problem, in a fixed order (family, then constant)."""
    return [_problem(f, k) for f in range(len(_FAMILIES)) for k in range(2, 21)]


def code_function_examples(count: int, seed: int, split: str) -> list[Example]:
    """Up to ``count`` problems of ``split`` ("train" or "eval"), in a seeded order. The split is
    fixed (the same for every seed); a count above the split's size gives the whole split."""
    problems = all_problems()
    random.Random(0).shuffle(problems)
    chosen = problems[:HELD_OUT] if split == "eval" else problems[HELD_OUT:]
    random.Random(seed).shuffle(chosen)
    return chosen[:count]
