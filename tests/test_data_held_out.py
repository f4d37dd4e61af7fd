"""Held-out data from an eval source (a file, an HF dataset's test split) or a share of the training
data that fits it; and a user's prompts used as written, with the run header showing exactly what the
model is given (issue 26)."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from rlvr.config import load_config
from rlvr.data import ANSWER_TAG_INSTRUCTION
from rlvr.data.from_config import load_datasets
from rlvr.errors import RlvrError
from rlvr.train.loop.header import run_header


def word_problems(n: int, start: int = 0) -> list[dict[str, Any]]:
    return [
        {
            "question": f"Sam has {i} marbles and finds {i + 2} more. How many marbles does Sam have now?",
            "answer": str(2 * i + 2),
        }
        for i in range(start, start + n)
    ]


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def header_of(overrides: list[str]) -> tuple[str, Any]:
    """The run header as a run prints it (whitespace collapsed), and the run's data."""
    cfg = load_config(None, overrides)
    data = load_datasets(cfg.data)
    console = Console(file=io.StringIO(), width=10_000, color_system=None)
    console.print(run_header(cfg, data), highlight=False)
    return " ".join(console.file.getvalue().split()), data


# ------------------------------------------------------------------------------ held-out data


def test_a_small_file_holds_out_a_share_that_fits_it(tmp_path: Path) -> None:
    """No data.eval_size: 1 row in 10 (at most 200) is held out, where the old default of 200 refused
    any file of 200 rows or fewer; an explicit eval_size that leaves nothing to train on is an error."""
    path = write_jsonl(tmp_path / "marbles.jsonl", word_problems(30))
    header, data = header_of([f"data.path={path}"])
    assert (len(data.train), len(data.held_out)) == (27, 3)
    assert f"file {path}: 27 training, 3 held-out rows" in header
    assert "on 3 held-out from the training data: 3 of its 30 rows" in header
    assert {e.question for e in data.train}.isdisjoint(e.question for e in data.held_out)

    tiny = write_jsonl(tmp_path / "tiny.jsonl", word_problems(8))
    header, data = header_of([f"data.path={tiny}"])
    assert (len(data.train), len(data.held_out)) == (8, 0)
    assert "eval none: 8 rows are too few to hold out 1 in 10" in header

    _, data = header_of([f"data.path={path}", "data.eval_size=5"])
    assert (len(data.train), len(data.held_out)) == (25, 5)
    with pytest.raises(
        RlvrError, match=r"data.eval_size=30 leaves no training.*marbles.jsonl has 30 rows.*eval_path"
    ):
        header_of([f"data.path={path}", "data.eval_size=30"])


def test_an_eval_file_is_held_out_whole_and_the_training_file_is_not_split(tmp_path: Path) -> None:
    train = write_jsonl(tmp_path / "train.jsonl", word_problems(20))
    # the held-out file repeats one training question: that row is kept out of training
    held = write_jsonl(tmp_path / "test.jsonl", word_problems(5, start=19))
    header, data = header_of([f"data.path={train}", f"data.eval_path={held}"])
    assert (len(data.train), len(data.held_out)) == (19, 5)
    assert [e.id for e in data.held_out] == [f"test-{i}" for i in range(5)]
    assert f"from file {held} (data.eval_path): all 5 rows" in header
    assert "1 training rows that repeat a held-out question are left out of training" in header

    _, data = header_of([f"data.path={train}", f"data.eval_path={held}", "data.eval_size=3"])
    assert len(data.held_out) == 3 and all(e.id.startswith("test-") for e in data.held_out)
    repeated = "test-0" in {e.id for e in data.held_out}
    assert len(data.train) == (19 if repeated else 20)  # only a repeat of a held-out question leaves
    with pytest.raises(
        RlvrError, match=r"data.eval_size=6 is more than the 5 held-out rows of file .*test.jsonl"
    ):
        header_of([f"data.path={train}", f"data.eval_path={held}", "data.eval_size=6"])


def test_an_hf_datasets_test_split_is_held_out(tmp_path: Path) -> None:
    datasets = pytest.importorskip("datasets")
    table = datasets.Dataset.from_list
    both = tmp_path / "marbles"
    datasets.DatasetDict(
        {
            "train": table(word_problems(12)),
            "validation": table(word_problems(2, 50)),
            "test": table(word_problems(4, 20)),
        }
    ).save_to_disk(str(both))
    header, data = header_of([f"data.path={both}"])
    assert (len(data.train), len(data.held_out)) == (12, 4)  # the whole training split trains
    assert [e.id for e in data.held_out] == [f"marbles-test-{i}" for i in range(4)]
    assert f"from HF dataset {both} [test] (the dataset's own; data.eval_split unset): all 4 rows" in header

    _, data = header_of([f"data.path={both}", "data.eval_split=validation"])
    assert [e.id for e in data.held_out] == ["marbles-validation-0", "marbles-validation-1"]
    with pytest.raises(RlvrError, match=r"no split 'dev'; available splits: train, validation, test"):
        header_of([f"data.path={both}", "data.eval_split=dev"])

    only_train = tmp_path / "only_train"
    datasets.DatasetDict({"train": table(word_problems(20))}).save_to_disk(str(only_train))
    _, data = header_of([f"data.path={only_train}"])
    assert (len(data.train), len(data.held_out)) == (18, 2)  # no test split: 1 row in 10

    # a separate held-out dataset saved as one split is held out whole
    held = tmp_path / "held"
    table(word_problems(3, 40)).save_to_disk(str(held))
    header, data = header_of([f"data.path={only_train}", f"data.eval_path={held}"])
    assert (len(data.train), len(data.held_out)) == (20, 3)
    assert f"from HF dataset {held} (data.eval_path): all 3 rows" in header


@pytest.mark.parametrize(
    ("overrides", "needle"),
    [
        (["data.eval_path=held.jsonl"], "data.eval_path applies to files and HF datasets.*reasoning_gym"),
        (["data.source=env", "data.task=wordle", "data.eval_split=test"], "data.eval_split applies to files"),
        (
            ["data.path=train.jsonl", "data.eval_split=test"],
            "data.eval_split=test names a split of an HF dataset",
        ),
    ],
)
def test_eval_settings_a_source_cannot_use_are_refused(overrides: list[str], needle: str) -> None:
    with pytest.raises(RlvrError, match=needle):
        load_config(None, overrides)


def test_generated_data_keeps_its_200_held_out_problems() -> None:
    assert load_config().data.eval_size == 200
    assert load_config(None, ["data.task=basic_arithmetic"]).data.eval_size == 200
    assert load_config(None, ["data.path=x.jsonl"]).data.eval_size is None  # left to the data


# ---------------------------------------------------------------------------- prompts as given


def test_a_users_prompts_are_used_as_written_and_the_header_shows_them(tmp_path: Path) -> None:
    """A plain-text question gets no answer-tag instruction unless the config asks; a row's own system
    message is kept and named as such; the header prints the first prompt's messages as given."""
    tutor = {"role": "system", "content": "You are a careful maths tutor."}
    chat = {"messages": [tutor, {"role": "user", "content": "Sam has 3 marbles and finds 4. How many?"}]}
    path = write_jsonl(tmp_path / "chat.jsonl", [{**chat, "answer": "7"}, *word_problems(9)])
    held = write_jsonl(tmp_path / "held.jsonl", word_problems(2, start=30))
    overrides = [f"data.path={path}", f"data.eval_path={held}", "data.system_prompt=Be brief."]
    header, data = header_of(overrides)
    first, *plain = data.train
    assert first.prompt == chat["messages"]  # its own system message, not data.system_prompt
    assert plain[0].prompt == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": word_problems(1)[0]["question"]},  # no instruction appended
    ]
    assert "prompt system: the row's own; no demonstrations; no answer-format instruction" in header
    assert (
        "first system: 'You are a careful maths tutor.' user: 'Sam has 3 marbles and finds 4. How many?'"
        in header
    )
    assert "rewards" in header and ANSWER_TAG_INSTRUCTION not in header

    header, data = header_of([*overrides, "data.answer_format=answer_tag"])  # asked for: appended
    assert data.train[0].prompt == chat["messages"]  # a chat is still used as written
    assert all(e.question.endswith(f"have now?\n{ANSWER_TAG_INSTRUCTION}") for e in data.train[1:])

    plain_first = write_jsonl(tmp_path / "plain.jsonl", word_problems(3))
    header, _ = header_of(
        [f"data.path={plain_first}", f"data.eval_path={held}", "data.system_prompt=Be brief."]
    )
    assert (
        "prompt system: data.system_prompt" in header
        and "first system: 'Be brief.' user: 'Sam has 0" in header
    )
    header, _ = header_of([f"data.path={plain_first}", f"data.eval_path={held}", "data.answer_format=boxed"])
    assert "prompt system: none (the chat template's default, if it has one)" in header
    assert "answer-format instruction appended (data.answer_format=boxed)" in header
    assert "have now?\\nPut your final answer within \\\\boxed{}.'" in header


def test_the_default_reward_for_a_file_reads_answers_without_tags(tmp_path: Path) -> None:
    """With no answer-format instruction the file's default reward (verifier → math, extract auto)
    still reads a plain final answer."""
    from rlvr.rewards.registry import get_reward

    path = write_jsonl(tmp_path / "marbles.jsonl", word_problems(10))
    cfg = load_config(None, [f"data.path={path}", "data.eval_size=1"])
    assert [(f.name, f.params) for f in cfg.rewards.functions] == [("verifier", {"default": "math"})]
    example = load_datasets(cfg.data).train[0]  # Sam has 0 (or more) marbles ...
    reward = get_reward("verifier")
    right = example.reference
    assert reward(f"Sam then has {right} marbles.\nAnswer: {right}", example, default="math") == 1.0
    assert reward(f"So the total is \\boxed{{{right}}}.", example, default="math") == 1.0
    assert reward("He has 1000 marbles.", example, default="math") == 0.0
