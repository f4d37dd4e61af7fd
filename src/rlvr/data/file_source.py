"""Examples from local files: JSONL, JSON (a list of objects), Parquet, CSV and TSV.

Each reader yields ``(where, row)`` pairs, where ``where`` names the file and the 1-based
position a person would look for: the physical line for JSONL (blank lines count, so it matches
an editor), the item for JSON, and the data row for Parquet/CSV/TSV (the header is not counted).
CSV/TSV cells are read as text, never guessed as numbers, so an answer ``007`` stays ``007``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from rlvr.data.rows import ColumnMapping, LoadedExamples, rows_to_examples
from rlvr.errors import RlvrError
from rlvr.safe_parse import MAX_JSON_DEPTH, loads_json

Rows = Iterator[tuple[str, dict[str, Any]]]


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise RlvrError(f"{path}: not UTF-8 text ({error}).") from error


def jsonl_lines(path: Path) -> Iterator[tuple[int, str, Any]]:
    """``(line number, "name line N", value)`` for each non-empty line of a JSONL file, parsed within
    the input limits (:func:`rlvr.safe_parse.loads_json`); a line that is not JSON, or a file that
    is not UTF-8 text, is an :class:`RlvrError` naming it."""
    for line_number, line in enumerate(_read_text(path).splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path.name} line {line_number}"
        try:
            value = loads_json(line, where)
        except json.JSONDecodeError as error:
            raise RlvrError(f"{where}: not valid JSON ({error.msg} at column {error.colno}).") from error
        yield line_number, where, value


def _jsonl_rows(path: Path) -> Rows:
    for _, where, row in jsonl_lines(path):
        yield where, row


def _json_rows(path: Path) -> Rows:
    text = _read_text(path)
    if not text.strip():
        raise RlvrError(f"{path.name}: the file is empty.")
    try:
        data = loads_json(text, path.name, MAX_JSON_DEPTH + 1)  # + 1: the list holding the rows
    except json.JSONDecodeError as error:
        hint = " If it holds one object per line, name it .jsonl." if error.msg == "Extra data" else ""
        raise RlvrError(
            f"{path.name} line {error.lineno}: not valid JSON ({error.msg} at column {error.colno}).{hint}"
        ) from error
    if not isinstance(data, list):
        raise RlvrError(f"{path.name}: expected a JSON list of objects, got a {type(data).__name__}.")
    for n, row in enumerate(data, start=1):
        yield f"{path.name} row {n}", row


def _table_rows(path: Path, records: list[dict[str, Any]]) -> Rows:
    for n, row in enumerate(records, start=1):
        yield f"{path.name} data row {n}", row


def _delimited_rows(path: Path, sep: str) -> Rows:
    import pandas as pd

    try:
        frame = pd.read_csv(path, sep=sep, dtype=str, keep_default_na=False, encoding="utf-8")
    except pd.errors.EmptyDataError as error:
        raise RlvrError(f"{path.name}: the file is empty (no header, no rows).") from error
    except (pd.errors.ParserError, UnicodeDecodeError) as error:
        kind = "TSV" if sep == "\t" else "CSV"
        raise RlvrError(f"{path.name}: cannot parse as {kind}: {error}") from error
    yield from _table_rows(path, frame.to_dict(orient="records"))


def _parquet_rows(path: Path) -> Rows:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except pa.ArrowException as error:
        raise RlvrError(f"{path.name}: cannot read as Parquet: {error}") from error
    # to_pylist gives plain Python values (lists, dicts, None), which pickle cheaply and compare
    # as users expect; pandas would give numpy arrays and NaN.
    yield from _table_rows(path, table.to_pylist())


_READERS: dict[str, Callable[[Path], Rows]] = {
    ".jsonl": _jsonl_rows,
    ".json": _json_rows,
    ".parquet": _parquet_rows,
    ".csv": lambda path: _delimited_rows(path, ","),
    ".tsv": lambda path: _delimited_rows(path, "\t"),
}

SUPPORTED_EXTENSIONS = tuple(_READERS)


def checked_data_file(path: Path) -> str:
    """``path``'s extension (lower case) when it names an existing data file rlvr reads; else an
    error naming the file and what is wrong."""
    suffix = path.suffix.lower()
    if suffix not in _READERS:
        raise RlvrError(
            f"{path}: unknown data file extension {path.suffix or '(none)'!r}; "
            f"supported: {', '.join(SUPPORTED_EXTENSIONS)}."
        )
    if not path.exists():
        raise RlvrError(f"{path}: data file not found (looked in {path.resolve().parent}).")
    if not path.is_file():
        raise RlvrError(f"{path}: not a file.")
    return suffix


def load_file(
    path: str | Path,
    question_key: str = "question",
    answer_key: str | None = "answer",
    id_key: str | None = None,
    messages_key: str | None = None,
    system_prompt: str | None = None,
    answer_format: str | None = None,
    verifier: str | None = None,
    data_source: str | None = None,
) -> LoadedExamples:
    """Load every row of a data file as an :class:`Example`.

    A row's prompt is its ``question_key`` text (wrapped by ``build_messages``: a ``system_prompt``
    before it, an ``answer_format`` instruction after it only when one is given) or, when
    ``messages_key`` is set and the row has it, a full chat used as written; rows in TRL's and
    verl's forms are recognised (:mod:`rlvr.data.rows`). Columns not used for
    the prompt, answer or id go to ``metadata``. A ``verifier`` or ``data_source`` column
    overrides the defaults for its row; ``data_source`` defaults to the file name without
    extension, which is also the prefix of default ids (``f"{stem}-{i}"``, 0-based).
    """
    path = Path(path)
    suffix = checked_data_file(path)
    mapping = ColumnMapping(
        question_key=question_key,
        answer_key=answer_key,
        id_key=id_key,
        messages_key=messages_key,
        system_prompt=system_prompt,
        answer_format=answer_format,
        verifier=verifier,
        data_source=data_source or path.stem,
        base_dir=path.parent,
    )
    try:
        return rows_to_examples(_READERS[suffix](path), mapping, id_prefix=path.stem, source=path.name)
    except OSError as error:
        raise RlvrError(f"{path}: cannot read the file: {error.strerror or error}.") from error
