"""Pull the final answer out of a model's completion.

Completions are untrusted text of any length (a run-away generation can be megabytes), so every
mode here is a single left-to-right scan: no regex that can backtrack catastrophically, no
"search again from each candidate" loop that turns quadratic.
"""

from __future__ import annotations

import re
import string
from typing import Literal

from rlvr.errors import RlvrError

ExtractMode = Literal["auto", "answer_tag", "boxed", "answer_line", "last_number", "choice"]
EXTRACT_MODES: tuple[str, ...] = ExtractMode.__args__

_ANSWER_TAG = re.compile(r"<(/?)answer>", re.IGNORECASE)

# `\boxed{` / `\fbox{` open a box; `\{` and `\}` are literal braces in LaTeX and must not count.
_BOX_TOKEN = re.compile(r"\\(?:boxed|fbox)[ \t]*\{|\\[{}]|[{}]")

# "Answer: X", "**Answer:** X", "the final answer is X". Only the cue is matched; the answer is the
# rest of that line, so matches stay short and never overlap.
_ANSWER_CUE = re.compile(r"\banswer\b\**[ \t]*(?:is\b[ \t]*:?|:)[ \t*]*", re.IGNORECASE)

_NON_NEWLINE = re.compile(r"[^\n]")

# A sign counts only when it is not a binary minus ("10-5" ends in 5, not -5).
_NUMBER = re.compile(
    r"(?:(?<![\w)\]}])[-\u2212])?"  # a sign, unless it is a binary minus ("10-5" ends in 5)
    r"(?:(?:\d{1,3}(?:,\d{3})+(?!\d)|\d+)(?:\.\d+)?|\.\d+)"  # 1,234.5 / 1234 / .5
    r"(?:/\d+)?"  # a denominator: 3/4
)

# A multiple-choice letter at the start of an extracted answer: "B", "(B)", "B) 42", "[C].", "D: x".
# Wrappers a model puts around it (``$``, ``**``, ``\text{}``, "Option") are removed first.
_CHOICE_WRAPPER = re.compile(r"\\(?:text|textbf|mathrm|mathbf)\{|[${}*]")
_CHOICE_PREFIX = re.compile(r"(?:option|choice)\b[ \t]*", re.IGNORECASE)
_CHOICE_LETTER = re.compile(r"[(\[]?([A-Z])[)\]]?(?=$|[.:)\],]|\s)")
# Without any answer cue, only a letter in parentheses counts: "(B)". A bare capital is too often
# just the first word of a sentence ("I think", "A number").
_CHOICE_PAREN = re.compile(r"\(([A-Z])\)")


def extract_answer(text: str, mode: str = "auto") -> str | None:
    """The final answer in ``text`` according to ``mode``, or ``None`` when there is none.

    Modes:
      - ``answer_tag``: content of the last complete ``<answer>...</answer>`` (stripped).
      - ``boxed``: content of the last ``\\boxed{...}`` / ``\\fbox{...}`` with balanced braces.
      - ``answer_line``: text after the last "Answer: X" / "answer is X" cue on its line
        (case-insensitive, surrounding ``**`` and a trailing period removed).
      - ``last_number``: the last integer, decimal or fraction, with its sign and with thousands
        commas removed.
      - ``auto``: the first of the above that finds something, in that order.
      - ``choice``: a multiple-choice letter (returned upper-case): from the answer tag, box or
        answer line as above when it starts with a letter ("(B)", "C) 42", "\\text{D}"), else the
        last "(X)" in the text.

    Empty answers count as no answer.
    """
    if mode == "auto":
        for extract in (_answer_tag, _boxed, _answer_line, _last_number):
            answer = extract(text)
            if answer is not None:
                return answer
        return None
    try:
        extract = _EXTRACTORS[mode]
    except KeyError:
        raise RlvrError(f"unknown extract mode {mode!r}; allowed: {', '.join(EXTRACT_MODES)}") from None
    return extract(text)


def _answer_tag(text: str) -> str | None:
    last_open = None
    answer = None
    for tag in _ANSWER_TAG.finditer(text):
        if not tag.group(1):
            last_open = tag.end()
        elif last_open is not None:
            answer = text[last_open : tag.start()]
            last_open = None
    return _non_empty(answer)


def _boxed(text: str) -> str | None:
    span = _last_box(text)
    return _non_empty(_unbox(text[span[0] : span[1]])) if span else None


def _last_box(text: str) -> tuple[int, int] | None:
    """Content span of the box that closes last: the outermost of nested boxes.

    Taking the innermost instead read ``\\boxed{\\frac{1}{\\boxed{2}}}`` as 2: a wrong answer that
    scored whenever the reference was its denominator.
    """
    stack: list[int | None] = []  # content start for a box, None for a plain brace
    last: tuple[int, int] | None = None
    for token in _BOX_TOKEN.finditer(text):
        kind = token.group()
        if kind[0] == "\\" and len(kind) == 2:
            continue  # escaped brace: literal text
        if kind == "}":
            if not stack:
                continue
            start = stack.pop()
            if start is not None:
                last = (start, token.start())
        elif kind == "{":
            stack.append(None)
        else:
            stack.append(token.end())
    return last


def _unbox(content: str) -> str:
    """``content`` without the ``\\boxed{`` / ``\\fbox{`` commands nested in it (their contents stay)."""
    pieces: list[str] = []
    stack: list[bool] = []  # per open brace: whether it belongs to a box command
    copied = 0
    for token in _BOX_TOKEN.finditer(content):
        kind = token.group()
        if kind[0] == "\\" and len(kind) == 2:
            continue
        if kind == "}":
            if stack and stack.pop():
                pieces.append(content[copied : token.start()])
                copied = token.end()
        elif kind == "{":
            stack.append(False)
        else:
            pieces.append(content[copied : token.start()])
            copied = token.end()
            stack.append(True)
    pieces.append(content[copied:])
    return "".join(pieces)


def _answer_line(text: str) -> str | None:
    cues = [m.end() for m in _ANSWER_CUE.finditer(text)]
    for start in reversed(cues):
        answer = _clean_answer_line(_line_from(text, start))
        if answer is None:
            # "Answer:" alone on its line, the answer on the next non-empty one.
            next_line = _NON_NEWLINE.search(text, start)
            if next_line is not None:
                answer = _clean_answer_line(_line_from(text, next_line.start()))
        if answer is not None:
            return answer
    return None


def _line_from(text: str, start: int) -> str:
    end = text.find("\n", start)
    return text[start:] if end < 0 else text[start:end]


def _clean_answer_line(line: str) -> str | None:
    answer = line.strip().strip("*").strip()
    if answer.endswith("."):
        answer = answer[:-1].rstrip()
    return _non_empty(answer)


def _choice(text: str) -> str | None:
    for extract in (_answer_tag, _boxed, _answer_line):
        candidate = extract(text)
        letter = choice_letter(candidate) if candidate is not None else None
        if letter is not None:
            return letter
    last = None
    for match in _CHOICE_PAREN.finditer(text):
        last = match.group(1)
    return last


def choice_letter(answer: str) -> str | None:
    """The option letter an extracted answer starts with ("(b) 42" -> "B"), or None.

    A lone lower-case letter counts ("<answer>c</answer>"); in longer text only an upper-case one
    does, so that "a number" is not read as option A.
    """
    head = _CHOICE_WRAPPER.sub("", answer[:64]).strip()
    prefix = _CHOICE_PREFIX.match(head)
    if prefix:
        head = head[prefix.end() :]
    if len(head) == 1 or (len(head) == 3 and head[0] in "([" and head[2] in ")]"):
        head = head.upper()
    match = _CHOICE_LETTER.match(head)
    return match.group(1) if match else None


def _last_number(text: str) -> str | None:
    last = None
    for match in _NUMBER.finditer(text):
        last = match.group()
    if last is None:
        return None
    return last.replace(",", "").replace("\u2212", "-")


def _non_empty(answer: str | None) -> str | None:
    if answer is None:
        return None
    answer = answer.strip()
    return answer or None


_EXTRACTORS = {
    "answer_tag": _answer_tag,
    "boxed": _boxed,
    "answer_line": _answer_line,
    "last_number": _last_number,
    "choice": _choice,
}


def as_number(text: str) -> float | None:
    """``text`` as a finite float ("1,024" -> 1024.0), else ``None``: how rlvr reads a numeric answer."""
    try:
        value = float(text.strip().replace(",", ""))
    except ValueError:
        return None
    return value if value == value and abs(value) != float("inf") else None


_ARTICLE = re.compile(r"\b(?:a|an|the)\b")


def normalize_answer(text: str) -> str:
    """SQuAD / Search-R1 answer normalization: lower case, no punctuation, no articles (a, an, the),
    runs of whitespace collapsed to one space. "The  Lune." and "lune" both become "lune".

    Punctuation is ``string.punctuation`` (ASCII), removed before articles so that "the-lune"
    keeps its article as part of one word ("thelune"), as in the original.
    """
    lowered = text.lower()
    without_punctuation = lowered.translate(_PUNCTUATION)
    return " ".join(_ARTICLE.sub(" ", without_punctuation).split())


_PUNCTUATION = str.maketrans("", "", string.punctuation)
