"""The 25 instruction types of Google's IFEval, by their official ids, with the official checker's
definitions (re-implemented from its documented behaviour, not copied).

A row of the official data names its instructions and their arguments side by side::

    {"key": 1000, "prompt": "...", "instruction_id_list": ["punctuation:no_comma",
     "length_constraints:number_words"], "kwargs": [{}, {"relation": "at least", "num_words": 300}]}

:func:`load_ifeval` reads such a file into examples for the ``ifeval`` reward. ``strict=True``
follows the official checker where rlvr otherwise deliberately differs (``docs/rewards.md`` lists
the differences): an undetectable language counts as followed, an empty ``[]`` is a placeholder,
and a postscript marker may stand anywhere in a line.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rlvr.data.example import Example
from rlvr.rewards.ifeval_text import count_sentences, count_words, detect_language

Checker = Callable[[str, dict[str, Any], bool], bool]

_OPTIONS = ("My answer is yes.", "My answer is no.", "My answer is maybe.")
_STRICT_PLACEHOLDER = re.compile(r"\[.*?\]")
_PLACEHOLDER = re.compile(r"\[[^\[\]\n]*[^\s\[\]][^\[\]\n]*\]")
_HIGHLIGHT = re.compile(r"\*[^\n*]*\*")
_BOLD = re.compile(r"\*\*[^\n*]*\*\*")
_TITLE = re.compile(r"<<[^\n]+>>")
_DIVIDER = re.compile(r"\s?\*\*\*\s?")
_CAPITAL_WORD = re.compile(r"\w+(?:[-']\w+)*")


def _compare(count: int, relation: str, n: int) -> bool:
    """IFEval's two relations: "less than" and "at least"."""
    if relation == "less than":
        return count < n
    if relation == "at least":
        return count >= n
    raise ValueError(f"relation must be 'less than' or 'at least', got {relation!r}")


def _language_is(text: str, language: str, strict: bool) -> bool:
    detected = detect_language(text)
    if detected is None:
        return strict  # the official checker counts an undetectable language as followed
    return detected == language


def star_paragraphs(text: str) -> int | None:
    """Paragraphs separated by ``***`` dividers; None when an empty one sits between two others."""
    pieces = _DIVIDER.split(text)
    count = len(pieces)
    for index, piece in enumerate(pieces):
        if not piece.strip():
            if index in (0, len(pieces) - 1):
                count -= 1
            else:
                return None
    return count


def count_bullets(text: str) -> int:
    """Markdown bullets as IFEval counts them: lines starting ``*`` (not ``**``) or ``-``.

    Numbered items ("1. ...") are not bullets.
    """
    count = 0
    for line in text.splitlines():
        body = line.lstrip()
        if (body.startswith("*") and len(body) > 1 and body[1] != "*") or body.startswith("-"):
            count += 1
    return count


def _nth_paragraph_first_word(text: str, args: dict[str, Any], strict: bool) -> bool:
    pieces = text.split("\n\n")
    count = sum(1 for piece in pieces if piece.strip())
    nth = int(args["nth_paragraph"])
    if not 1 <= nth <= count or not pieces[nth - 1].strip():
        return False
    word = pieces[nth - 1].split()[0].lstrip("'\"")
    first = re.match(r"[^.,?!'\"]*", word)
    return (
        count == int(args["num_paragraphs"])
        and first is not None
        and first.group().lower() == (str(args["first_word"]).lower())
    )


def _postscript(text: str, args: dict[str, Any], strict: bool) -> bool:
    marker = str(args["postscript_marker"]).strip()
    if marker == "P.P.S":
        pattern = r"p\.\s?p\.\s?s"
    elif marker == "P.S.":
        pattern = r"p\.\s?s\."
    else:
        pattern = re.escape(marker.lower())
    # rlvr: the marker opens a line; the official checker finds it anywhere in one.
    anchor = "" if strict else r"^\s*"
    return re.search(anchor + pattern, text.lower(), re.MULTILINE) is not None


def _highlights(text: str) -> int:
    single = sum(1 for h in _HIGHLIGHT.findall(text) if h.strip("*").strip())
    double = sum(1 for h in _BOLD.findall(text) if h[2:-2].strip())
    return single + double


def _json(text: str, args: dict[str, Any], strict: bool) -> bool:
    body = text.strip()
    for fence in ("```json", "```Json", "```JSON", "```"):
        if body.startswith(fence):
            body = body[len(fence) :]
            break
    body = body.removesuffix("```").strip()
    try:
        json.loads(body)
    except (ValueError, RecursionError):
        return False
    return True


def _two_responses(text: str, args: dict[str, Any], strict: bool) -> bool:
    pieces = text.split("******")
    kept = []
    for index, piece in enumerate(pieces):
        if piece.strip():
            kept.append(piece.strip())
        elif index not in (0, len(pieces) - 1):
            return False
    return len(kept) == 2 and kept[0] != kept[1]


def _sections(text: str, args: dict[str, Any], strict: bool) -> bool:
    splitter = str(args["section_spliter"]).strip()
    found = re.split(rf"\s?{re.escape(splitter)}\s?\d+\s?", text)
    return len(found) - 1 >= int(args["num_sections"])


def _placeholders(text: str, args: dict[str, Any], strict: bool) -> bool:
    pattern = _STRICT_PLACEHOLDER if strict else _PLACEHOLDER
    return len(pattern.findall(text)) >= int(args["num_placeholders"])


def _contains(text: str, keyword: str) -> int:
    # The official checker uses the keyword as a regular expression; rlvr matches it literally.
    return len(re.findall(re.escape(keyword.strip()), text, re.IGNORECASE))


OFFICIAL: dict[str, tuple[Checker, tuple[str, ...]]] = {
    "keywords:existence": (lambda t, a, s: all(_contains(t, k) for k in a["keywords"]), ("keywords",)),
    "keywords:frequency": (
        lambda t, a, s: _compare(_contains(t, a["keyword"]), a["relation"], int(a["frequency"])),
        ("keyword", "frequency", "relation"),
    ),
    "keywords:forbidden_words": (
        lambda t, a, s: (
            not any(re.search(rf"\b{re.escape(w)}\b", t, re.IGNORECASE) for w in a["forbidden_words"])
        ),
        ("forbidden_words",),
    ),
    "keywords:letter_frequency": (
        lambda t, a, s: _compare(
            t.lower().count(str(a["letter"]).lower()), a["let_relation"], int(a["let_frequency"])
        ),
        ("letter", "let_frequency", "let_relation"),
    ),
    "language:response_language": (lambda t, a, s: _language_is(t, a["language"], s), ("language",)),
    "length_constraints:number_sentences": (
        lambda t, a, s: _compare(count_sentences(t), a["relation"], int(a["num_sentences"])),
        ("num_sentences", "relation"),
    ),
    "length_constraints:number_paragraphs": (
        lambda t, a, s: star_paragraphs(t) == int(a["num_paragraphs"]),
        ("num_paragraphs",),
    ),
    "length_constraints:number_words": (
        lambda t, a, s: _compare(count_words(t), a["relation"], int(a["num_words"])),
        ("num_words", "relation"),
    ),
    "length_constraints:nth_paragraph_first_word": (
        _nth_paragraph_first_word,
        ("num_paragraphs", "nth_paragraph", "first_word"),
    ),
    "detectable_content:number_placeholders": (_placeholders, ("num_placeholders",)),
    "detectable_content:postscript": (_postscript, ("postscript_marker",)),
    "detectable_format:number_bullet_lists": (
        lambda t, a, s: count_bullets(t) == int(a["num_bullets"]),
        ("num_bullets",),
    ),
    "detectable_format:constrained_response": (lambda t, a, s: any(o in t for o in _OPTIONS), ()),
    "detectable_format:number_highlighted_sections": (
        lambda t, a, s: _highlights(t) >= int(a["num_highlights"]),
        ("num_highlights",),
    ),
    "detectable_format:multiple_sections": (_sections, ("section_spliter", "num_sections")),
    "detectable_format:json_format": (_json, ()),
    "detectable_format:title": (
        lambda t, a, s: any(title.strip("<>").strip() for title in _TITLE.findall(t)),
        (),
    ),
    "combination:two_responses": (_two_responses, ()),
    "combination:repeat_prompt": (
        lambda t, a, s: t.strip().lower().startswith(str(a["prompt_to_repeat"]).strip().lower()),
        ("prompt_to_repeat",),
    ),
    "startend:end_checker": (
        lambda t, a, s: t.strip().strip('"').lower().endswith(str(a["end_phrase"]).strip().lower()),
        ("end_phrase",),
    ),
    "startend:quotation": (lambda t, a, s: len(t.strip()) > 1 and t.strip()[0] == t.strip()[-1] == '"', ()),
    "change_case:capital_word_frequency": (
        lambda t, a, s: _compare(
            sum(w.isupper() for w in _CAPITAL_WORD.findall(t)),
            a["capital_relation"],
            int(a["capital_frequency"]),
        ),
        ("capital_frequency", "capital_relation"),
    ),
    "change_case:english_capital": (lambda t, a, s: t.isupper() and _language_is(t, "en", s), ()),
    "change_case:english_lowercase": (lambda t, a, s: t.islower() and _language_is(t, "en", s), ()),
    "punctuation:no_comma": (lambda t, a, s: "," not in t, ()),
}


def check_instruction(
    text: str, instruction_id: str, kwargs: dict[str, Any] | None, strict: bool = False
) -> bool:
    """Whether ``text`` follows one official IFEval instruction; unknown ids and missing arguments raise.

    Arguments whose value is ``None`` are dropped first: the published data set lists every
    argument name of every instruction, with null for those that do not apply.
    """
    if instruction_id not in OFFICIAL:
        raise ValueError(
            f"unknown IFEval instruction {instruction_id!r}; known: {', '.join(sorted(OFFICIAL))}"
        )
    checker, required = OFFICIAL[instruction_id]
    args = {key: value for key, value in (kwargs or {}).items() if value is not None}
    missing = [name for name in required if name not in args]
    if missing:
        raise ValueError(f"IFEval instruction {instruction_id!r} needs {missing[0]!r}")
    return bool(checker(text, args, strict))


def load_ifeval(path: str | Path) -> list[Example]:
    """Examples from a JSONL file in the official IFEval format, scored by the ``ifeval`` reward.

    The prompt is used as written (IFEval prompts carry their own instructions: no answer format is
    appended); ``instruction_id_list`` and ``kwargs`` go to ``metadata``; ``key`` is the id.
    """
    from rlvr.data import load_file

    examples = load_file(
        path, question_key="prompt", answer_key=None, id_key="key", answer_format=None, verifier="ifeval"
    )
    for example in examples:
        ids, kwargs = example.metadata.get("instruction_id_list"), example.metadata.get("kwargs")
        if not isinstance(ids, list) or not isinstance(kwargs, list) or len(ids) != len(kwargs):
            raise ValueError(
                f"{path}: row {example.id!r} needs 'instruction_id_list' and 'kwargs' lists of equal length"
            )
        for instruction_id in ids:
            if instruction_id not in OFFICIAL:
                raise ValueError(f"{path}: row {example.id!r}: unknown IFEval instruction {instruction_id!r}")
    return examples
