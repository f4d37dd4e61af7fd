"""Turn one table row (a dict from a file or an HF dataset) into an :class:`Example`.

Files and HF datasets share this so that the column mapping means the same thing and every bad
row is reported the same way: the message starts with where the row is (``data.jsonl line 7``,
``data.csv data row 3``) and names the config key that picks the column (``data.question_key``,
``data.answer_key``), so the user can go straight to the fix.

With the default column names (``question``, ``answer``) a row that lacks them is read in the
forms TRL and verl datasets use, with no configuration (docs/data.md):

- prompt: ``prompt`` (text, or a list of chat messages) or ``messages`` (chat messages);
- reference: verl's ``reward_model.ground_truth``, TRL's ``completion`` (text or an assistant
  message list), or the final assistant turn of a chat prompt.

A chat prompt that ends with an assistant turn never keeps it: the turn is the answer being asked
for, so it is cut from the prompt (and is the reference when no answer column gives one).
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlvr.data.example import Example
from rlvr.data.prompts import build_messages, resolve_answer_format
from rlvr.errors import RlvrError
from rlvr.safe_parse import check_depth, loads_json

# Columns with these names route a row to its own verifier / data source, so one file can mix
# tasks (math rows scored by math_verify next to puzzle rows scored by reasoning_gym).
VERIFIER_COLUMN = "verifier"
# the reward that leaves an episode to its environment (rlvr.rewards.builtin.environment_reward):
# its rows need no reference answer
SELF_SCORED_VERIFIER = "environment"
DATA_SOURCE_COLUMN = "data_source"
# a row's prompt images (TRL's convention; LLaVA-style data has one "image"): rlvr.vision.images
IMAGE_COLUMNS = ("images", "image")

DEFAULT_QUESTION_KEY = "question"
DEFAULT_ANSWER_KEY = "answer"
# Tried in order when the row has no column named by the default keys (TRL, then verl forms).
PROMPT_COLUMNS = ("prompt", "messages")
REFERENCE_COLUMNS = ("reward_model.ground_truth", "completion")
FINAL_TURN = "the chat's final assistant turn"


@dataclass(frozen=True)
class ColumnMapping:
    """Which columns hold what, and the defaults for what a row does not say.

    ``answer_key=None`` means the data has no references (label-free rewards); otherwise every
    row must have a non-empty answer, because a missing reference would silently score 0 (except a
    row whose verifier is ``environment``, an episode its environment scores). A dotted
    ``answer_key`` (``reward_model.ground_truth``) reads into a dict column. ``messages_key`` names
    a column holding a full chat (list of ``{"role", "content"}``); a row whose value there is null
    falls back to ``question_key``.
    """

    question_key: str = DEFAULT_QUESTION_KEY
    answer_key: str | None = DEFAULT_ANSWER_KEY
    id_key: str | None = None
    messages_key: str | None = None
    system_prompt: str | None = None
    answer_format: str | None = None
    verifier: str | None = None
    data_source: str = "unknown"
    # where a row's image paths are read from (the data file's directory; None: paths refused)
    base_dir: Path | None = None

    def used_columns(self) -> set[str]:
        """Columns the mapping names; these (and the columns a row was read from) are not ``metadata``."""
        keys = {self.question_key, self.answer_key, self.id_key, self.messages_key}
        return {k.split(".")[0] for k in keys if k} | {VERIFIER_COLUMN, DATA_SOURCE_COLUMN, *IMAGE_COLUMNS}


class LoadedExamples(list):
    """The examples of one file or dataset, and how its rows were read (for the run's header):
    ``reading`` is e.g. ``"prompt from 'prompt' (chat, as written); reference from
    'reward_model.ground_truth'"``."""

    reading: str = ""


def _is_missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _columns_found(row: dict[str, Any]) -> str:
    return ", ".join(repr(k) for k in row) or "(none)"


def _lookup(row: dict[str, Any], key: str) -> tuple[bool, Any]:
    """``(present and not null, value)`` of column ``key``; a dotted key reads into dict columns."""
    if key in row:
        return not _is_missing(row[key]), row[key]
    value: Any = row
    for part in key.split("."):
        if not isinstance(value, dict) or part not in value:
            return False, None
        value = value[part]
    return not _is_missing(value), value


def _answer_text(value: Any) -> str:
    """References are compared as text; structured answers become JSON rather than Python repr."""
    if isinstance(value, str):
        return value
    if isinstance(value, (list, dict)):
        return json.dumps(value, ensure_ascii=False)
    return str(value)


def _is_chat(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(m, dict) and "role" in m for m in value)


def _messages_from(value: Any, where: str, key: str) -> list[dict[str, str]]:
    """Validate a chat column; CSV cells carry it as a JSON string, so parse that first."""
    if isinstance(value, str):
        try:
            value = loads_json(value, f"{where}: column {key!r}")
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
    return messages


@dataclass
class _Prompt:
    messages: list[dict[str, str]]
    column: str
    how: str  # "text, as written", "text + answer-format instruction" or "chat, as written"
    final_turn: str | None = None  # the content of a trailing assistant turn cut from the chat


def _chat_prompt(value: Any, where: str, key: str, mapping: ColumnMapping) -> _Prompt:
    """A full chat is used as written (its author chose the wording, so no answer-format
    instruction is appended); only a missing system message is filled from ``system_prompt``, and a
    trailing assistant turn is cut off."""
    messages = _messages_from(value, where, key)
    final = None
    if messages[-1]["role"] == "assistant":
        final = messages.pop()["content"]
    if not any(m["role"] == "user" for m in messages):
        raise RlvrError(f"{where}: the messages in column {key!r} have no 'user' message.")
    if mapping.system_prompt and messages[0]["role"] != "system":
        messages.insert(0, {"role": "system", "content": mapping.system_prompt})
    return _Prompt(messages, key, "chat, as written", final)


def _prompt_from_row(row: dict[str, Any], where: str, mapping: ColumnMapping) -> _Prompt:
    if mapping.messages_key and not _is_missing(row.get(mapping.messages_key)):
        return _chat_prompt(row[mapping.messages_key], where, mapping.messages_key, mapping)
    candidates = [mapping.question_key]
    if mapping.question_key == DEFAULT_QUESTION_KEY:
        candidates += PROMPT_COLUMNS
    key = next((k for k in candidates if not _is_missing(row.get(k))), None)
    if key is None:
        if mapping.question_key in row:
            raise RlvrError(f"{where}: empty question in column {mapping.question_key!r}.")
        tried = " or ".join(repr(k) for k in candidates)
        also = f" (nor {mapping.messages_key!r})" if mapping.messages_key else ""
        raise RlvrError(
            f"{where}: no question column {tried}{also}; columns found: {_columns_found(row)}. "
            "Set data.question_key to the column holding the question (text or chat messages), "
            "or data.messages_key to a column of chat messages."
        )
    value = row[key]
    if key == "messages" or _is_chat(value):
        return _chat_prompt(value, where, key, mapping)
    if isinstance(value, (list, dict)):
        raise RlvrError(
            f"{where}: column {key!r} must be text or a list of chat messages, got {type(value).__name__}."
        )
    if not str(value).strip():
        raise RlvrError(f"{where}: empty question in column {key!r}.")
    messages = build_messages(str(value), mapping.system_prompt, mapping.answer_format)
    appended = resolve_answer_format(mapping.answer_format) is not None
    return _Prompt(messages, key, "text + answer-format instruction" if appended else "text, as written")


def _assistant_text(value: Any, where: str, key: str) -> str:
    """The last assistant message of a chat-form answer (TRL's conversational ``completion``)."""
    replies = [m.get("content") for m in value if m.get("role") == "assistant"]
    if not replies or not isinstance(replies[-1], str):
        raise RlvrError(f"{where}: column {key!r} holds messages but no assistant message with text.")
    return replies[-1]


def _reference_from_row(
    row: dict[str, Any], where: str, mapping: ColumnMapping, prompt: _Prompt
) -> tuple[str | None, str]:
    """``(reference, where it came from)``."""
    key = mapping.answer_key
    if key is None:
        return None, "none (label-free)"
    candidates = [key] + (list(REFERENCE_COLUMNS) if key == DEFAULT_ANSWER_KEY else [])
    if _override(row, VERIFIER_COLUMN, mapping.verifier) == SELF_SCORED_VERIFIER and all(
        not _lookup(row, c)[0] or _is_missing(_lookup(row, c)[1]) or str(_lookup(row, c)[1]).strip() == ""
        for c in candidates
    ):
        return None, "none (its environment scores it)"
    for candidate in candidates:
        present, value = _lookup(row, candidate)
        if present:
            if _is_chat(value):
                value = _assistant_text(value, where, candidate)
            if isinstance(value, str) and not value.strip():
                raise RlvrError(f"{where}: empty answer in column {candidate!r}.")
            return _answer_text(value), candidate
        if candidate in row:  # the column exists but is empty: never fall through to another
            raise RlvrError(f"{where}: empty answer in column {candidate!r}.")
    if key == DEFAULT_ANSWER_KEY and prompt.final_turn is not None:
        if not prompt.final_turn.strip():
            raise RlvrError(f"{where}: the final assistant turn in column {prompt.column!r} is empty.")
        return prompt.final_turn, FINAL_TURN
    tried = " or ".join(repr(k) for k in candidates)
    raise RlvrError(
        f"{where}: no answer column {tried}; columns found: {_columns_found(row)}. "
        "Set data.answer_key to the column holding the reference answer (a dotted path reads "
        "into a dict column), or data.answer_key=null for label-free rewards."
    )


def _id_from_row(row: dict[str, Any], where: str, mapping: ColumnMapping, default: str) -> str:
    key = mapping.id_key
    if key is None:
        return default
    if key not in row:
        raise RlvrError(f"{where}: no id column {key!r} (data.id_key); columns found: {_columns_found(row)}.")
    value = row[key]
    if _is_missing(value) or not str(value).strip():
        raise RlvrError(f"{where}: empty id in column {key!r}.")
    return str(value)


def _override(row: dict[str, Any], column: str, default: Any) -> Any:
    value = row.get(column)
    if _is_missing(value) or (isinstance(value, str) and not value.strip()):
        return default
    return str(value)


def _read_row(
    row: dict[str, Any], where: str, mapping: ColumnMapping, default_id: str
) -> tuple[Example, str]:
    prompt = _prompt_from_row(row, where, mapping)
    reference, reference_column = _reference_from_row(row, where, mapping, prompt)
    used = mapping.used_columns() | {prompt.column, reference_column.split(".")[0]}
    example = Example(
        id=_id_from_row(row, where, mapping, default_id),
        prompt=prompt.messages,
        reference=reference,
        data_source=_override(row, DATA_SOURCE_COLUMN, mapping.data_source),
        verifier=_override(row, VERIFIER_COLUMN, mapping.verifier),
        metadata={k: v for k, v in row.items() if k not in used},
        origin=where,
        images=_images_from_row(row, where, mapping),
    )
    reading = f"prompt from {prompt.column!r} ({prompt.how}); reference from "
    reading += (
        reference_column if reference_column in (FINAL_TURN, "none (label-free)") else repr(reference_column)
    )
    return example, reading


def _images_from_row(row: dict[str, Any], where: str, mapping: ColumnMapping) -> list[Any]:
    for column in IMAGE_COLUMNS:
        value = row.get(column)
        if not _is_missing(value) and not (isinstance(value, (list, tuple)) and not value):
            from rlvr.vision.images import load_images

            return load_images(value, where, column, mapping.base_dir)
    return []


def row_to_example(row: dict[str, Any], where: str, mapping: ColumnMapping, default_id: str) -> Example:
    """Build one Example; ``where`` prefixes any error message (file and row/line)."""
    return _read_row(row, where, mapping, default_id)[0]


def rows_to_examples(
    rows: Iterable[tuple[str, dict[str, Any]]], mapping: ColumnMapping, id_prefix: str, source: str
) -> LoadedExamples:
    """Convert ``(where, row)`` pairs; ids default to ``f"{id_prefix}-{i}"`` (0-based).

    ``source`` names the whole input for the errors that are about it rather than one row
    (no rows at all, duplicate ids).
    """
    examples = LoadedExamples()
    readings: Counter[str] = Counter()
    first_seen: dict[str, str] = {}
    for i, (where, row) in enumerate(rows):
        if not isinstance(row, dict):
            raise RlvrError(f"{where}: expected an object with named fields, got {type(row).__name__}.")
        check_depth(row, where)  # an HF or Parquet row nested too deep to copy, pickle or log
        example, reading = _read_row(row, where, mapping, f"{id_prefix}-{i}")
        if example.id in first_seen:
            raise RlvrError(
                f"{where}: duplicate id {example.id!r} in column {mapping.id_key!r} "
                f"(first at {first_seen[example.id]})."
            )
        first_seen[example.id] = where
        examples.append(example)
        readings[reading] += 1
    if not examples:
        raise RlvrError(f"{source}: no rows; the dataset is empty.")
    examples.reading = (
        next(iter(readings))
        if len(readings) == 1
        else "; ".join(f"{n} rows: {reading}" for reading, n in readings.most_common())
    )
    return examples
