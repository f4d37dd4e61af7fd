"""Pull the final answer out of a model's completion.

Completions are untrusted text of any length (a run-away generation can be megabytes), so every
mode here is a single left-to-right scan: no regex that can backtrack catastrophically, no
"search again from each candidate" loop that turns quadratic.
"""

from __future__ import annotations

import re
import string
from fractions import Fraction
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
      - ``answer_tag``: content of the last ``<answer>...</answer>`` (stripped).
      - ``boxed``: content of the last ``\\boxed{...}`` / ``\\fbox{...}`` with balanced braces (the
        outermost of nested boxes; inner box commands are dropped).
      - ``answer_line``: text after the last "Answer: X" / "answer is X" cue on its line
        (case-insensitive, surrounding ``**`` and a trailing period removed).
      - ``last_number``: the last integer, decimal or fraction, with its sign and with thousands
        commas removed.
      - ``auto``: the first of the above that finds something, in that order.
      - ``choice``: a multiple-choice letter (returned upper-case): from the answer tag, box or
        answer line as above when it starts with a letter ("(B)", "C) 42", "\\text{D}"), else the
        last "(X)" in the text.

    Empty answers count as no answer.

    **An unfinished answer is no answer, in every mode.** When the text ends inside an answer — a
    ``\\boxed{`` / ``\\fbox{`` whose brace never closes (anywhere: braces nest, so an unclosed box
    holds everything after it), or a last ``<answer>`` with no ``</answer>`` after it — the result
    is ``None``: the completion was cut off (or malformed) while giving its answer, and nothing else
    in it stands in for that answer. Neither an earlier closed box or tag, a box nested inside the
    unclosed one, an "Answer:" line, nor the last number counts (``"so \\boxed{12"`` or
    ``"\\boxed{ 7 + 5 = 12 and then 3"`` would otherwise score 12 or 3 without any answer given).
    """
    if mode != "auto" and mode not in _EXTRACTORS:
        raise RlvrError(f"unknown extract mode {mode!r}; allowed: {', '.join(EXTRACT_MODES)}")
    if ends_inside_answer(text):
        return None
    if mode != "auto":
        return _EXTRACTORS[mode](text)
    for extract in (_answer_tag, _boxed, _answer_line, _last_number):
        answer = extract(text)
        if answer is not None:
            return answer
    return None


def ends_inside_answer(text: str) -> bool:
    """Whether ``text`` opens an answer it never closes: a ``\\boxed{`` / ``\\fbox{`` whose brace
    is still open at the end, or a last ``<answer>`` tag with no ``</answer>`` after it. Such a
    completion has no extractable answer (:func:`extract_answer`)."""
    return _scan_boxes(text)[1] or _open_answer_tag(text)


def _open_answer_tag(text: str) -> bool:
    last_open = False
    for tag in _ANSWER_TAG.finditer(text):
        last_open = not tag.group(1)
    return last_open


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
    span, unclosed = _scan_boxes(text)
    if unclosed or span is None:
        return None
    return _non_empty(_unbox(text[span[0] : span[1]]))


def _scan_boxes(text: str) -> tuple[tuple[int, int] | None, bool]:
    """Content span of the box that closes last (the outermost of nested boxes), and whether some
    box is still open at the end of the text.

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
    return last, any(start is not None for start in stack)


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


# Fraction() builds 10**exponent exactly: a completion's "1e999999999" must not cost that.
_MAX_EXPONENT = 1000
_EXPONENT = re.compile(r"[eE][-+]?(\d[\d_]*)$")


def exact_number(text: str) -> Fraction | None:
    """``text`` as the exact number it writes, else ``None``: ``"0.5"``, ``".50"`` and ``"1/2"`` are
    all 1/2, ``"1,024"`` is 1024, ``"-3e2"`` is -300.

    Read from the digits, never through a binary float, so ``"0.5000000000000000001"`` is not 0.5
    (as a float it would be). Infinities, NaN and exponents beyond ±1000 are not numbers here.
    """
    cleaned = text.strip().replace(",", "").replace("\u2212", "-")
    exponent = _EXPONENT.search(cleaned)
    if exponent is not None:
        digits = exponent.group(1).replace("_", "").lstrip("0")
        if len(digits) > 4 or int(digits or 0) > _MAX_EXPONENT:
            return None
    try:
        return Fraction(cleaned)
    except (ValueError, ZeroDivisionError):
        return None


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
