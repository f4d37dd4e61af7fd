"""Parsing text rlvr did not write (configs, data rows, completions files, run logs) within bounds.

A few lines of hostile input can otherwise exhaust the machine: YAML aliases that expand to
gigabytes ("billion laughs"), JSON nested so deep that the decoder overflows the stack, an integer
of a million digits. Every parse of such text goes through here, and a limit that is hit raises
:class:`RlvrError` naming the file and line (``where``), before anything is expanded.

Limits (docs/data.md, "Limits on input"):

- JSON: at most :data:`MAX_JSON_DEPTH` levels of nested lists and objects per row (a real row
  has a handful); checked by a linear scan before ``json.loads``. The same bound applies to rows
  that arrive as Python objects (HF datasets, Parquet): :func:`check_depth`.
- YAML: at most :data:`MAX_YAML_ALIASES` alias references (``*name``), which together may stand
  for at most :data:`MAX_YAML_ALIAS_NODES` nodes; nesting at most :data:`MAX_YAML_DEPTH` levels,
  aliases included; no alias inside its own anchor.
"""

from __future__ import annotations

import json
import re
from itertools import accumulate
from typing import Any

import yaml

from rlvr.errors import RlvrError

MAX_JSON_DEPTH = 100
MAX_YAML_DEPTH = 100
MAX_YAML_ALIASES = 100
MAX_YAML_ALIAS_NODES = 10_000

# a JSON string (escapes included) or one bracket; strings are skipped so that "[[" inside one
# does not count
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_TOKEN = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}\n]', re.DOTALL)
_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}


# ----------------------------------------------------------------------------------------- JSON
def json_depth(text: str) -> int:
    """The deepest nesting of lists and objects in JSON ``text``; linear time, no recursion."""
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", text))
    return max(accumulate(map(_STEP.__getitem__, brackets)), default=0)


def json_too_deep(text: str, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether JSON ``text`` nests lists and objects more than ``limit`` levels deep."""
    if text.count("[") + text.count("{") <= limit:  # the common case, without a scan
        return False
    return json_depth(text) > limit


def _deep_at(text: str, limit: int) -> tuple[int, int]:
    """``(line, column)``, 1-based, where ``text`` first goes deeper than ``limit`` (for messages)."""
    depth, line, line_start = 0, 1, 0
    for match in _TOKEN.finditer(text):
        token = match.group()
        if token == "\n":
            line, line_start = line + 1, match.end()
        elif len(token) == 1:
            depth += _STEP[token]
            if depth > limit:
                return line, match.start() - line_start + 1
    return line, 1


def loads_json(text: str, where: str, limit: int = MAX_JSON_DEPTH) -> Any:
    """``json.loads(text)``, refusing nesting deeper than ``limit`` and integers too long to
    convert, as :class:`RlvrError` naming ``where`` (e.g. ``"data.jsonl line 7"``). Malformed
    JSON still raises :class:`json.JSONDecodeError`, for the caller to word."""
    if json_too_deep(text, limit):
        line, column = _deep_at(text, limit)
        at = f" (line {line} of it, column {column})" if "\n" in text.strip() else f" (column {column})"
        raise RlvrError(
            f"{where}: JSON nested more than {limit} levels deep{at}; rlvr reads at most {limit} "
            "levels of lists and objects (docs/data.md, Limits on input)."
        )
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        raise
    except ValueError as error:  # an integer of more digits than Python converts (4300)
        raise RlvrError(f"{where}: JSON value out of range ({error}).") from error
    except RecursionError as error:  # nesting within the limit, but the stack is already deep
        raise RlvrError(f"{where}: JSON nested too deeply to read.") from error


def check_depth(value: Any, where: str, limit: int = MAX_JSON_DEPTH) -> None:
    """Raise :class:`RlvrError` naming ``where`` if ``value`` (a row from an HF dataset or a
    Parquet file) nests lists, tuples and dicts more than ``limit`` levels deep; no recursion."""
    stack = [(value, 1)] if isinstance(value, (dict, list, tuple)) else []
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            raise RlvrError(
                f"{where}: the row nests lists and objects more than {limit} levels deep; rlvr reads "
                f"at most {limit} levels (docs/data.md, Limits on input)."
            )
        children = item.values() if isinstance(item, dict) else item
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list, tuple)))


# ----------------------------------------------------------------------------------------- YAML
class _Refused(yaml.YAMLError):
    """A limit was hit; :func:`load_yaml` words it as an :class:`RlvrError`."""

    def __init__(self, message: str, mark: Any) -> None:
        super().__init__(message)
        self.message, self.mark = message, mark


class _BoundedLoader(yaml.SafeLoader):
    """PyYAML's safe loader, counting while it composes: an alias shares its anchor's node, so the
    document is small while composed and grows only when the Python value is walked (validated,
    dumped, copied). The expanded size is measured on the shared nodes, never by expanding them."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0  # collections being composed around the current node
        self._aliases = 0
        self._added = 0  # nodes the aliases stand for
        self._open: set[str] = set()  # anchors whose node is being composed
        self._measured: dict[int, tuple[int, int]] = {}  # id(node) -> (nodes, depth)

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent):
            self._aliases += 1
            if self._aliases > MAX_YAML_ALIASES:
                raise _Refused(f"more than {MAX_YAML_ALIASES} aliases (*name)", event.start_mark)
            if event.anchor in self._open:
                raise _Refused(
                    f"alias *{event.anchor} is inside its own anchor &{event.anchor}", event.start_mark
                )
            target = self.anchors.get(event.anchor)
            if target is not None:  # an undefined alias: PyYAML's own error
                size, depth = self._measure(target)
                self._added += size
                if self._added > MAX_YAML_ALIAS_NODES:
                    raise _Refused(
                        f"aliases expand to more than {MAX_YAML_ALIAS_NODES:,} nodes", event.start_mark
                    )
                if self._depth + depth > MAX_YAML_DEPTH:
                    raise _Refused(f"nesting deeper than {MAX_YAML_DEPTH} levels", event.start_mark)
            return super().compose_node(parent, index)
        self._depth += 1
        if self._depth > MAX_YAML_DEPTH:
            raise _Refused(f"nesting deeper than {MAX_YAML_DEPTH} levels", event.start_mark)
        anchor = getattr(event, "anchor", None)
        if anchor is not None:
            self._open.add(anchor)
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1
            self._open.discard(anchor)

    def _measure(self, node: yaml.Node) -> tuple[int, int]:
        """``(nodes, depth)`` of ``node`` with aliases expanded, memoised per shared node (an
        anchor is composed before any alias to it, so recursion stays within the composed depth)."""
        known = self._measured.get(id(node))
        if known is not None:
            return known
        if isinstance(node, yaml.MappingNode):
            children = [child for pair in node.value for child in pair]
        elif isinstance(node, yaml.SequenceNode):
            children = list(node.value)
        else:
            children = []
        size, depth = 1, 1
        for child in children:
            child_size, child_depth = self._measure(child)
            size, depth = size + child_size, max(depth, child_depth + 1)
        self._measured[id(node)] = (size, depth)
        return size, depth


def load_yaml(text: str, where: str) -> Any:
    """``yaml.safe_load(text)`` within the limits above; a limit hit (or an integer too long to
    convert) raises :class:`RlvrError` naming ``where`` and the line. Malformed YAML still raises
    :class:`yaml.YAMLError`, for the caller to word."""
    loader = _BoundedLoader(text)
    try:
        return loader.get_single_data()
    except _Refused as error:
        line = f" line {error.mark.line + 1}" if error.mark is not None else ""
        raise RlvrError(
            f"{where}{line}: YAML {error.message}; rlvr refuses this much expansion or nesting "
            "(docs/data.md, Limits on input)."
        ) from None
    except ValueError as error:  # an integer of more digits than Python converts (4300)
        raise RlvrError(f"{where}: YAML value out of range ({error}).") from error
    finally:
        loader.dispose()
