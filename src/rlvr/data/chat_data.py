"""Conversations for supervised fine-tuning, read from JSONL, JSON, Parquet, CSV/TSV or an HF dataset.

A row holds one conversation in either of the forms TRL's SFT datasets use:

- ``messages``: a list of ``{"role", "content"}`` (roles ``system``, ``user``, ``assistant``,
  ``tool``); an assistant message may carry ``tool_calls`` (then its content may be null), a tool
  message ``name`` / ``tool_call_id``; a ``tools`` column, when present, is handed to the chat
  template (the functions the conversation may call).
- ``prompt`` / ``completion``: each a string or a list of messages (TRL's "conventional" and
  "conversational" prompt-completion forms); a string prompt is one user message, a string
  completion one assistant message, and the conversation is the prompt followed by the completion.

The files are read by the same readers as RL data (:mod:`rlvr.data.file_source`,
:mod:`rlvr.data.hf_source`), so they keep the same input limits (JSON depth, UTF-8) and every bad
row raises :class:`RlvrError` starting with where it is (``data.jsonl line 7``) and naming the
column and message, because a demonstration set is often built by a script that gets one row wrong.
Turning a conversation into tokens is :mod:`rlvr.data.demonstrations`' job.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# the readers of RL data, so SFT data has the same formats, input limits and error wording
from rlvr.data.file_source import _READERS, checked_data_file
from rlvr.data.hf_source import _open, _pick_split
from rlvr.errors import RlvrError
from rlvr.safe_parse import check_depth, loads_json

ROLES = ("system", "user", "assistant", "tool")
Message = dict[str, Any]


@dataclass(frozen=True)
class ChatColumns:
    """Which columns hold the conversation: ``messages_key`` (tried first), else ``prompt_key`` and
    ``completion_key``; ``tools_key`` is optional in every row."""

    messages_key: str = "messages"
    prompt_key: str = "prompt"
    completion_key: str = "completion"
    tools_key: str = "tools"


@dataclass
class ChatExample:
    """One conversation to train on. ``origin`` says where it was read (``"data.jsonl line 3"``) for
    errors found later (e.g. by the chat template); ``index`` is its 0-based position in the data.
    Assistant messages before ``first_trained`` are context, never trained (an example game the
    conversation opens with, :mod:`rlvr.data.env_demos`)."""

    messages: list[Message]
    tools: list[dict[str, Any]] | None
    origin: str
    index: int
    first_trained: int = 0


# --------------------------------------------------------------------------------------- loading
def load_chat_file(path: str | Path, columns: ChatColumns = ChatColumns()) -> list[ChatExample]:
    """Every row of a local data file as a :class:`ChatExample` (extension picks the reader)."""
    path = Path(path)
    suffix = checked_data_file(path)
    try:
        return rows_to_chat_examples(_READERS[suffix](path), columns, source=path.name)
    except OSError as error:
        raise RlvrError(f"{path}: cannot read the file: {error.strerror or error}.") from error


def load_chat_dataset(
    name_or_path: str, split: str = "train", columns: ChatColumns = ChatColumns(), subset: str | None = None
) -> list[ChatExample]:
    """One split of a Hugging Face dataset (hub id in the cache, directory of data files, or
    ``save_to_disk`` directory) as ChatExamples; a single local file goes to :func:`load_chat_file`."""
    if Path(name_or_path).is_file():
        return load_chat_file(name_or_path, columns)
    dataset = _pick_split(_open(str(name_or_path), subset), split, str(name_or_path))
    label = f"{name_or_path} [{split}]"
    rows = ((f"{label} row {n}", row) for n, row in enumerate(dataset, start=1))
    return rows_to_chat_examples(rows, columns, source=label)


def rows_to_chat_examples(
    rows: Iterable[tuple[str, Any]], columns: ChatColumns = ChatColumns(), source: str = "the data"
) -> list[ChatExample]:
    """Convert ``(where, row)`` pairs (as the readers yield them); ``source`` names the whole input
    for an empty one."""
    examples: list[ChatExample] = []
    for index, (where, row) in enumerate(rows):
        if not isinstance(row, dict):
            raise RlvrError(f"{where}: expected an object with named fields, got {type(row).__name__}.")
        check_depth(row, where)  # rows from Parquet / HF arrive as objects, not JSON text
        messages, tools = _conversation(row, where, columns)
        examples.append(ChatExample(messages, tools, where, index))
    if not examples:
        raise RlvrError(f"{source}: no rows; the dataset is empty.")
    return examples


# ------------------------------------------------------------------------------------- one row
def _present(row: dict[str, Any], key: str) -> bool:
    value = row.get(key)
    return value is not None and not (isinstance(value, float) and value != value)  # NaN from pandas


def _found(row: dict[str, Any]) -> str:
    return ", ".join(repr(k) for k in row) or "(none)"


def _conversation(
    row: dict[str, Any], where: str, columns: ChatColumns
) -> tuple[list[Message], list[dict[str, Any]] | None]:
    if _present(row, columns.messages_key):
        messages = _messages(row[columns.messages_key], where, columns.messages_key)
    elif _present(row, columns.prompt_key) or _present(row, columns.completion_key):
        for key in (columns.prompt_key, columns.completion_key):
            if not _present(row, key):
                raise RlvrError(
                    f"{where}: column {key!r} is missing or null; a prompt-completion row needs both "
                    f"{columns.prompt_key!r} and {columns.completion_key!r} (columns found: {_found(row)})."
                )
        prompt = _part(row[columns.prompt_key], where, columns.prompt_key, "user")
        completion = _part(row[columns.completion_key], where, columns.completion_key, "assistant")
        if not any(m["role"] == "assistant" for m in completion):
            raise RlvrError(f"{where}: column {columns.completion_key!r} holds no 'assistant' message.")
        messages = prompt + completion
    else:
        raise RlvrError(
            f"{where}: no conversation: neither a {columns.messages_key!r} column nor "
            f"{columns.prompt_key!r} and {columns.completion_key!r}; columns found: {_found(row)}. "
            "Set messages_key (or prompt_key and completion_key) to the columns that hold it."
        )
    if not any(m["role"] == "assistant" for m in messages):
        raise RlvrError(
            f"{where}: the conversation has no 'assistant' message: there is nothing to train on."
        )
    tools = (
        _tools(row[columns.tools_key], where, columns.tools_key) if _present(row, columns.tools_key) else None
    )
    return messages, tools


def _parse_json_text(value: Any, where: str, key: str, expected: str) -> Any:
    """CSV cells (and some Parquet exports) carry a list as JSON text: parse it within the limits."""
    if not isinstance(value, str):
        return value
    try:
        return loads_json(value, f"{where}: column {key!r}")
    except json.JSONDecodeError as error:
        raise RlvrError(f"{where}: column {key!r} is text but not JSON {expected} ({error.msg}).") from error


def _part(value: Any, where: str, key: str, role: str) -> list[Message]:
    """A prompt or completion: text is one ``role`` message (always: a CSV cell of text is never
    guessed to be JSON), a list is messages."""
    if isinstance(value, str):
        return [_message({"role": role, "content": value}, where, key, 1)]
    return _messages(value, where, key)


def _messages(value: Any, where: str, key: str) -> list[Message]:
    value = _parse_json_text(value, where, key, "(a list of messages)")
    if not isinstance(value, list) or not value:
        raise RlvrError(
            f"{where}: column {key!r} must be a non-empty list of messages like "
            f'[{{"role": "user", "content": "..."}}], got {type(value).__name__}.'
        )
    return [_message(m, where, key, n) for n, m in enumerate(value, start=1)]


def _message(message: Any, where: str, key: str, n: int) -> Message:
    at = f"{where}: message {n} in column {key!r}"
    if not isinstance(message, dict):
        raise RlvrError(f"{at} must be an object with 'role' and 'content', got {type(message).__name__}.")
    # Parquet stores a list of structs with the union of their fields: drop the nulls that adds.
    message = {k: v for k, v in message.items() if v is not None or k == "content"}
    role = message.get("role")
    if "role" not in message:
        raise RlvrError(f"{at} has no 'role' (keys: {_found(message)}).")
    if role not in ROLES:
        raise RlvrError(f"{at} has role {role!r:.60}; expected one of {', '.join(ROLES)}.")
    if "tool_calls" in message:
        if role != "assistant":
            raise RlvrError(f"{at}: only assistant messages carry 'tool_calls' (this one is {role!r}).")
        _check_tool_calls(message["tool_calls"], at)
    content = message.get("content")
    if content is None and "tool_calls" not in message:
        raise RlvrError(
            f"{at} ({role}) has no 'content'" + (" (nor 'tool_calls')." if role == "assistant" else ".")
        )
    if content is not None and not isinstance(content, str):
        raise RlvrError(
            f"{at} ({role}): 'content' must be text, got {type(content).__name__} ({content!r:.80}); "
            "content given as a list of parts (multimodal) is not supported."
        )
    if role == "assistant" and "tool_calls" not in message and not str(content).strip():
        raise RlvrError(
            f"{at}: the assistant message is empty; training on it teaches the model to say nothing."
        )
    for field in ("name", "tool_call_id"):
        if field in message and not isinstance(message[field], str):
            raise RlvrError(f"{at}: {field!r} must be text, got {type(message[field]).__name__}.")
    _check_utf8(message, at)
    return message


def _check_tool_calls(calls: Any, at: str) -> None:
    if not isinstance(calls, list) or not calls:
        raise RlvrError(f"{at}: 'tool_calls' must be a non-empty list, got {type(calls).__name__}.")
    for n, call in enumerate(calls, start=1):
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise RlvrError(
                f"{at}: tool call {n} must be an object with 'function': "
                f"{{'name': ..., 'arguments': ...}}, got {call!r:.120}."
            )


def _check_utf8(value: Any, at: str) -> None:
    """JSON's ``\\ud800`` escapes decode to lone surrogates, which no tokenizer can encode."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError as error:
                raise RlvrError(
                    f"{at}: text that is not valid UTF-8 ({error.reason} in {item!r:.60})."
                ) from None
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def _tools(value: Any, where: str, key: str) -> list[dict[str, Any]]:
    value = _parse_json_text(value, where, key, "(a list of tool schemas)")
    if not isinstance(value, list) or not all(isinstance(t, dict) for t in value):
        raise RlvrError(
            f"{where}: column {key!r} must be a list of tool schemas (objects), got {type(value).__name__}."
        )
    _check_utf8(value, f"{where}: column {key!r}")
    return value
