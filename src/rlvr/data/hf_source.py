"""Examples from Hugging Face ``datasets``: a hub id already in the local cache, a directory of
data files, or a directory written by ``Dataset.save_to_disk``.

A Hub id downloads as it does with ``datasets`` unless downloads are off (:mod:`rlvr.hub`); a
"not found" error says which applies, how to allow downloads, and how to provide local files.
``datasets`` is an optional extra and is imported only when this loader is used.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rlvr.data.file_source import SUPPORTED_EXTENSIONS, load_file
from rlvr.data.rows import ColumnMapping, LoadedExamples, rows_to_examples
from rlvr.errors import RlvrError

# Files that mark a directory written by save_to_disk (Dataset / DatasetDict respectively).
_SAVED_MARKERS = ("state.json", "dataset_dict.json")
# The splits held out when the config names none, in this order (rlvr.data.from_config).
EVAL_SPLITS = ("test", "validation")


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
    from rlvr.hub import downloads_hint

    hint = "" if Path(name_or_path).exists() else f" {downloads_hint(name_or_path, 'dataset')}."
    return (
        f"Hugging Face dataset {name_or_path!r} could not be loaded: {str(error).rstrip('. ')}.{hint} "
        "Or point to a local directory of data files, a directory written by `Dataset.save_to_disk`, "
        f"or a single {'/'.join(SUPPORTED_EXTENSIONS)} file."
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


def _open(name_or_path: str, subset: str | None) -> Any:
    """Every split: a ``DatasetDict``, or one ``Dataset`` (``save_to_disk`` of a single split)."""
    datasets = _import_datasets()
    path = Path(name_or_path)
    if path.is_dir() and any((path / marker).exists() for marker in _SAVED_MARKERS):
        try:
            return datasets.load_from_disk(str(path))
        except (OSError, ValueError) as error:
            raise RlvrError(_not_found_message(name_or_path, error)) from error
    if not path.exists():  # a Hub id: downloads as in datasets, unless they are off (rlvr.hub)
        from rlvr.hub import hub_offline

        hub_offline()
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
    return loaded


def load_hf_dataset(
    name_or_path: str,
    split: str = "train",
    question_key: str = "question",
    answer_key: str | None = "answer",
    id_key: str | None = None,
    messages_key: str | None = None,
    system_prompt: str | None = None,
    answer_format: str | None = None,
    verifier: str | None = None,
    data_source: str | None = None,
    subset: str | None = None,
) -> LoadedExamples:
    """Load one split of a Hugging Face dataset as Examples, with the same column mapping as
    :func:`rlvr.data.load_file` (prompts as written: no answer-format instruction unless given).

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
    mapping = ColumnMapping(
        question_key=question_key,
        answer_key=answer_key,
        id_key=id_key,
        messages_key=messages_key,
        system_prompt=system_prompt,
        answer_format=answer_format,
        verifier=verifier,
        data_source=data_source or path.name or str(name_or_path),
    )
    loaded = _open(str(name_or_path), subset)
    return _examples(_pick_split(loaded, split, str(name_or_path)), str(name_or_path), split, mapping)


def _examples(dataset: Any, name_or_path: str, split: str, mapping: ColumnMapping) -> LoadedExamples:
    label = f"{name_or_path} [{split}]"
    rows = ((f"{label} row {n}", row) for n, row in enumerate(dataset, start=1))
    return rows_to_examples(rows, mapping, id_prefix=f"{mapping.data_source}-{split}", source=label)


def load_hf_splits(
    name_or_path: str,
    split: str = "train",
    eval_split: str | None = None,
    *,
    held_out_only: bool = False,
    subset: str | None = None,
    **columns: Any,
) -> tuple[LoadedExamples, LoadedExamples | None, str | None]:
    """``(training split, held-out split, name of the held-out split)`` of one dataset, loaded once.

    The held-out split is ``eval_split`` when given (an error if the dataset lacks it), else the
    dataset's ``test`` split, else its ``validation`` split (:data:`EVAL_SPLITS`), never the training
    split; ``(train, None, None)`` when there is none. ``held_out_only``: the dataset holds held-out
    data only (``data.eval_path``): the first element is empty, and a dataset of a single split (or a
    single file) is held out whole. ``columns`` are :func:`load_hf_dataset`'s column mapping.
    """
    path = Path(name_or_path)
    if path.is_file():  # a single data file has no splits
        if eval_split is not None:
            raise RlvrError(f"{name_or_path} is a data file, which has no splits: drop data.eval_split")
        examples = load_hf_dataset(name_or_path, **columns)
        return (LoadedExamples(), examples, None) if held_out_only else (examples, None, None)
    source = columns.pop("data_source", None) or path.name or str(name_or_path)
    mapping = ColumnMapping(**columns, data_source=source)
    loaded = _open(str(name_or_path), subset)
    names = list(loaded.keys()) if hasattr(loaded, "keys") else None
    training = None if held_out_only else split
    train = LoadedExamples()
    if training is not None:
        train = _examples(_pick_split(loaded, split, str(name_or_path)), str(name_or_path), split, mapping)
    if eval_split is not None:
        if names is None:
            raise RlvrError(
                f"Hugging Face dataset {name_or_path!r} is a single split (written by Dataset.save_to_disk), "
                f"so data.eval_split={eval_split!r} does not apply: drop it"
            )
        if eval_split == training:
            raise RlvrError(
                f"data.eval_split={eval_split!r} is also the training split (data.split): hold out "
                "another split, or leave data.eval_split out"
            )
        chosen: str | None = eval_split
    elif names is None:  # one Dataset: held out whole when it is all held-out data
        if not held_out_only:
            return train, None, None
        return train, _examples(loaded, str(name_or_path), "all", mapping), None
    else:
        chosen = next((s for s in EVAL_SPLITS if s in names and s != training), None)
        if chosen is None and held_out_only:
            if len(names) != 1:
                raise RlvrError(
                    f"data.eval_path {name_or_path!r} has the splits {', '.join(names)} and none is "
                    f"{' or '.join(EVAL_SPLITS)}: set data.eval_split to the one to hold out"
                )
            chosen = names[0]
    if chosen is None:
        return train, None, None
    held_out = _examples(_pick_split(loaded, chosen, str(name_or_path)), str(name_or_path), chosen, mapping)
    return train, held_out, chosen
