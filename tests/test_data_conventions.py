"""Rows in TRL's and verl's forms are read without configuration; a chat never keeps its answer.

Small JSONL and Parquet files written in tmp, read through ``load_file`` (and, for the wiring,
through a run config with ``data.path`` alone).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rlvr.config import load_config
from rlvr.data import ANSWER_TAG_INSTRUCTION, load_file
from rlvr.data.from_config import load_datasets
from rlvr.errors import RlvrError


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def user(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}


def assistant(text: str) -> dict[str, str]:
    return {"role": "assistant", "content": text}


def test_verl_rows(tmp_path: Path) -> None:
    """verl: ``prompt`` as chat messages, ``reward_model.ground_truth``, ``extra_info``, ``data_source``."""
    rows = [
        {
            "data_source": "openai/gsm8k",
            "prompt": [user(f"What is {i} + 1? Think, then answer after ####.")],
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": str(i + 1)},
            "extra_info": {"split": "train", "index": i},
        }
        for i in range(3)
    ]
    examples = load_file(write_jsonl(tmp_path / "gsm.jsonl", rows))
    assert examples[1].prompt == [user("What is 1 + 1? Think, then answer after ####.")]  # as written
    assert [e.reference for e in examples] == ["1", "2", "3"]
    assert examples[2].data_source == "openai/gsm8k"
    assert examples[2].metadata == {"ability": "math", "extra_info": {"split": "train", "index": 2}}
    assert (
        examples.reading
        == "prompt from 'prompt' (chat, as written); reference from 'reward_model.ground_truth'"
    )


def test_trl_prompt_completion_rows(tmp_path: Path) -> None:
    """TRL standard (text) and conversational (messages) prompt-completion rows."""
    text = load_file(write_jsonl(tmp_path / "std.jsonl", [{"prompt": "2 * 3 =", "completion": "6"}]))
    assert text[0].prompt == [user("2 * 3 =")] and text[0].reference == "6"  # as written by default
    tagged = load_file(tmp_path / "std.jsonl", answer_format="answer_tag")
    assert tagged[0].prompt == [user(f"2 * 3 =\n{ANSWER_TAG_INSTRUCTION}")]
    chat = [{"prompt": [user("2 * 4 =")], "completion": [assistant("8")]}]
    (example,) = load_file(write_jsonl(tmp_path / "conv.jsonl", chat))
    assert example.prompt == [user("2 * 4 =")] and example.reference == "8"
    assert example.metadata == {}


def test_a_chat_ending_with_an_assistant_turn_never_keeps_it(tmp_path: Path) -> None:
    """TRL conversational ``messages`` (an SFT-style row): the final assistant turn is the reference,
    cut from the prompt; with an answer column it is still cut, and the column is the reference."""
    table = pa.table(
        {
            "messages": [
                [{"role": "system", "content": "Be brief."}, user("Capital of France?"), assistant("Paris")],
                [user("Say hi"), assistant("hi"), user("Again"), assistant("hi again")],
            ]
        }
    )
    pq.write_table(table, tmp_path / "sft.parquet")
    examples = load_file(tmp_path / "sft.parquet")
    assert examples[0].prompt == [{"role": "system", "content": "Be brief."}, user("Capital of France?")]
    assert examples[1].prompt == [user("Say hi"), assistant("hi"), user("Again")]
    assert [e.reference for e in examples] == ["Paris", "hi again"]
    assert (
        examples.reading
        == "prompt from 'messages' (chat, as written); reference from the chat's final assistant turn"
    )
    rows = [{"messages": [user("1 + 1?"), assistant("It is 2.")], "answer": "2"}]
    (example,) = load_file(write_jsonl(tmp_path / "both.jsonl", rows))
    assert example.prompt == [user("1 + 1?")] and example.reference == "2"
    # the trailing turn is cut from a configured chat column too
    (example,) = load_file(
        write_jsonl(tmp_path / "conv.jsonl", [{"chat": [user("q"), assistant("a")]}]), messages_key="chat"
    )
    assert example.prompt == [user("q")] and example.reference == "a"


def test_dotted_answer_key_and_chat_in_the_question_column(tmp_path: Path) -> None:
    rows = [{"q": [user("x?")], "meta": {"gold": 7}}]
    (example,) = load_file(write_jsonl(tmp_path / "d.jsonl", rows), question_key="q", answer_key="meta.gold")
    assert example.prompt == [user("x?")] and example.reference == "7"


def test_column_errors_name_the_config_key(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "m.jsonl", [{"problem": "1+1", "solution": "2"}])
    with pytest.raises(RlvrError) as info:
        load_file(path)
    message = str(info.value)
    assert "m.jsonl line 1" in message and "'problem'" in message and "data.question_key" in message
    with pytest.raises(
        RlvrError,
        match=r"no answer column 'answer' or 'reward_model.ground_truth' or 'completion'.*data.answer_key",
    ):
        load_file(path, question_key="problem")
    # a key the user chose is not replaced by a convention column
    path = write_jsonl(tmp_path / "n.jsonl", [{"prompt": "1+1", "answer": "2"}])
    with pytest.raises(RlvrError, match=r"no question column 'problem'.*data.question_key"):
        load_file(path, question_key="problem")
    path = write_jsonl(tmp_path / "e.jsonl", [{"messages": [user("q"), assistant("  ")]}])
    with pytest.raises(RlvrError, match="final assistant turn in column 'messages' is empty"):
        load_file(path)


def test_a_data_path_alone_trains_on_the_file(tmp_path: Path) -> None:
    rows = [{"prompt": [user(f"{i} + {i} =")], "completion": [assistant(str(2 * i))]} for i in range(5)]
    path = write_jsonl(tmp_path / "doubles.jsonl", rows)
    cfg = load_config(None, [f"data.path={path}", "data.eval_size=1"])
    data = load_datasets(cfg.data)
    assert cfg.data.source == "file" and len(data.train) == 4 and len(data.held_out) == 1
    assert all(len(e.prompt) == 1 for e in data.train)  # no chain_sum demonstration
    assert data.reading == "prompt from 'prompt' (chat, as written); reference from 'completion'"
