"""Reading the rows of a file ``rlvr reward`` scores: completions files and trajectories files.

A completions file has one completion per row with what its verifier needs (``completion``,
``answer`` or ``reference``, ``question`` or ``prompt``, optional ``id``, ``verifier``, ``group``;
every other field is metadata). A trajectories file (``rlvr collect --out``, a run's
``trajectories.jsonl``) is recognised by its rows' ``text`` and ``example_id``; its examples are
rebuilt from the config it was collected with. Every row is parsed within the input limits of
:mod:`rlvr.safe_parse`, and every error names the file and line.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlvr.data.example import Example
from rlvr.data.file_source import jsonl_lines
from rlvr.errors import RlvrError
from rlvr.rewards.registry import list_rewards

if TYPE_CHECKING:
    from rlvr.config import RunConfig

_RESERVED = {"completion", "answer", "reference", "question", "prompt", "id", "verifier", "group"}
# What marks a row of a trajectories file (rlvr.trajectory.trajectory_record) rather than a completion
TRAJECTORY_FIELDS = ("text", "example_id")


def row_field(path: Path, line: int, row: dict[str, Any], key: str, kind: type) -> Any:
    """A row's optional ``tokens`` / ``finish_reason``, checked."""
    value = row.get(key)
    if value is None:
        return None
    if not isinstance(value, kind) or isinstance(value, bool):
        raise RlvrError(f"{path.name} line {line}: '{key}' must be {kind.__name__}, got {value!r}")
    return value


def read_rows(path: Path) -> list[tuple[int, dict[str, Any]]]:
    """``(line number, row)`` of every row of a completions or trajectories file (JSONL)."""
    try:
        lines = list(jsonl_lines(path))
    except OSError as exc:
        raise RlvrError(f"{path}: cannot read the completions file: {exc.strerror or exc}") from exc
    rows = []
    for line_number, where, row in lines:
        if not isinstance(row, dict):
            raise RlvrError(f"{where}: expected an object, got {type(row).__name__}")
        rows.append((line_number, row))
    if not rows:
        raise RlvrError(f"{path}: no rows")
    return rows


def is_trajectories(path: Path, rows: list[tuple[int, dict[str, Any]]]) -> bool:
    """Whether the file holds trajectories (decided by its first row); every row must then be one,
    and in a completions file every row must have its text field ``completion``."""
    trajectories = "completion" not in rows[0][1] and all(k in rows[0][1] for k in TRAJECTORY_FIELDS)
    for line, row in rows:
        where = f"{path.name} line {line}"
        if trajectories and not (isinstance(row.get("text"), str) and "example_id" in row):
            raise RlvrError(
                f"{where}: a trajectory row needs 'text' and 'example_id', like the file's first row; "
                f"fields found: {', '.join(row) or '(none)'}"
            )
        if not trajectories and not isinstance(row.get("completion"), str):
            found = ", ".join(row) or "(none)"
            raise RlvrError(
                f"{where}: no text field 'completion'; fields found: {found} (a trajectories file of "
                "rlvr collect has 'text' and 'example_id' in every row)"
            )
    return trajectories


def trajectory_examples(path: Path, rows: list[tuple[int, dict[str, Any]]], cfg: RunConfig) -> list[Example]:
    """Each trajectory's example, rebuilt from ``cfg``'s data and found by ``example_id``."""
    from rlvr.data.from_config import build_datasets

    train, held_out = build_datasets(cfg.data)
    by_id: dict[str, Example] = {}
    clashes: set[str] = set()
    for example in (*train, *held_out):
        if example.id in by_id and by_id[example.id] != example:
            clashes.add(example.id)
        by_id.setdefault(example.id, example)
    source = cfg.data.path or cfg.data.task
    examples = []
    for line, row in rows:
        example_id = str(row["example_id"])
        where = f"{path.name} line {line}"
        if example_id in clashes:
            raise RlvrError(
                f"{where}: example id {example_id!r} names both a training and a held-out example of "
                f"{source}; give the training and held-out data distinct ids (data.id_key)"
            )
        if example_id not in by_id:
            raise RlvrError(
                f"{where}: example {example_id!r} is not in this config's data ({source}: {len(train)} "
                f"training, {len(held_out)} held-out examples); score a trajectories file with the "
                "config and overrides it was collected with"
            )
        examples.append(by_id[example_id])
    return examples


def trajectory_fields(
    path: Path, rows: list[tuple[int, dict[str, Any]]]
) -> tuple[list[str], list[int | None], list[str | None], list[list[float]] | None]:
    """Texts, sampled-token counts, finish reasons and sampling logprobs (None unless every row has
    them) of trajectory rows, as the trainer passes them to its reward pool."""
    texts: list[str] = []
    tokens: list[int | None] = []
    finish: list[str | None] = []
    logprobs: list[list[float] | None] = []
    for line, row in rows:
        segments = row.get("segments") or []
        if not isinstance(segments, list) or not all(isinstance(s, dict) for s in segments):
            raise RlvrError(f"{path.name} line {line}: 'segments' must be a list of objects")
        sampled = [s for s in segments if s.get("kind") == "sampled"]
        for s in sampled:  # the file is input: a field of the wrong type is an error naming the line
            if not isinstance(s.get("token_ids") or [], list) or not isinstance(
                s.get("logprobs") or [], list
            ):
                raise RlvrError(
                    f"{path.name} line {line}: a sampled segment's 'token_ids' and 'logprobs' must be lists"
                )
        texts.append(row["text"])
        tokens.append(sum(len(s.get("token_ids") or []) for s in sampled) if sampled else None)
        finish.append(row_field(path, line, row, "finish_reason", str))
        chosen = [lp for s in sampled for lp in (s.get("logprobs") or [])]
        logprobs.append(chosen if sampled and len(chosen) == tokens[-1] else None)
    known = [lps for lps in logprobs if lps is not None and all(isinstance(x, (int, float)) for x in lps)]
    return texts, tokens, finish, known if len(known) == len(rows) else None


def row_example(path: Path, line: int, row: dict[str, Any], task: str, rg_task: str | None = "") -> Example:
    """The example a row is scored against; ``rg_task`` (default: ``task`` unless it is a reward
    name) is the reasoning-gym task whose entry ``question`` and ``answer`` stand for."""
    where = f"{path.name} line {line}"
    reference = row.get("answer", row.get("reference"))
    if reference is not None and not isinstance(reference, str):
        reference = json.dumps(reference) if isinstance(reference, (list, dict)) else str(reference)
    question = row.get("question", row.get("prompt", ""))
    if not isinstance(question, str):
        raise RlvrError(f"{where}: 'question' must be text, got {type(question).__name__}")
    metadata = {k: v for k, v in row.items() if k not in _RESERVED}
    if "rg_entry" in metadata and not isinstance(metadata["rg_entry"], dict):
        raise RlvrError(f"{where}: 'rg_entry' must be a reasoning-gym entry object")
    if rg_task == "":
        rg_task = None if task in list_rewards() else task
    if "rg_entry" not in metadata and rg_task and reference is not None:
        metadata["rg_entry"] = {
            "question": question,
            "answer": reference,
            "metadata": {"source_dataset": rg_task},
        }
    verifier = row.get("verifier")
    if verifier is not None and not isinstance(verifier, str):
        raise RlvrError(f"{where}: column 'verifier' must be a reward name, got {type(verifier).__name__}")
    return Example(
        id=str(row.get("id", f"{path.stem}-{line}")),
        prompt=[{"role": "user", "content": question}],
        reference=reference,
        data_source=task,
        verifier=verifier if isinstance(verifier, str) else None,
        metadata=metadata,
        origin=where,
    )


def group_sizes(keys: list[Any]) -> list[int]:
    sizes: list[int] = []
    previous = object()
    for key in keys:
        marker = json.dumps(key, sort_keys=True, default=str)
        if sizes and marker == previous:
            sizes[-1] += 1
        else:
            sizes.append(1)
        previous = marker
    return sizes
