"""Is a model's answer mathematically equivalent to the reference? math-verify, with rlvr's corrections.

math-verify (parsing LaTeX and plain text into sympy, then comparing) does the work. rlvr changes
five things, each a place where a policy could otherwise earn reward with a wrong answer or lose it
with a right one (the cases are tabulated in ``docs/rewards.md``):

- **Scientific notation.** math-verify reads ``1.5e-4`` as ``1.5·e − 4`` (Euler's number). A number
  written ``<mantissa>e<exponent>`` is read as ``mantissa × 10^exponent`` instead, unless the
  reference itself uses Euler's number (then ``2e-1`` may well mean ``2e − 1``).
- **Exact numbers are compared exactly.** math-verify compares every decimal rounded to 6 decimal
  places, so ``0.5000001`` passed for ``0.5`` and ``12.5000004`` for ``12.5``. When every number in
  the reference is one a decimal states exactly (integers, terminating decimals, fractions such as
  ``1/4``, percentages of them), decimals on both sides are read as the exact values they write
  (``0.5`` = ``.50`` = ``1/2`` = ``50\\%``, but ``0.5000001`` is not ``0.5``): no tolerance at all
  unless the caller asks for one (``tolerance``, relative to the reference).
- **Rounding relative to the reference's size**, only for references that hold a number no decimal
  states (``1/3``, ``\\sqrt{2}``, ``\\pi``), where any decimal answer is rounded. math-verify rounds to
  6 decimal places, so every number below 5e-7 equals every other (``0.0000002`` = ``0.0000001``).
  rlvr asks for 6 significant figures of the smallest non-zero number in the reference instead (and
  keeps 6 decimal places for larger numbers: ``1/3`` = ``0.333333``).
- **Inequalities for solution sets.** When the reference is an interval or a set, an inequality in
  solved form that describes the same set is equivalent (``x < 3`` = ``(-\\infty, 3)``), in both
  directions. math-verify accepts only one direction.
- **Solved form only.** A predicted equation or inequality counts only when it is solved — a lone
  variable on one side, no variable on the other (``x = 3``, ``1 < x < 2``). Otherwise restating the
  problem scores: math-verify solves ``x + 1 = 4`` and accepts it for ``x = 3``, and turning
  ``(x-1)(x-2) < 0`` into a set accepts it for ``(1, 2)``. References with a variable on both sides
  (``y = 2x + 1``) keep math-verify's comparison.

math-verify's own timeouts use ``signal.alarm``; they are off because the reward pool enforces a
hard wall-clock limit on every call.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterator
from decimal import Decimal, InvalidOperation
from fractions import Fraction
from typing import Any, NamedTuple

# A decimal number followed by an exponent: 1.5e-4, 6.02e23, .5e3. Not part of a word or a longer
# number ("x2e3", "1.5e3.2") and not a LaTeX command's letters.
_SCIENTIFIC = re.compile(r"(?<![\w.\\])(\d+(?:\.\d*)?|\.\d+)[eE]([+-]?\d+)(?![\w.])")
# The same in LaTeX: 6.02\times10^{23}, 1.5 \cdot 10^{-4}. math-verify makes a binary float of the
# mantissa, which then differs from the integer 602000000000000000000000; rlvr writes it exactly.
_LATEX_SCIENTIFIC = re.compile(
    r"(?<![\w.\\])(\d+\.\d+)\s*(?:\\times|\\cdot)\s*10\s*\^\s*(?:\{\s*([+-]?\d+)\s*\}|(\d))"
)
_DEFAULT_DECIMALS = 6  # math-verify's float_rounding
_SIGNIFICANT_FIGURES = 6
_DEFAULT_DIGITS = 15  # math-verify's numeric_precision


class ReferenceUnparsable(ValueError):
    """math-verify finds nothing to compare in the reference: the task's data is wrong, not the answer."""


class _Reference(NamedTuple):
    parsed: list[Any]  # as math-verify parsed it
    exact: list[Any]  # the same with every decimal as the exact rational it writes
    states_exactly: bool  # every number in it is one a decimal states exactly
    euler: bool  # it uses Euler's number
    decimals: int  # math-verify's float_rounding for it
    digits: int  # math-verify's numeric_precision for it


def math_equivalent(reference: str, answer: str, tolerance: float | None = None) -> bool:
    """Whether ``answer`` is mathematically equivalent to ``reference`` (the module docstring says how).

    Numbers are equal only when they are exactly equal if every number in the reference is one a
    decimal states exactly (``0.5``, ``12``, ``1/4``): ``0.5`` = ``1/2`` = ``.50``, but ``0.5000001``
    is not ``0.5``, nor ``1000001`` ``1000000``. A reference holding another number (``1/3``,
    ``\\sqrt{2}``) accepts decimals that agree to 6 significant figures (``0.333333``), because no
    decimal states it. ``tolerance`` (off by default) also accepts a number within
    ``tolerance × |reference|`` of a reference that is a single number (within ``tolerance`` of a
    reference of 0).

    Raises :class:`ReferenceUnparsable` when the reference cannot be parsed; an unparsable answer
    is not equivalent.
    """
    if tolerance is not None and not (tolerance >= 0 and tolerance != float("inf")):
        raise ValueError(f"tolerance must be a finite number >= 0, got {tolerance!r}")
    ref = _reference(reference)
    predicted = parse_math(_exact_scientific(strip_currency(answer), e_notation=not ref.euler))
    if not predicted:
        return False
    _, verify = _math_verify()
    sympy = _sympy()
    for g, g_exact in zip(ref.parsed, ref.exact):
        for p in predicted:
            if isinstance(g, str) or isinstance(p, str):
                # math-verify's fall-back: the raw strings, equal when identical.
                if isinstance(g, str) and isinstance(p, str) and g.strip() and g.strip() == p.strip():
                    return True
                continue
            p = _as_disjunction(p, sympy)
            if _is_relation(p, sympy) and _constrains_values(g, sympy) and not _solved(p, sympy):
                continue
            if isinstance(g, sympy.Set) and _is_relation(p, sympy):
                p = _solution_set(p, sympy)
            if ref.states_exactly:
                # Decimals as the exact numbers they write: math-verify's rounding never applies.
                g, p = g_exact, _exact_decimals(p, sympy)
            if verify(g, p, float_rounding=ref.decimals, numeric_precision=ref.digits, timeout_seconds=None):
                return True
            if tolerance is not None and _within(g_exact, _exact_decimals(p, sympy), tolerance, sympy):
                return True
    return False


@functools.lru_cache(maxsize=1024)
def _reference(reference: str) -> _Reference:
    """The parsed reference, its exact form, and how to compare answers with it."""
    gold = parse_math(_exact_scientific(strip_currency(reference), e_notation=True))
    if not gold:
        raise ReferenceUnparsable(f"math-verify cannot parse the reference {reference!r}")
    sympy = _sympy()
    exact = [_exact_decimals(g, sympy) for g in gold]
    return _Reference(
        gold, exact, _states_exactly(exact, sympy), _uses_euler_number(gold), *_precision_for(gold)
    )


def _exact_decimals(expr: Any, sympy: Any) -> Any:
    """``expr`` with each decimal (a sympy ``Float``) replaced by the exact rational it writes.

    math-verify makes a ``Float`` of a decimal with at least as many digits as were written, so its
    decimal text gives back those digits: ``0.5000001`` becomes 5000001/10000000, not the binary
    fraction nearest to it. A replacement that would evaluate a relation to true or false
    (``6/2 = 3.0``) is not made.
    """
    if isinstance(expr, sympy.MatrixBase):
        return expr.applyfunc(lambda element: _exact_decimals(element, sympy))
    if not isinstance(expr, sympy.Basic):
        return expr
    exact = {}
    for number in expr.atoms(sympy.Float):
        try:
            value = Fraction(str(number))
        except (ValueError, ZeroDivisionError):  # inf, nan
            continue
        exact[number] = sympy.Rational(value.numerator, value.denominator)
    if not exact:
        return expr
    replaced = expr.xreplace(exact)
    if isinstance(replaced, sympy.logic.boolalg.BooleanAtom) and not isinstance(
        expr, sympy.logic.boolalg.BooleanAtom
    ):
        return expr
    return replaced


def _states_exactly(parsed: list[Any], sympy: Any) -> bool:
    """Whether every number in an (exact) parsed reference is one a decimal states exactly: a
    rational whose denominator has no prime factor but 2 and 5 (or an infinity), real and imaginary
    parts alike. ``1/3``, ``\\sqrt{2}``, ``\\pi`` and ``e`` are not."""
    stack = [p for p in parsed if isinstance(p, (sympy.Basic, sympy.MatrixBase))]
    seen = 0
    while stack:
        seen += 1
        if seen > 1000:  # a reference is small; a pathological one keeps math-verify's rounding
            return False
        expr = stack.pop()
        if isinstance(expr, sympy.MatrixBase):
            stack.extend(expr)
        elif isinstance(expr, sympy.Expr) and expr.is_number:
            if not _terminating(expr, sympy):
                return False
        elif isinstance(expr, sympy.Basic):
            stack.extend(arg for arg in expr.args if isinstance(arg, (sympy.Basic, sympy.MatrixBase)))
    return True


def _terminating(number: Any, sympy: Any) -> bool:
    if number.is_infinite:
        return True
    try:
        parts = number.doit().as_real_imag()
    except Exception:  # sympy raises many types on odd input; then it is not known to be exact
        return False
    for part in parts:
        if not isinstance(part, sympy.Rational):
            return False
        denominator = int(part.q)
        for prime in (2, 5):
            while denominator % prime == 0:
                denominator //= prime
        if denominator != 1:
            return False
    return True


def _within(gold: Any, predicted: Any, tolerance: float, sympy: Any) -> bool:
    """A predicted number (or solved ``x = number``) within ``tolerance`` relative to a gold number."""
    if isinstance(predicted, sympy.Eq) and not isinstance(gold, sympy.Eq):
        predicted = predicted.rhs
    if not all(isinstance(e, sympy.Expr) and e.is_number for e in (gold, predicted)):
        return False
    try:
        gold_value, predicted_value = gold.doit(), predicted.doit()
        scale = sympy.Abs(gold_value)
        allowed = sympy.Rational(str(tolerance)) * (scale if scale != 0 else 1)
        margin = allowed - sympy.Abs(predicted_value - gold_value)  # exact for rationals
        return bool((margin if margin.is_Rational else margin.evalf(50)) >= 0)
    except Exception:  # sympy raises many types on odd input (complex, infinite); then not within
        return False


def strip_currency(text: str) -> str:
    """``\\$10`` is ten dollars, but inside math delimiters math-verify reads ``\\$`` as a symbol."""
    return text.replace("\\$", "")


@functools.lru_cache(maxsize=4096)
def parse_math(text: str) -> list[Any]:
    """Parse with math-verify; bare LaTeX and plain numbers parse only inside math delimiters.

    Cached because the G completions of a group share one reference.
    """
    parse, _ = _math_verify()
    if "$" not in text and "\\boxed" not in text and "\\(" not in text and "\\[" not in text:
        parsed = parse(f"${text}$", parsing_timeout=None)
        if parsed:
            return parsed
    return parse(text, parsing_timeout=None)


@functools.lru_cache(maxsize=1)
def _math_verify() -> tuple[Callable[..., Any], Callable[..., Any]]:
    import math_verify
    from math_verify import grader, parser

    # math-verify warns once that nothing enforces a timeout when its own is off; the pool does.
    parser.TIMEOUT_WARNING_SHOWN = True
    grader.TIMEOUT_WARNING_SHOWN = True
    return math_verify.parse, math_verify.verify


def _sympy() -> Any:
    import sympy

    return sympy


def _exact_scientific(text: str, *, e_notation: bool) -> str:
    """Scientific notation as an exact integer times a power of ten: ``1.5e-4`` -> ``15\\times10^{-5}``."""
    text = _LATEX_SCIENTIFIC.sub(lambda m: _exact_power(m.group(1), m.group(2) or m.group(3)), text)
    if e_notation:
        text = _SCIENTIFIC.sub(lambda m: _exact_power(m.group(1), m.group(2)), text)
    return text


def _exact_power(mantissa: str, exponent: str) -> str:
    whole, _, fraction = mantissa.partition(".")
    digits = (whole + fraction).lstrip("0") or "0"
    return f"{digits}\\times10^{{{int(exponent) - len(fraction)}}}"


def _uses_euler_number(parsed: list[Any]) -> bool:
    sympy = _sympy()
    return any(isinstance(p, sympy.Basic) and p.has(sympy.E) for p in parsed)


def _is_relation(expr: Any, sympy: Any) -> bool:
    return isinstance(expr, (sympy.Rel, sympy.And, sympy.Or))


def _solved(expr: Any, sympy: Any) -> bool:
    """``x < 3``, ``3 = x``, ``1 < x < 2``, ``x < 1 or x > 2``: one variable, isolated, against constants."""
    if isinstance(expr, (sympy.And, sympy.Or)):
        return len(expr.free_symbols) == 1 and all(_solved(arg, sympy) for arg in expr.args)
    if isinstance(expr, sympy.Rel):
        lhs, rhs = expr.lhs, expr.rhs
        if not _free(lhs) and not _free(rhs):
            # A worked equality ("6/2 = 3"; its right side is the answer) counts only when it holds.
            try:
                return isinstance(expr, sympy.Eq) and bool(sympy.simplify(lhs - rhs) == 0)
            except Exception:  # sympy raises many types on odd input; then it is not shown to hold
                return False
        return (isinstance(lhs, sympy.Symbol) and not _free(rhs)) or (
            isinstance(rhs, sympy.Symbol) and not _free(lhs)
        )
    return False


def _as_disjunction(expr: Any, sympy: Any) -> Any:
    """math-verify reads ``x < 1 \\text{ or } x > 2`` as the set ``{x < 1, x > 2}``: make it the "or"."""
    if isinstance(expr, sympy.FiniteSet) and len(expr) > 1 and all(_is_relation(a, sympy) for a in expr.args):
        disjunction = sympy.Or(*expr.args)
        if _solved(disjunction, sympy):
            return disjunction
    return expr


def _solution_set(relation: Any, sympy: Any) -> Any:
    try:
        return relation.as_set()
    except (NotImplementedError, TypeError, ValueError):
        return relation


def _free(expr: Any) -> set[Any]:
    return getattr(expr, "free_symbols", set())


def _constrains_values(gold: Any, sympy: Any) -> bool:
    """The reference names values (a number, a set, an interval, ``x = 3``, ``x < 3``), not a relation
    between variables (``y = 2x + 1``): then a predicted relation must be solved to count."""
    if _is_relation(gold, sympy):
        return _solved(gold, sympy)
    return not _free(gold)


def _precision_for(gold: list[Any]) -> tuple[int, int]:
    """math-verify's ``float_rounding`` and ``numeric_precision`` for this reference.

    Floats are compared rounded to ``float_rounding`` decimal places (6), and exact expressions by
    evaluating their difference to ``numeric_precision`` digits (15) with differences below about
    1e-15 chopped to zero. Both are absolute, so both let different small numbers pass
    (``0.0000002`` = ``0.0000001``, ``2·10^{-20}`` = ``10^{-20}``). Scaled to the smallest non-zero
    number in the reference, that number keeps 6 significant figures and 15 digits.
    """
    smallest = min(_magnitudes(gold), default=0)
    return (
        max(_DEFAULT_DECIMALS, _SIGNIFICANT_FIGURES - 1 - smallest),
        max(_DEFAULT_DIGITS, _DEFAULT_DIGITS - smallest),
    )


def _magnitudes(parsed: list[Any]) -> Iterator[int]:
    """Decimal exponents (floor of log10) of the non-zero real numbers in a parsed reference."""
    sympy = _sympy()
    stack = [p for p in parsed if isinstance(p, (sympy.Basic, sympy.MatrixBase))]
    seen = 0
    while stack and seen < 1000:  # a reference is small; the bound only keeps a pathological one finite
        expr = stack.pop()
        seen += 1
        if isinstance(expr, sympy.MatrixBase):
            stack.extend(expr)
        elif isinstance(expr, sympy.Expr) and expr.is_number:
            exponent = _exponent(expr)
            if exponent is not None:
                yield exponent
        elif isinstance(expr, sympy.Basic):
            stack.extend(arg for arg in expr.args if isinstance(arg, (sympy.Basic, sympy.MatrixBase)))


def _exponent(expr: Any) -> int | None:
    try:
        value = Decimal(str(expr.evalf(20)))
    except (InvalidOperation, ArithmeticError, TypeError, ValueError):
        return None  # complex, infinite or not a plain number
    if not value.is_finite() or value == 0:
        return None
    return value.adjusted()
