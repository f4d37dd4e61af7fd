"""SFT conversations from JSONL, Parquet, CSV and HF datasets: both row forms, and every bad row
named by file, row and key."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rlvr.data.chat_data import ChatColumns, load_chat_dataset, load_chat_file
from rlvr.errors import RlvrError

CALLS = [{"type": "function", "function": {"name": "add", "arguments": {"a": 2, "b": 2}}}]
TOOLS = [{"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}]
CHAT = [
    {"role": "user", "content": "2+2?"},
    {"role": "assistant", "content": None, "tool_calls": CALLS},
    {"role": "tool", "name": "add", "tool_call_id": "call_1", "content": "4"},
    {"role": "assistant", "content": "4."},
]


def jsonl(path: Path, rows: list[Any]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def error_of(path: Path, columns: ChatColumns = ChatColumns()) -> str:
    with pytest.raises(RlvrError) as info:
        load_chat_file(path, columns)
    return str(info.value)


def test_messages_rows_with_tool_calls_and_tools(tmp_path: Path) -> None:
    path = tmp_path / "chat.jsonl"
    path.write_text("\n" + json.dumps({"messages": CHAT, "tools": TOOLS}) + "\n", encoding="utf-8")
    (example,) = load_chat_file(path)
    assert example.messages == CHAT and example.tools == TOOLS
    assert (example.origin, example.index) == ("chat.jsonl line 2", 0)  # blank lines count


def test_prompt_completion_rows_text_and_conversational(tmp_path: Path) -> None:
    rows = [
        {"prompt": "2+2?", "completion": "4."},
        {"prompt": [{"role": "system", "content": "Be brief."}, CHAT[0]], "completion": CHAT[1:]},
        {"question": "2+2?", "reply": "4."},
    ]
    a, b, c = load_chat_file(jsonl(tmp_path / "pc.jsonl", rows[:2] + [rows[0]]))
    assert a.messages == [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4."}]
    assert b.messages == [{"role": "system", "content": "Be brief."}, *CHAT] and b.tools is None
    renamed = ChatColumns(messages_key="chat", prompt_key="question", completion_key="reply")
    (d,) = load_chat_file(jsonl(tmp_path / "renamed.jsonl", rows[2:]), renamed)
    assert d.messages == a.messages and c.index == 2


def test_parquet_drops_the_nulls_of_the_struct_union(tmp_path: Path) -> None:
    path = tmp_path / "chat.parquet"
    pq.write_table(pa.Table.from_pylist([{"messages": CHAT}]), path)
    (example,) = load_chat_file(path)
    # Parquet gives every message every field (tool_calls: None on the user message, ...)
    assert example.messages[0] == {"role": "user", "content": "2+2?"}
    assert (
        example.messages[1]["content"] is None
        and example.messages[1]["tool_calls"][0]["function"]["name"] == "add"
    )
    assert example.origin == "chat.parquet data row 1"


def test_csv_cells_hold_messages_as_json(tmp_path: Path) -> None:
    path = tmp_path / "chat.csv"
    path.write_text('prompt,completion\n"[1, 2] sorted?",[1 2]\n', encoding="utf-8")
    (example,) = load_chat_file(path)  # a text prompt is text, even when it looks like JSON
    assert example.messages[0]["content"] == "[1, 2] sorted?"


def test_hf_dataset_saved_to_disk(tmp_path: Path) -> None:
    datasets = pytest.importorskip("datasets")
    datasets.Dataset.from_list([{"prompt": "2+2?", "completion": "4."}] * 2).save_to_disk(
        str(tmp_path / "ds")
    )
    examples = load_chat_dataset(str(tmp_path / "ds"))
    assert [e.origin for e in examples] == [f"{tmp_path / 'ds'} [train] row {n}" for n in (1, 2)]
    datasets.Dataset.from_list([{"prompt": "2+2?"}]).save_to_disk(str(tmp_path / "bad"))
    with pytest.raises(RlvrError, match=r"\[train\] row 1: column 'completion' is missing"):
        load_chat_dataset(str(tmp_path / "bad"))


def user(content: Any = "hi") -> dict[str, Any]:
    return {"role": "user", "content": content}


def bot(content: Any = "ok") -> dict[str, Any]:
    return {"role": "assistant", "content": content}


BAD_ROWS = [
    (
        {"text": "hi"},
        r"no conversation: neither a 'messages' column nor 'prompt' and 'completion'; columns found: 'text'",
    ),
    ({"prompt": "hi"}, "column 'completion' is missing or null"),
    ({"prompt": "hi", "completion": [user()]}, "column 'completion' holds no 'assistant' message"),
    ({"messages": "not json"}, "column 'messages' is text but not JSON"),
    ({"messages": []}, "column 'messages' must be a non-empty list of messages"),
    ({"messages": [user(), "ok"]}, "message 2 in column 'messages' must be an object"),
    ({"messages": [user(), {"content": "ok"}]}, "message 2 in column 'messages' has no 'role'"),
    (
        {"messages": [user(), {"role": "assistant"}]},
        r"message 2 in column 'messages' \(assistant\) has no 'content' \(nor 'tool_calls'\)",
    ),
    (
        {"messages": [user(), {"role": "bot", "content": "ok"}]},
        "message 2 in column 'messages' has role 'bot'; expected one of",
    ),
    ({"messages": [user(), user()]}, "the conversation has no 'assistant' message"),
    (
        {"messages": [user(7), bot()]},
        r"message 1 in column 'messages' \(user\): 'content' must be text, got int",
    ),
    ({"messages": [user([{"type": "text", "text": "hi"}]), bot()]}, "message 1 .* got list .*multimodal"),
    ({"messages": [user(None), bot()]}, r"message 1 in column 'messages' \(user\) has no 'content'\."),
    ({"messages": [user(), bot("  ")]}, "message 2 in column 'messages': the assistant message is empty"),
    (
        {"messages": [{**user(), "tool_calls": CALLS}, bot()]},
        "message 1 .*only assistant messages carry 'tool_calls'",
    ),
    (
        {"messages": [user(), {**bot(None), "tool_calls": [{"name": "add"}]}]},
        "message 2 .*tool call 1 must be an object with 'function'",
    ),
    (
        {"messages": [user(), bot(), {"role": "tool", "content": "4", "name": 3}]},
        "message 3 .*'name' must be text, got int",
    ),
    ({"messages": [user("\ud800"), bot()]}, "message 1 in column 'messages': text that is not valid UTF-8"),
    ({"messages": [user(), bot()], "tools": {"add": {}}}, "column 'tools' must be a list of tool schemas"),
]


@pytest.mark.parametrize("row, message", BAD_ROWS)
def test_bad_rows_name_file_row_and_key(tmp_path: Path, row: dict[str, Any], message: str) -> None:
    path = jsonl(tmp_path / "sft.jsonl", [{"messages": [user(), bot()]}, row])
    with pytest.raises(RlvrError, match=f"^sft.jsonl line 2: {message}"):
        load_chat_file(path)


def test_the_content_of_an_assistant_message_with_tool_calls_may_be_null(tmp_path: Path) -> None:
    (example,) = load_chat_file(jsonl(tmp_path / "ok.jsonl", [{"messages": CHAT}]))
    assert example.messages[1]["content"] is None


def test_bad_files(tmp_path: Path) -> None:
    latin = tmp_path / "latin.jsonl"
    latin.write_bytes(
        json.dumps({"prompt": "caf\u00e9", "completion": "ok"}, ensure_ascii=False).encode("latin-1")
    )
    assert error_of(latin).startswith(f"{latin}: not UTF-8 text")
    assert "data file not found" in error_of(tmp_path / "missing.jsonl")
    assert "unknown data file extension '.txt'" in error_of(tmp_path / "chat.txt")
    assert error_of(jsonl(tmp_path / "empty.jsonl", [])) == "empty.jsonl: no rows; the dataset is empty."
    deep = tmp_path / "deep.jsonl"
    deep.write_text('{"messages": ' + "[" * 200 + "]" * 200 + "}\n", encoding="utf-8")
    assert "deep.jsonl line 1: JSON nested more than 100 levels deep" in error_of(deep)
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"messages": [\n', encoding="utf-8")
    assert error_of(broken).startswith("broken.jsonl line 1: not valid JSON")
