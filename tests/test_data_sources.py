"""Prompts, file sources (JSONL/JSON/CSV/TSV/Parquet) and HF datasets: content and every error."""

from __future__ import annotations

import csv
import json
import pickle
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rlvr.data import (
    ANSWER_TAG_INSTRUCTION,
    BOXED_INSTRUCTION,
    build_messages,
    load_file,
    load_hf_dataset,
)
from rlvr.errors import RlvrError


def write_jsonl(path: Path, rows: list[Any]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def error_of(path: Path, **kwargs: Any) -> str:
    with pytest.raises(RlvrError) as info:
        load_file(path, **kwargs)
    return str(info.value)


# ---------------------------------------------------------------------------------------- prompts


def test_build_messages() -> None:
    assert build_messages("What is 2+2?", "You are terse.", ANSWER_TAG_INSTRUCTION) == [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": f"What is 2+2?\n{ANSWER_TAG_INSTRUCTION}"},
    ]
    assert build_messages("Q?", None, None) == [{"role": "user", "content": "Q?"}]
    assert build_messages("Q?", "", "") == [{"role": "user", "content": "Q?"}]
    assert build_messages("Q?\n", None, "boxed")[0]["content"] == f"Q?\n{BOXED_INSTRUCTION}"
    assert build_messages("Q?", None, "none")[0]["content"] == "Q?"
    assert build_messages("Q?", None, "Answer in French.")[0]["content"] == "Q?\nAnswer in French."


# ------------------------------------------------------------------------------------ file sources


def test_jsonl_rows_become_examples(tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path / "arith.jsonl",
        [
            {"question": "1+1?", "answer": 2, "level": 1},
            {"question": "2+3?", "answer": "5", "level": 2, "tags": ["easy"]},
        ],
    )
    examples = load_file(path, system_prompt="Sys.", verifier="math", answer_format=ANSWER_TAG_INSTRUCTION)
    assert [e.id for e in examples] == ["arith-0", "arith-1"]
    assert examples[0].prompt == [
        {"role": "system", "content": "Sys."},
        {"role": "user", "content": f"1+1?\n{ANSWER_TAG_INSTRUCTION}"},
    ]
    assert [e.reference for e in examples] == ["2", "5"]
    assert [e.data_source for e in examples] == ["arith", "arith"]
    assert [e.verifier for e in examples] == ["math", "math"]
    assert examples[0].metadata == {"level": 1}
    assert examples[1].metadata == {"level": 2, "tags": ["easy"]}
    assert pickle.loads(pickle.dumps(examples)) == examples


def test_custom_keys_and_blank_lines(tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    path.write_text(
        '{"uid": "a", "problem": "P1", "solution": [1, 2]}\n\n{"uid": "b", "problem": "P2", "solution": 3}\n'
    )
    examples = load_file(
        path, question_key="problem", answer_key="solution", id_key="uid", answer_format=None
    )
    assert [e.id for e in examples] == ["a", "b"]
    assert [e.question for e in examples] == ["P1", "P2"]
    assert [e.reference for e in examples] == ["[1, 2]", "3"]  # structured answers become JSON
    assert examples[0].metadata == {}


def test_label_free_rows(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "free.jsonl", [{"question": "Write a poem."}])
    (example,) = load_file(path, answer_key=None)
    assert example.reference is None


def test_row_columns_override_verifier_and_source(tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path / "mixed.jsonl",
        [
            {"question": "q1", "answer": "1", "verifier": "reasoning_gym", "data_source": "chain_sum"},
            {"question": "q2", "answer": "2", "verifier": "", "data_source": None},
            {"question": "q3", "answer": "3"},
        ],
    )
    examples = load_file(path, verifier="math", data_source="mix")
    assert [e.verifier for e in examples] == ["reasoning_gym", "math", "math"]
    assert [e.data_source for e in examples] == ["chain_sum", "mix", "mix"]
    assert all("verifier" not in e.metadata and "data_source" not in e.metadata for e in examples)


def test_csv_reads_cells_as_text(tmp_path: Path) -> None:
    path = tmp_path / "codes.csv"
    path.write_text('question,answer,note\n"Code, please?",007,x\nNext?,1.50,\n', encoding="utf-8")
    examples = load_file(path, answer_format=None)
    assert [e.question for e in examples] == ["Code, please?", "Next?"]
    assert [e.reference for e in examples] == ["007", "1.50"]
    assert [e.metadata for e in examples] == [{"note": "x"}, {"note": ""}]


def test_tsv(tmp_path: Path) -> None:
    path = tmp_path / "t.tsv"
    path.write_text("question\tanswer\nA, B?\t4\n", encoding="utf-8")
    (example,) = load_file(path, answer_format=None)
    assert (example.question, example.reference, example.data_source) == ("A, B?", "4", "t")


def test_json_list(tmp_path: Path) -> None:
    path = tmp_path / "list.json"
    path.write_text(json.dumps([{"question": "a?", "answer": "x"}, {"question": "b?", "answer": "y"}]))
    assert [e.reference for e in load_file(path)] == ["x", "y"]


def test_parquet_with_messages_and_question_rows(tmp_path: Path) -> None:
    path = tmp_path / "chat.parquet"
    table = pa.table(
        {
            "prompt": [
                [{"role": "system", "content": "S"}, {"role": "user", "content": "chat q"}],
                [{"role": "user", "content": "only user"}],
                None,
            ],
            "question": [None, None, "plain q"],
            "answer": [1, 2, 3],
            "extra": [1.5, None, 2.5],
        }
    )
    pq.write_table(table, path)
    examples = load_file(
        path, messages_key="prompt", system_prompt="Default system.", answer_format="answer_tag"
    )
    # A full chat is used as written; only a missing system message is filled in.
    assert examples[0].prompt == [{"role": "system", "content": "S"}, {"role": "user", "content": "chat q"}]
    assert examples[1].prompt == [
        {"role": "system", "content": "Default system."},
        {"role": "user", "content": "only user"},
    ]
    # A row without messages falls back to the question column and gets the instruction.
    assert examples[2].prompt[-1] == {"role": "user", "content": f"plain q\n{ANSWER_TAG_INSTRUCTION}"}
    assert [e.reference for e in examples] == ["1", "2", "3"]
    assert [e.metadata for e in examples] == [{"extra": 1.5}, {"extra": None}, {"extra": 2.5}]
    assert pickle.loads(pickle.dumps(examples)) == examples


def test_messages_as_json_text_in_csv(tmp_path: Path) -> None:
    path = tmp_path / "m.csv"
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["messages", "answer"])
        writer.writerow([json.dumps([{"role": "user", "content": "hi, there"}]), "ok"])
    (example,) = load_file(path, messages_key="messages")
    assert example.prompt == [{"role": "user", "content": "hi, there"}]


# ------------------------------------------------------------------------------------ file errors


def test_missing_file(tmp_path: Path) -> None:
    message = error_of(tmp_path / "absent.jsonl")
    assert "absent.jsonl" in message and "not found" in message


def test_unknown_extension(tmp_path: Path) -> None:
    path = tmp_path / "data.txt"
    path.write_text("question\n")
    message = error_of(path)
    assert "data.txt" in message and "'.txt'" in message and ".jsonl" in message and ".parquet" in message


def test_directory_is_not_a_file(tmp_path: Path) -> None:
    (tmp_path / "dir.jsonl").mkdir()
    assert "not a file" in error_of(tmp_path / "dir.jsonl")


def test_malformed_json_line_names_physical_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"question": "a", "answer": "1"}\n\n{"question": "b", "answer": \n')
    message = error_of(path)
    assert "bad.jsonl line 3" in message and "not valid JSON" in message


def test_jsonl_line_that_is_not_an_object(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "list.jsonl", [{"question": "a", "answer": "1"}, [1, 2]])
    message = error_of(path)
    assert "list.jsonl line 2" in message and "list" in message


def test_json_file_errors(tmp_path: Path) -> None:
    lines = tmp_path / "lines.json"
    lines.write_text('{"question": "a", "answer": "1"}\n{"question": "b", "answer": "2"}\n')
    message = error_of(lines)
    assert "lines.json line 2" in message and ".jsonl" in message
    obj = tmp_path / "obj.json"
    obj.write_text('{"data": []}')
    assert "obj.json" in error_of(obj) and "list of objects" in error_of(obj)


def test_missing_column_lists_columns_found(tmp_path: Path) -> None:
    path = tmp_path / "math.csv"
    path.write_text("problem,solution\n1+1,2\n")
    message = error_of(path)
    assert "math.csv data row 1" in message
    assert "'question'" in message and "'problem'" in message and "'solution'" in message
    message = error_of(path, question_key="problem")
    assert "'answer'" in message and "'solution'" in message


def test_missing_column_in_one_jsonl_row(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "r.jsonl", [{"question": "a", "answer": "1"}, {"answer": "2", "q": "b"}])
    message = error_of(path)
    assert "r.jsonl line 2" in message and "'question'" in message and "'q'" in message


def test_missing_question_names_the_config_keys(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "chat.jsonl", [{"conversation": [{"role": "user", "content": "x"}]}])
    message = error_of(path, answer_key=None)
    assert "'conversation'" in message and "data.question_key" in message and "data.messages_key" in message


def test_empty_question_and_answer(tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path / "e.jsonl", [{"question": "ok", "answer": "1"}, {"question": "  ", "answer": "2"}]
    )
    message = error_of(path)
    assert "e.jsonl line 2" in message and "empty question" in message
    path = tmp_path / "e.csv"
    path.write_text("question,answer\nq1,1\nq2,1\nq3,\n")
    message = error_of(path)
    assert "e.csv data row 3" in message and "empty answer" in message


def test_empty_files(tmp_path: Path) -> None:
    for name, text in [("a.jsonl", ""), ("b.jsonl", "\n\n"), ("c.csv", ""), ("d.csv", "question,answer\n")]:
        path = tmp_path / name
        path.write_text(text)
        message = error_of(path)
        assert name in message and "empty" in message, message
    for name, text in [("e.json", ""), ("f.json", "[]")]:
        path = tmp_path / name
        path.write_text(text)
        assert name in error_of(path) and "empty" in error_of(path)
    path = tmp_path / "g.parquet"
    pq.write_table(pa.table({"question": pa.array([], pa.string())}), path)
    assert "g.parquet" in error_of(path) and "empty" in error_of(path)


def test_duplicate_ids(tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path / "dup.jsonl",
        [{"id": 1, "question": "a", "answer": "1"}, {"id": 1, "question": "b", "answer": "2"}],
    )
    message = error_of(path, id_key="id")
    assert "dup.jsonl line 2" in message and "'1'" in message and "line 1" in message


def test_bad_messages(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "m.jsonl", [{"m": "not json", "answer": "1"}])
    assert "m.jsonl line 1" in error_of(path, messages_key="m")
    path = write_jsonl(tmp_path / "n.jsonl", [{"m": [{"role": "system", "content": "s"}], "answer": "1"}])
    assert "no 'user' message" in error_of(path, messages_key="m")
    path = write_jsonl(tmp_path / "o.jsonl", [{"m": [{"role": "user"}], "answer": "1"}])
    message = error_of(path, messages_key="m")
    assert "o.jsonl line 1" in message and "message 1" in message


def test_corrupt_files(tmp_path: Path) -> None:
    path = tmp_path / "latin.jsonl"
    path.write_bytes(b'{"question": "caf\xe9", "answer": "1"}\n')
    assert "latin.jsonl" in error_of(path) and "UTF-8" in error_of(path)
    path = tmp_path / "junk.parquet"
    path.write_bytes(b"this is not parquet")
    assert "junk.parquet" in error_of(path) and "Parquet" in error_of(path)


def test_unreadable_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write_jsonl(tmp_path / "locked.jsonl", [{"question": "a", "answer": "1"}])

    def denied(self: Path, *args: Any, **kwargs: Any) -> str:
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "read_text", denied)  # chmod does not stop root, which runs CI here
    message = error_of(path)
    assert "locked.jsonl" in message and "cannot read" in message and "Permission denied" in message


# ------------------------------------------------------------------------------------ HF datasets


def test_hf_directory_of_files_picks_split(tmp_path: Path) -> None:
    pytest.importorskip("datasets")
    data = tmp_path / "mathy"
    data.mkdir()
    write_jsonl(data / "train.jsonl", [{"question": "t1", "answer": "1"}, {"question": "t2", "answer": "2"}])
    write_jsonl(data / "test.jsonl", [{"question": "e1", "answer": "9"}])
    train = load_hf_dataset(str(data), split="train", answer_format=None)
    assert [e.question for e in train] == ["t1", "t2"]
    assert [e.id for e in train] == ["mathy-train-0", "mathy-train-1"]
    (test,) = load_hf_dataset(str(data), split="test")
    assert (test.reference, test.data_source, test.id) == ("9", "mathy", "mathy-test-0")
    with pytest.raises(RlvrError) as info:
        load_hf_dataset(str(data), split="validation")
    assert "'validation'" in str(info.value) and "train" in str(info.value) and "test" in str(info.value)


def test_hf_saved_to_disk_and_row_errors(tmp_path: Path) -> None:
    datasets = pytest.importorskip("datasets")
    saved = tmp_path / "saved"
    datasets.DatasetDict(
        {"train": datasets.Dataset.from_list([{"q": "a", "a": "1"}, {"q": "", "a": "2"}])}
    ).save_to_disk(str(saved))
    with pytest.raises(RlvrError) as info:
        load_hf_dataset(str(saved), question_key="q", answer_key="a")
    assert "row 2" in str(info.value) and "empty question" in str(info.value)
    with pytest.raises(RlvrError, match="'valid'.*available splits: train"):
        load_hf_dataset(str(saved), split="valid")


def test_hf_files_with_clashing_columns(tmp_path: Path) -> None:
    pytest.importorskip("datasets")
    write_jsonl(tmp_path / "train.jsonl", [{"question": "a", "answer": "1"}])
    write_jsonl(tmp_path / "test.jsonl", [{"question": "b", "answer": "2", "level": 3}])
    with pytest.raises(RlvrError, match="(?s)could not be read.*same columns"):
        load_hf_dataset(str(tmp_path))


def test_hf_single_file_goes_through_load_file(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "one.jsonl", [{"question": "a", "answer": "1"}])
    (example,) = load_hf_dataset(str(path))
    assert example.id == "one-0"


def test_hf_missing_dataset_says_how_to_provide_files(monkeypatch: pytest.MonkeyPatch) -> None:
    datasets = pytest.importorskip("datasets")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    with pytest.raises(RlvrError) as info:
        load_hf_dataset("no-such-org/no-such-dataset")
    message = str(info.value)
    assert "'no-such-org/no-such-dataset'" in message and "local" in message and ".jsonl" in message


def test_hf_without_datasets_package(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "datasets", None)  # makes `import datasets` fail
    with pytest.raises(RlvrError, match=r"pip install 'rlvr\[datasets\]'"):
        load_hf_dataset(str(tmp_path))
