"""Turn one table row (a dict from a file or an HF dataset) into an :class:`Example`.

Files and HF datasets share this so that the column mapping means the same thing and every bad
row is reported the same way: the message starts with where the row is (``data.jsonl line 7``,
``data.csv data row 3``) so the user can go straight to it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from rlvr.data.example import Example
from rlvr.data.prompts import ANSWER_TAG_INSTRUCTION, build_messages
from rlvr.errors import RlvrError

# Columns with these names route a row to its own verifier / data source, so one file can mix
# tasks (math rows scored by math_verify next to puzzle rows scored by reasoning_gym).
VERIFIER_COLUMN = "verifier"
# the reward that leaves an episode to its environment (rlvr.rewards.builtin.environment_reward):
# its rows need no reference answer
SELF_SCORED_VERIFIER = "environment"
DATA_SOURCE_COLUMN = "data_source"


@dataclass(frozen=True)
class ColumnMapping:
    """Which columns hold what, and the defaults for what a row does not say.

    ``answer_key=None`` means the data has no references (label-free rewards); otherwise every
    row must have a non-empty answer, because a missing reference would silently score 0 — except
    a row whose verifier is ``environment`` (an episode its environment scores, e.g. a game), which
    may leave it empty.
    ``messages_key`` names a column holding a full chat (list of ``{"role", "content"}``); a row
    whose value there is null falls back to ``question_key``.
    """

    question_key: str = "question"
    answer_key: str | None = "answer"
    id_key: str | None = None
    messages_key: str | None = None
    system_prompt: str | None = None
    answer_format: str | None = ANSWER_TAG_INSTRUCTION
    verifier: str | None = None
    data_source: str = "unknown"

    def used_columns(self) -> set[str]:
        """Columns consumed by the mapping; every other column goes to ``metadata``."""
        keys = {self.question_key, self.answer_key, self.id_key, self.messages_key}
        return {k for k in keys if k} | {VERIFIER_COLUMN, DATA_SOURCE_COLUMN}


def _is_missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _columns_found(row: dict[str, Any]) -> str:
    return ", ".join(repr(k) for k in row) or "(none)"


def _answer_text(value: Any) -> str:
    """References are compared as text; structured answers become JSON rather than Python repr."""
    if isinstance(value, str):
        return value
    if isinstance(value, (list, dict)):
        return json.dumps(value, ensure_ascii=False)
    return str(value)


def _messages_from(value: Any, where: str, key: str) -> list[dict[str, str]]:
    """Validate a chat column; CSV cells carry it as a JSON string, so parse that first."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as error:
            raise RlvrError(
                f"{where}: column {key!r} is text but not a JSON list of messages ({error})."
            ) from error
    if not isinstance(value, list) or not value:
        raise RlvrError(
            f"{where}: column {key!r} must be a non-empty list of messages "
            f'like [{{"role": "user", "content": "..."}}], got {type(value).__name__}.'
        )
    messages: list[dict[str, str]] = []
    for n, message in enumerate(value, start=1):
        if (
            not isinstance(message, dict)
            or not isinstance(message.get("role"), str)
            or not isinstance(message.get("content"), str)
        ):
            raise RlvrError(
                f"{where}: message {n} in column {key!r} must be an object with text 'role' and "
                f"'content', got {message!r:.200}."
            )
        # Parquet stores a list of structs with the union of fields; drop the nulls that adds.
        messages.append({k: v for k, v in message.items() if v is not None})
    if not any(m["role"] == "user" for m in messages):
        raise RlvrError(f"{where}: the messages in column {key!r} have no 'user' message.")
    return messages


def _prompt_from_row(row: dict[str, Any], where: str, mapping: ColumnMapping) -> list[dict[str, str]]:
    """A full chat is used as written (its author chose the wording, so no answer-format
    instruction is appended); only a missing system message is filled from ``system_prompt``."""
    if mapping.messages_key and not _is_missing(row.get(mapping.messages_key)):
        messages = _messages_from(row[mapping.messages_key], where, mapping.messages_key)
        if mapping.system_prompt and messages[0]["role"] != "system":
            messages.insert(0, {"role": "system", "content": mapping.system_prompt})
        return messages
    if mapping.question_key not in row:
        also = f" (or {mapping.messages_key!r})" if mapping.messages_key else ""
        hint = ""
        if not mapping.messages_key and any(k in row for k in ("messages", "prompt")):
            hint = " If the prompt is a list of chat messages, set the messages key to that column."
        raise RlvrError(
            f"{where}: no column {mapping.question_key!r}{also}; columns found: "
            f"{_columns_found(row)}. Set the question key to the column holding the question.{hint}"
        )
    question = row[mapping.question_key]
    if isinstance(question, (list, dict)):
        raise RlvrError(
            f"{where}: column {mapping.question_key!r} must be text, got {type(question).__name__}."
        )
    if _is_missing(question) or not str(question).strip():
        raise RlvrError(f"{where}: empty question in column {mapping.question_key!r}.")
    return build_messages(str(question), mapping.system_prompt, mapping.answer_format)


def _reference_from_row(row: dict[str, Any], where: str, mapping: ColumnMapping) -> str | None:
    key = mapping.answer_key
    if key is None:
        return None
    value = row.get(key)
    self_scored = _override(row, VERIFIER_COLUMN, mapping.verifier) == SELF_SCORED_VERIFIER
    if self_scored and (_is_missing(value) or (isinstance(value, str) and not value.strip())):
        return None
    if key not in row:
        raise RlvrError(
            f"{where}: no column {key!r}; columns found: {_columns_found(row)}. "
            "Set the answer key to the column holding the reference answer "
            "(or to none for label-free rewards)."
        )
    value = row[key]
    if _is_missing(value) or (isinstance(value, str) and not value.strip()):
        raise RlvrError(f"{where}: empty answer in column {key!r}.")
    return _answer_text(value)


def _id_from_row(row: dict[str, Any], where: str, mapping: ColumnMapping, default: str) -> str:
    key = mapping.id_key
    if key is None:
        return default
    if key not in row:
        raise RlvrError(f"{where}: no id column {key!r}; columns found: {_columns_found(row)}.")
    value = row[key]
    if _is_missing(value) or not str(value).strip():
        raise RlvrError(f"{where}: empty id in column {key!r}.")
    return str(value)


def _override(row: dict[str, Any], column: str, default: Any) -> Any:
    value = row.get(column)
    if _is_missing(value) or (isinstance(value, str) and not value.strip()):
        return default
    return str(value)


def row_to_example(row: dict[str, Any], where: str, mapping: ColumnMapping, default_id: str) -> Example:
    """Build one Example; ``where`` prefixes any error message (file and row/line)."""
    used = mapping.used_columns()
    return Example(
        id=_id_from_row(row, where, mapping, default_id),
        prompt=_prompt_from_row(row, where, mapping),
        reference=_reference_from_row(row, where, mapping),
        data_source=_override(row, DATA_SOURCE_COLUMN, mapping.data_source),
        verifier=_override(row, VERIFIER_COLUMN, mapping.verifier),
        metadata={k: v for k, v in row.items() if k not in used},
    )


def rows_to_examples(
    rows: Iterable[tuple[str, dict[str, Any]]], mapping: ColumnMapping, id_prefix: str, source: str
) -> list[Example]:
    """Convert ``(where, row)`` pairs; ids default to ``f"{id_prefix}-{i}"`` (0-based).

    ``source`` names the whole input for the errors that are about it rather than one row
    (no rows at all, duplicate ids).
    """
    examples: list[Example] = []
    first_seen: dict[str, str] = {}
    for i, (where, row) in enumerate(rows):
        if not isinstance(row, dict):
            raise RlvrError(f"{where}: expected an object with named fields, got {type(row).__name__}.")
        example = row_to_example(row, where, mapping, f"{id_prefix}-{i}")
        if example.id in first_seen:
            raise RlvrError(
                f"{where}: duplicate id {example.id!r} in column {mapping.id_key!r} "
                f"(first at {first_seen[example.id]})."
            )
        first_seen[example.id] = where
        examples.append(example)
    if not examples:
        raise RlvrError(f"{source}: no rows; the dataset is empty.")
    return examples
