"""Instruction following with verifiable constraints (IFEval style): each constraint is a checker.

A task lists its constraints per prompt in ``example.metadata["constraints"]``; a JSONL task file
carries them as an extra column, which the file loader puts in ``metadata`` (load it with
``answer_key=None``: these prompts have no reference answer)::

    {"question": "Describe a cat.", "constraints": [{"type": "max_words", "n": 50},
                                                     {"type": "include_keywords", "keywords": ["fur"]}]}

The ``ifeval`` reward is the fraction of constraints satisfied (or, with ``all_or_nothing``, 1.0
only when all are). Constraint types and their arguments are listed in :data:`CONSTRAINTS`; an
unknown type or a missing argument is a reward *error* naming it, never a silent 0.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from rlvr.data.example import Example
from rlvr.rewards.registry import register_reward

_WORD = re.compile(r"\b\w+\b")
_SENTENCE_END = re.compile(r"[.!?]+(?=\s|$)")
_PARAGRAPH_BREAK = re.compile(r"\n\s*\n|^\s*\*\s*\*\s*\*\s*$", re.MULTILINE)
_BULLET = re.compile(r"^[ \t]*(?:[*+-]|\d+[.)])[ \t]+\S", re.MULTILINE)
_PLACEHOLDER = re.compile(r"\[[^\[\]\n]+\]")
_TITLE = re.compile(r"<<[^<>\n]+>>")
_THINK = re.compile(r"<think>.*?</think>", re.DOTALL)
_FENCED_JSON = re.compile(r"^```(?:json)?\s*\n?(.*?)\n?```$", re.DOTALL | re.IGNORECASE)


def count_words(text: str) -> int:
    return len(_WORD.findall(text))


def count_sentences(text: str) -> int:
    """Sentence ends (., !, ? followed by space or the end), plus an unterminated last sentence."""
    ends = list(_SENTENCE_END.finditer(text))
    tail = text[ends[-1].end() :] if ends else text
    return len(ends) + (1 if tail.strip() else 0)


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
    except ValueError:
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
    "title": (lambda t, a: _TITLE.search(t) is not None, (), "a title in <<double angle brackets>>"),
    "quotation": (_quoted, (), "the whole response is wrapped in double quotes"),
    "postscript": (
        lambda t, a: re.search(rf"^\s*{re.escape(a.get('marker', 'P.S.'))}", t, re.MULTILINE) is not None,
        (),
        "a postscript starting with 'marker' (default P.S.)",
    ),
}


def check_constraint(text: str, constraint: dict[str, Any]) -> bool:
    """Whether ``text`` satisfies one constraint ``{"type": ..., **args}``; bad specs raise."""
    if not isinstance(constraint, dict) or "type" not in constraint:
        raise ValueError(f"a constraint must be an object with a 'type', got {constraint!r:.100}")
    kind = constraint["type"]
    if kind not in CONSTRAINTS:
        raise ValueError(f"unknown constraint type {kind!r}; known: {', '.join(sorted(CONSTRAINTS))}")
    checker, required, _ = CONSTRAINTS[kind]
    missing = [name for name in required if name not in constraint]
    if missing:
        raise ValueError(f"constraint {kind!r} needs {missing[0]!r}")
    return bool(checker(text, constraint))


def response_text(completion: str, strip_think: bool = True) -> str:
    """What the constraints apply to: the completion without ``<think>…</think>`` sections."""
    return _THINK.sub("", completion).strip() if strip_think else completion


@register_reward("ifeval")
def ifeval_reward(
    completion: str, example: Example, *, all_or_nothing: bool = False, strip_think: bool = True
) -> float:
    """Fraction of ``example.metadata["constraints"]`` the completion satisfies.

    ``all_or_nothing``: 1.0 only when every constraint holds (IFEval's strict prompt-level score).
    ``strip_think``: check the response without its ``<think>…</think>`` reasoning.
    """
    constraints = example.metadata.get("constraints")
    if isinstance(constraints, str):
        constraints = json.loads(constraints)  # a CSV cell carries the list as JSON text
    if not isinstance(constraints, list) or not constraints:
        raise ValueError(f"example {example.id!r} has no metadata['constraints'] list")
    text = response_text(completion, strip_think)
    passed = sum(check_constraint(text, c) for c in constraints)
    if all_or_nothing:
        return 1.0 if passed == len(constraints) else 0.0
    return passed / len(constraints)
