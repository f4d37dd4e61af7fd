"""A calculator tool: the model writes an arithmetic expression in a tool call, the tool answers.

Two call formats, both ending the model's turn where the call closes:

- tags (what a 135M model can learn): ``<calc>123 + 45 * 6</calc>``;
- hermes JSON: ``<tool_call>{"name": "calculator", "arguments": {"expression": "123 + 45 * 6"}}</tool_call>``.

The result comes back as a ``tool`` message ``<result>393</result>``. A malformed call, an unknown
tool or an expression that fails (division by zero, an exponent too large, anything that is not
arithmetic) comes back as ``<result>error: …</result>`` and is counted (``tool_errors``), never a
crash. A turn without a call ends the episode: it is the answer, which the run's rewards score.
Expressions are evaluated by walking their syntax tree (numbers, + − × ÷, //, %, bounded **,
parentheses), never by ``eval``.
"""

from __future__ import annotations

import ast
import json
import operator
import re
from fractions import Fraction

from rlvr.envs.base import Environment, Step, register_env
from rlvr.envs.data_params import DataParam

_TAG = re.compile(r"<calc>(.*?)</calc>", re.DOTALL)
_HERMES = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
_BINARY = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}


class CalcError(ValueError):
    pass


def evaluate_expression(text: str, max_chars: int = 200, max_exponent: int = 64) -> str:
    """The value of an arithmetic expression, as text (integers exact, other numbers to 10 digits)."""
    if len(text) > max_chars:
        raise CalcError(f"expression longer than {max_chars} characters")
    try:
        tree = ast.parse(text.strip().replace("×", "*").replace("÷", "/"), mode="eval")
    except SyntaxError as err:
        raise CalcError("not an arithmetic expression") from err

    def value(node: ast.AST) -> Fraction:
        if isinstance(node, ast.Constant) and type(node.value) in (int, float):
            return Fraction(node.value)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            inner = value(node.operand)
            return -inner if isinstance(node.op, ast.USub) else inner
        if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
            left, right = value(node.left), value(node.right)
            if isinstance(node.op, ast.Pow) and (
                right.denominator != 1 or abs(right) > max_exponent or abs(left) > 10**100
            ):
                raise CalcError(
                    f"powers take a whole exponent of at most {max_exponent} and a base below 1e100"
                )
            if isinstance(node.op, (ast.Div, ast.FloorDiv, ast.Mod)) and right == 0:
                raise CalcError("division by zero")
            result = _BINARY[type(node.op)](left, right)
            return Fraction(result)
        raise CalcError("only numbers, + - * / // % ** and parentheses are allowed")

    result = value(tree.body)
    if result.denominator == 1:
        return str(result.numerator)
    return f"{float(result):.10g}"


def parse_call(text: str) -> tuple[str | None, str | None]:
    """``(expression, error)`` of the last tool call in ``text``; ``(None, None)`` when there is none."""
    calls = [(m.start(), "tag", m.group(1)) for m in _TAG.finditer(text)]
    calls += [(m.start(), "hermes", m.group(1)) for m in _HERMES.finditer(text)]
    if not calls:
        return None, None
    _, kind, body = max(calls)
    if kind == "tag":
        return body, None
    try:
        call = json.loads(body)
        name, args = call["name"], call.get("arguments", {})
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError):  # ValueError: JSON
        return None, 'malformed tool call: expected {"name": ..., "arguments": {...}}'
    if name != "calculator":
        return None, f"unknown tool {name!r}; the only tool is calculator"
    if not isinstance(args, dict) or not isinstance(args.get("expression"), str):
        return None, 'calculator takes {"expression": "..."}'
    return args["expression"], None


INSTRUCTIONS = (
    "You can use a calculator. To use it, write the expression inside <calc></calc> and stop; "
    "the result comes back inside <result></result>. Then give the final answer inside <answer></answer>."
)
DEMONSTRATION = [
    {
        "role": "user",
        "content": "State the final answer to the following arithmetic problem: 418 + 97 - 260 =",
    },
    {"role": "assistant", "content": "<calc>418 + 97 - 260</calc>"},
    {"role": "tool", "content": "<result>255</result>"},
    {"role": "assistant", "content": "<answer>255</answer>"},
]


@register_env("calculator")
class Calculator(Environment):
    """Arithmetic through a calculator tool; the episode's answer is the first turn without a call.

    With ``demonstrate`` (default) the opening conversation is a system message describing the
    tool, one worked exchange (question → call → result → answer), then the example's question."""

    stop_strings = ("</calc>", "</tool_call>")
    # what a data row's env_params may set (rlvr.envs.data_params); nothing else comes from data
    data_params = {
        "tool_error_penalty": DataParam(float, 0.0, 1.0),
        "max_chars": DataParam(int, 1, 4000),
        "demonstrate": DataParam(bool),
    }

    def __init__(
        self, tool_error_penalty: float = 0.0, max_chars: int = 200, demonstrate: bool = True
    ) -> None:
        self.tool_error_penalty, self.max_chars, self.demonstrate = tool_error_penalty, max_chars, demonstrate
        self.calls = self.errors = 0

    def reset(self, example, rng) -> list[dict[str, str]]:
        if not self.demonstrate:
            return list(example.prompt)
        question = [m for m in example.prompt if m["role"] != "system"]
        return [{"role": "system", "content": INSTRUCTIONS}, *DEMONSTRATION, *question]

    def step(self, text: str) -> Step:
        expression, error = parse_call(text)
        if expression is None and error is None:  # the answer (zeros keep the counters in every step's log)
            return Step(done=True, info={"tool_calls": 0.0, "tool_errors": 0.0})
        self.calls += 1
        if error is None:
            try:
                result = evaluate_expression(expression, self.max_chars)
            except CalcError as err:
                error = str(err)
        reward = 0.0
        if error is not None:
            self.errors += 1
            result, reward = f"error: {error}", -self.tool_error_penalty
        info = {"tool_calls": 1.0, "tool_errors": float(error is not None)}
        return Step([{"role": "tool", "content": f"<result>{result}</result>"}], reward=reward, info=info)

    def outcome(self) -> dict[str, float]:
        return {"used_tool": float(self.calls > 0), "tool_ok": float(self.calls > self.errors)}
