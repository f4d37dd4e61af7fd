"""Examples from Hugging Face ``datasets``: a hub id already in the local cache, a directory of
data files, or a directory written by ``Dataset.save_to_disk``.

Runs are offline (``HF_HUB_OFFLINE=1``), so "not found" almost always means "not downloaded";
the error says how to provide the data as local files instead. ``datasets`` is an optional extra
and is imported only when this loader is used.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rlvr.data.file_source import SUPPORTED_EXTENSIONS, load_file
from rlvr.data.prompts import ANSWER_TAG_INSTRUCTION
from rlvr.data.rows import ColumnMapping, LoadedExamples, rows_to_examples
from rlvr.errors import RlvrError

# Files that mark a directory written by save_to_disk (Dataset / DatasetDict respectively).
_SAVED_MARKERS = ("state.json", "dataset_dict.json")


def _import_datasets() -> Any:
    try:
        import datasets
    except ImportError as error:
        raise RlvrError(
            "Loading a Hugging Face dataset needs the optional `datasets` package: "
            "pip install 'rlvr[datasets]' (or give a local .jsonl/.parquet/.csv file instead)."
        ) from error
    return datasets


def _not_found_message(name_or_path: str, error: Exception) -> str:
    return (
        f"Hugging Face dataset {name_or_path!r} could not be loaded: {error} "
        "rlvr runs offline (HF_HUB_OFFLINE=1), so the data must be on this machine: download it "
        "beforehand into the Hugging Face cache, or point to a local directory of data files, a "
        "directory written by `Dataset.save_to_disk`, or a single "
        f"{'/'.join(SUPPORTED_EXTENSIONS)} file."
    )


def _pick_split(loaded: Any, split: str, name_or_path: str) -> Any:
    """Pick ``split`` from a DatasetDict, listing the available ones if it is not there."""
    if not hasattr(loaded, "keys"):  # a single Dataset (save_to_disk of one split)
        return loaded
    if split not in loaded:
        raise RlvrError(
            f"Hugging Face dataset {name_or_path!r} has no split {split!r}; "
            f"available splits: {', '.join(loaded.keys()) or '(none)'}."
        )
    return loaded[split]


def _load(name_or_path: str, split: str, subset: str | None) -> Any:
    datasets = _import_datasets()
    path = Path(name_or_path)
    if path.is_dir() and any((path / marker).exists() for marker in _SAVED_MARKERS):
        try:
            return _pick_split(datasets.load_from_disk(str(path)), split, name_or_path)
        except (OSError, ValueError) as error:
            raise RlvrError(_not_found_message(name_or_path, error)) from error
    try:
        # Load every split, then pick: this lets the error list the splits that do exist.
        loaded = datasets.load_dataset(name_or_path, subset)
    except (OSError, ValueError) as error:  # ConnectionError and DatasetNotFoundError are OSErrors
        raise RlvrError(_not_found_message(name_or_path, error)) from error
    except datasets.exceptions.DatasetGenerationError as error:
        # Found but unreadable; the useful detail (e.g. a column type clash) is in the cause.
        detail = error.__cause__ or error
        raise RlvrError(
            f"Hugging Face dataset {name_or_path!r} could not be read: {str(detail)[:1000]} "
            "(all data files of a dataset, across splits, must have the same columns)."
        ) from error
    return _pick_split(loaded, split, name_or_path)


def load_hf_dataset(
    name_or_path: str,
    split: str = "train",
    question_key: str = "question",
    answer_key: str | None = "answer",
    id_key: str | None = None,
    messages_key: str | None = None,
    system_prompt: str | None = None,
    answer_format: str | None = ANSWER_TAG_INSTRUCTION,
    verifier: str | None = None,
    data_source: str | None = None,
    subset: str | None = None,
) -> LoadedExamples:
    """Load one split of a Hugging Face dataset as Examples, with the same column mapping as
    :func:`rlvr.data.load_file`.

    ``subset`` is the dataset's configuration name (e.g. ``"main"`` for gsm8k). A single local
    data file is read by :func:`load_file` directly (``split`` does not apply to it). Default
    ids are ``f"{data_source}-{split}-{i}"``; ``data_source`` defaults to the last part of the
    name or path.
    """
    path = Path(name_or_path)
    if path.is_file():
        return load_file(
            path,
            question_key=question_key,
            answer_key=answer_key,
            id_key=id_key,
            messages_key=messages_key,
            system_prompt=system_prompt,
            answer_format=answer_format,
            verifier=verifier,
            data_source=data_source,
        )
    source = data_source or path.name or str(name_or_path)
    dataset = _load(str(name_or_path), split, subset)
    mapping = ColumnMapping(
        question_key=question_key,
        answer_key=answer_key,
        id_key=id_key,
        messages_key=messages_key,
        system_prompt=system_prompt,
        answer_format=answer_format,
        verifier=verifier,
        data_source=source,
    )
    label = f"{name_or_path} [{split}]"
    rows = ((f"{label} row {n}", row) for n, row in enumerate(dataset, start=1))
    return rows_to_examples(rows, mapping, id_prefix=f"{source}-{split}", source=label)
