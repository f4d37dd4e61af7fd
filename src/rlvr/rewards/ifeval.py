"""Instruction following with verifiable constraints (IFEval style): each constraint is a checker.

A task lists its constraints per prompt in ``example.metadata["constraints"]``; a JSONL task file
carries them as an extra column, which the file loader puts in ``metadata`` (load it with
``answer_key=None``: these prompts have no reference answer)::

    {"question": "Describe a cat.", "constraints": [{"type": "max_words", "n": 50},
                                                     {"type": "include_keywords", "keywords": ["fur"]}]}

The ``ifeval`` reward is the fraction of constraints satisfied (or, with ``all_or_nothing``, 1.0
only when all are). Constraint types and their arguments are listed in :data:`CONSTRAINTS`; an
unknown type or a missing argument is a reward *error* naming it, never a silent 0.

Examples in the official IFEval format (``metadata["instruction_id_list"]`` and ``["kwargs"]``,
see :func:`rlvr.rewards.ifeval_official.load_ifeval`) are checked with the official definitions.
With ``strict=True`` rlvr's own types that have an official counterpart follow it too: paragraphs
only at ``***`` dividers, only ``*`` / ``-`` bullets (no numbered items), lower/upper case only for
English text.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from rlvr.data.example import Example
from rlvr.errors import RlvrError
from rlvr.rewards import ifeval_text
from rlvr.rewards.ifeval_official import check_instruction, count_bullets, star_paragraphs
from rlvr.rewards.registry import register_reward
from rlvr.safe_parse import loads_json

_PARAGRAPH_BREAK = re.compile(r"\n\s*\n|^\s*\*\s*\*\s*\*\s*$", re.MULTILINE)
_BULLET = re.compile(r"^[ \t]*(?:[*+-]|\d+[.)])[ \t]+\S", re.MULTILINE)
_PLACEHOLDER = re.compile(r"\[[^\[\]\n]+\]")
_TITLE = re.compile(r"<<([^<>\n]+)>>")
_THINK = re.compile(r"<think>.*?</think>", re.DOTALL)
_FENCED_JSON = re.compile(r"^```(?:json)?\s*\n?(.*?)\n?```$", re.DOTALL | re.IGNORECASE)


count_words = ifeval_text.count_words
count_sentences = ifeval_text.count_sentences


def paragraphs(text: str) -> list[str]:
    """Paragraphs are separated by blank lines or a ``***`` divider line."""
    return [p for p in _PARAGRAPH_BREAK.split(text) if p.strip()]


def _keywords(args: dict[str, Any]) -> list[str]:
    words = args["keywords"]
    if isinstance(words, str) or not all(isinstance(w, str) for w in words):
        raise ValueError("'keywords' must be a list of strings")
    return words


def _occurrences(text: str, keyword: str) -> int:
    return len(re.findall(rf"(?<!\w){re.escape(keyword)}(?!\w)", text, flags=re.IGNORECASE))


def _relation(count: int, args: dict[str, Any]) -> bool:
    relation = args.get("relation", "at least")
    n = int(args["n"])
    if relation == "at least":
        return count >= n
    if relation == "at most":
        return count <= n
    if relation == "exactly":
        return count == n
    raise ValueError(f"relation must be 'at least', 'at most' or 'exactly', got {relation!r}")


def _is_json(text: str, args: dict[str, Any]) -> bool:
    body = text.strip()
    fenced = _FENCED_JSON.match(body)
    if fenced:
        body = fenced.group(1).strip()
    try:
        json.loads(body)
    except (ValueError, RecursionError):  # nested deeper than Python's stack: not JSON it can read
        return False
    return True


def _sections(text: str, args: dict[str, Any]) -> bool:
    splitter = args.get("splitter", "Section")
    found = re.split(rf"\s?{re.escape(splitter)}\s?\d+\s?", text)
    return len(found) - 1 >= int(args["n"])


def _quoted(text: str, args: dict[str, Any]) -> bool:
    body = text.strip()
    return len(body) > 1 and body[0] == body[-1] == '"'


def _ends_with(text: str, args: dict[str, Any]) -> bool:
    return text.strip().endswith(args["phrase"].strip())


# type -> (checker(text, args) -> bool, required argument names, what it checks)
CONSTRAINTS: dict[str, tuple[Callable[[str, dict[str, Any]], bool], tuple[str, ...], str]] = {
    "min_words": (lambda t, a: count_words(t) >= int(a["n"]), ("n",), "at least n words"),
    "max_words": (lambda t, a: count_words(t) <= int(a["n"]), ("n",), "at most n words"),
    "min_sentences": (lambda t, a: count_sentences(t) >= int(a["n"]), ("n",), "at least n sentences"),
    "max_sentences": (lambda t, a: count_sentences(t) <= int(a["n"]), ("n",), "at most n sentences"),
    "min_paragraphs": (lambda t, a: len(paragraphs(t)) >= int(a["n"]), ("n",), "at least n paragraphs"),
    "max_paragraphs": (lambda t, a: len(paragraphs(t)) <= int(a["n"]), ("n",), "at most n paragraphs"),
    "paragraphs": (lambda t, a: len(paragraphs(t)) == int(a["n"]), ("n",), "exactly n paragraphs"),
    "include_keywords": (
        lambda t, a: all(_occurrences(t, k) > 0 for k in _keywords(a)),
        ("keywords",),
        "every keyword appears (whole words, any case)",
    ),
    "exclude_keywords": (
        lambda t, a: not any(_occurrences(t, k) > 0 for k in _keywords(a)),
        ("keywords",),
        "no keyword appears",
    ),
    "keyword_frequency": (
        lambda t, a: _relation(_occurrences(t, a["keyword"]), a),
        ("keyword", "n"),
        "keyword appears n times ('relation': at least | at most | exactly)",
    ),
    "json_format": (_is_json, (), "the whole response is JSON (a ```json fence is allowed)"),
    "bullet_count": (
        lambda t, a: _relation(len(_BULLET.findall(t)), {"relation": "exactly", **a}),
        ("n",),
        "n markdown bullets (* / - / + / 1.) ('relation' defaults to exactly)",
    ),
    "sections": (_sections, ("n",), "at least n sections headed '<splitter> <number>' (Section 1, …)"),
    "lowercase": (lambda t, a: t == t.lower(), (), "no upper-case letters"),
    "uppercase": (lambda t, a: t == t.upper(), (), "no lower-case letters"),
    "start_with": (
        lambda t, a: t.strip().lower().startswith(a["phrase"].strip().lower()),
        ("phrase",),
        "starts with the phrase (any case)",
    ),
    "end_with": (_ends_with, ("phrase",), "ends with the exact phrase"),
    "no_commas": (lambda t, a: "," not in t, (), "no commas"),
    "placeholders": (
        lambda t, a: len(_PLACEHOLDER.findall(t)) >= int(a["n"]),
        ("n",),
        "at least n [placeholders] in square brackets",
    ),
    "title": (
        lambda t, a: any(title.strip() for title in _TITLE.findall(t)),
        (),
        "a title in <<double angle brackets>>, not blank",
    ),
    "quotation": (_quoted, (), "the whole response is wrapped in double quotes"),
    "postscript": (
        lambda t, a: re.search(rf"^\s*{re.escape(a.get('marker', 'P.S.'))}", t, re.MULTILINE) is not None,
        (),
        "a postscript starting with 'marker' (default P.S.)",
    ),
}


def _strict_paragraphs(text: str) -> int:
    count = star_paragraphs(text)
    return -1 if count is None else count  # an empty paragraph between dividers matches no n


def _english_case(text: str, upper: bool) -> bool:
    return (text.isupper() if upper else text.islower()) and ifeval_text.detect_language(text) == "en"


# The official IFEval definitions of rlvr types that have a counterpart there (``strict=True``).
STRICT_CONSTRAINTS: dict[str, Callable[[str, dict[str, Any]], bool]] = {
    "min_paragraphs": lambda t, a: _strict_paragraphs(t) >= int(a["n"]),
    "max_paragraphs": lambda t, a: 0 <= _strict_paragraphs(t) <= int(a["n"]),
    "paragraphs": lambda t, a: _strict_paragraphs(t) == int(a["n"]),
    "bullet_count": lambda t, a: _relation(count_bullets(t), {"relation": "exactly", **a}),
    "lowercase": lambda t, a: _english_case(t, upper=False),
    "uppercase": lambda t, a: _english_case(t, upper=True),
}


def check_constraint(text: str, constraint: dict[str, Any], strict: bool = False) -> bool:
    """Whether ``text`` satisfies one constraint ``{"type": ..., **args}``; bad specs raise.

    ``strict``: use the official IFEval definition where the type has one (:data:`STRICT_CONSTRAINTS`).
    """
    if not isinstance(constraint, dict) or "type" not in constraint:
        raise ValueError(f"a constraint must be an object with a 'type', got {constraint!r:.100}")
    kind = constraint["type"]
    if kind not in CONSTRAINTS:
        raise ValueError(f"unknown constraint type {kind!r}; known: {', '.join(sorted(CONSTRAINTS))}")
    checker, required, _ = CONSTRAINTS[kind]
    missing = [name for name in required if name not in constraint]
    if missing:
        raise ValueError(f"constraint {kind!r} needs {missing[0]!r}")
    if strict and kind in STRICT_CONSTRAINTS:
        checker = STRICT_CONSTRAINTS[kind]
    return bool(checker(text, constraint))


def response_text(completion: str, strip_think: bool = True) -> str:
    """What the constraints apply to: the completion without ``<think>…</think>`` sections."""
    return _THINK.sub("", completion).strip() if strip_think else completion


@register_reward("ifeval")
def ifeval_reward(
    completion: str,
    example: Example,
    *,
    all_or_nothing: bool = False,
    strip_think: bool = True,
    strict: bool = False,
) -> float:
    """Fraction of the example's constraints the completion satisfies.

    Constraints are ``metadata["constraints"]`` (rlvr's types) or, for rows in the official IFEval
    format, ``metadata["instruction_id_list"]`` with ``metadata["kwargs"]``.
    ``all_or_nothing``: 1.0 only when every constraint holds (IFEval's prompt-level score).
    ``strip_think``: check the response without its ``<think>…</think>`` reasoning.
    ``strict``: the official checker's definitions wherever rlvr's differ (module docstring).
    """
    text = response_text(completion, strip_think)
    checks = _checks(example)
    passed = sum(check(text, strict) for check in checks)
    if all_or_nothing:
        return 1.0 if passed == len(checks) else 0.0
    return passed / len(checks)


def _checks(example: Example) -> list[Callable[[str, bool], bool]]:
    metadata = example.metadata
    if "instruction_id_list" in metadata:
        ids = _json_cell(metadata["instruction_id_list"], example, "instruction_id_list")
        kwargs = _json_cell(metadata.get("kwargs"), example, "kwargs")
        if not isinstance(ids, list) or not ids or not isinstance(kwargs, list) or len(kwargs) != len(ids):
            raise ValueError(
                f"example {example.id!r}: 'instruction_id_list' and 'kwargs' must be lists of one length"
            )
        return [
            lambda text, strict, i=i, k=k: check_instruction(text, i, k, strict)
            for i, k in zip(ids, kwargs, strict=True)
        ]
    constraints = _json_cell(metadata.get("constraints"), example, "constraints")
    if not isinstance(constraints, list) or not constraints:
        raise ValueError(f"example {example.id!r} has no metadata['constraints'] list")
    return [lambda text, strict, c=c: check_constraint(text, c, strict) for c in constraints]


def _json_cell(value: Any, example: Example, key: str) -> Any:
    """A metadata value; a CSV cell carries lists as JSON text, read within rlvr's nesting limit."""
    if not isinstance(value, str):
        return value
    try:
        return loads_json(value, f"example {example.id!r}: metadata[{key!r}]")
    except RlvrError as error:  # a reward error, as the other problems with the metadata are
        raise ValueError(str(error)) from None
