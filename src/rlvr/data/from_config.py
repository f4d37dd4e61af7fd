"""Build the training and held-out examples a run config asks for."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rlvr.config.schema import DataConfig
from rlvr.data.env_source import load_env_examples
from rlvr.data.example import Example
from rlvr.data.file_source import SUPPORTED_EXTENSIONS, load_file
from rlvr.data.hf_source import load_hf_dataset, load_hf_splits
from rlvr.data.prompts import demonstration_turns, insert_demonstrations
from rlvr.data.reasoning_gym_source import load_reasoning_gym
from rlvr.data.rows import LoadedExamples
from rlvr.data.split import drop_overlap, split_train_eval
from rlvr.errors import RlvrError

# Held-out problems generated when data.eval_size is not set (reasoning-gym, env); also the most a
# file or dataset without an eval source holds out of its own rows by default ...
GENERATED_EVAL_SIZE = 200
# ... which is one row in this many (10%), rounded down: a 30-row file trains on 27 and holds out 3.
DEFAULT_EVAL_FRACTION = 10


@dataclass
class Datasets:
    """The training and held-out examples, and how a file's or dataset's rows were read
    (``reading``: which column is the prompt and which the reference; empty for generated data);
    ``held_out_from`` says where the held-out examples came from (what the run's header prints)."""

    train: list[Example]
    held_out: list[Example]
    reading: str = ""
    held_out_from: str = ""


def build_datasets(cfg: DataConfig) -> tuple[list[Example], list[Example]]:
    """(train, eval) examples; eval is disjoint from train by question text."""
    data = load_datasets(cfg)
    return data.train, data.held_out


def load_datasets(cfg: DataConfig) -> Datasets:
    """:func:`build_datasets`, with how the rows were read (what the run's header prints)."""
    if cfg.sources:  # a weighted mixture: each source loaded as here, named and routed to its reward
        from rlvr.data.mixture import load_mixture

        return load_mixture(cfg)
    data = _load(cfg)
    if cfg.few_shot:
        turns = demonstration_turns(cfg.few_shot, cfg.answer_format)
        for example in (*data.train, *data.held_out):
            example.prompt = insert_demonstrations(example.prompt, turns)
    return data


def _load(cfg: DataConfig) -> Datasets:
    common = {"system_prompt": cfg.system_prompt, "answer_format": cfg.answer_format}
    generated = GENERATED_EVAL_SIZE if cfg.eval_size is None else cfg.eval_size
    if cfg.source == "env":
        train = load_env_examples(cfg.task, cfg.train_size, cfg.seed, "train", dict(cfg.task_config))
        held_out = load_env_examples(cfg.task, generated, cfg.seed + 1, "eval", dict(cfg.task_config))
        return Datasets(train, held_out)
    if cfg.source == "reasoning_gym":
        # Two seeds, two generators: the held-out set never depends on train_size.
        train = load_reasoning_gym(cfg.task, cfg.train_size, cfg.seed, cfg.task_config, **common)
        held_out = _held_out_reasoning_gym(cfg, generated, common) if generated else []
        train, _ = drop_overlap(train, held_out)
        if not train:
            raise RlvrError(f"data: every training example of '{cfg.task}' also appears in the eval set")
        return Datasets(train, held_out)
    mapping = {
        "question_key": cfg.question_key,
        "answer_key": cfg.answer_key,
        "id_key": cfg.id_key,
        "messages_key": cfg.messages_key,
        **common,
    }
    what = f"file {cfg.path}" if cfg.source == "file" else f"HF dataset {cfg.path}"
    held_out: LoadedExamples | None = None
    origin = ""
    if cfg.source == "file":
        examples = load_file(cfg.path, **mapping)
    elif cfg.eval_path:
        examples = load_hf_dataset(cfg.path, split=cfg.split, **mapping)
    else:  # its own test (or validation) split, when it has one
        examples, held_out, split = load_hf_splits(cfg.path, cfg.split, cfg.eval_split, **mapping)
        why = "data.eval_split" if cfg.eval_split else "the dataset's own; data.eval_split unset"
        origin = f"{what} [{split}] ({why})"
    if cfg.eval_path and Path(cfg.eval_path).suffix.lower() in SUPPORTED_EXTENSIONS:
        held_out = load_file(cfg.eval_path, **mapping)
        origin = f"file {cfg.eval_path} (data.eval_path)"
    elif cfg.eval_path:
        _, held_out, split = load_hf_splits(
            cfg.eval_path, eval_split=cfg.eval_split, held_out_only=True, **mapping
        )
        origin = f"HF dataset {cfg.eval_path}" + (f" [{split}]" if split else "") + " (data.eval_path)"
    if held_out is None:
        return _split_rows(cfg, examples, what)
    return _hold_out_source(cfg, examples, held_out, origin)


def _held_out_reasoning_gym(cfg: DataConfig, size: int, common: dict) -> list[Example]:
    """The generated held-out problems, from ``data.eval_task_config`` when set (e.g. harder ones)."""
    if cfg.eval_task_config is None:
        return load_reasoning_gym(cfg.task, size, cfg.seed + 1_000_003, cfg.task_config, **common)
    try:
        return load_reasoning_gym(cfg.task, size, cfg.seed + 1_000_003, cfg.eval_task_config, **common)
    except RlvrError as err:
        raise RlvrError(f"data.eval_task_config: {err}") from err


def _split_rows(cfg: DataConfig, examples: LoadedExamples, what: str) -> Datasets:
    """No eval source: hold out ``data.eval_size`` of the training rows, by default 10% (at most 200)."""
    rows = len(examples)
    if cfg.eval_size is None:
        size = min(GENERATED_EVAL_SIZE, rows // DEFAULT_EVAL_FRACTION)
        origin = (
            f"the training data: {size} of its {rows} rows, drawn by data.seed (data.eval_size unset: "
            f"1 row in {DEFAULT_EVAL_FRACTION}, at most {GENERATED_EVAL_SIZE})"
            if size
            else f"{rows} rows are too few to hold out 1 in {DEFAULT_EVAL_FRACTION} "
            "(give held-out rows in data.eval_path, or set data.eval_size)"
        )
    elif cfg.eval_size >= rows:
        raise RlvrError(
            f"data.eval_size={cfg.eval_size} leaves no training examples: {what} has {rows} rows. Lower "
            f"data.eval_size, leave it out (1 row in {DEFAULT_EVAL_FRACTION} is held out, at most "
            f"{GENERATED_EVAL_SIZE}), or give held-out rows of their own in data.eval_path"
        )
    else:
        size = cfg.eval_size
        origin = f"the training data: {size} of its {rows} rows, drawn by data.seed (data.eval_size)"
    train, held_out = split_train_eval(examples, size, cfg.seed)
    return Datasets(train, held_out, examples.reading, origin)


def _hold_out_source(
    cfg: DataConfig, examples: LoadedExamples, held_out: LoadedExamples, origin: str
) -> Datasets:
    """An eval source: all of it (or ``data.eval_size`` of it) is held out; the training data is not
    split, only rid of rows whose question is also held out."""
    rows = len(held_out)
    if cfg.eval_size is None:
        chosen: list[Example] = list(held_out)
        origin += f": all {rows} rows"
    elif cfg.eval_size > rows:
        raise RlvrError(
            f"data.eval_size={cfg.eval_size} is more than the {rows} held-out rows of {origin}: lower "
            "data.eval_size, or leave it out to hold out all of them"
        )
    else:
        chosen = split_train_eval(held_out, cfg.eval_size, cfg.seed)[1]
        origin += f": {cfg.eval_size} of its {rows} rows, drawn by data.seed (data.eval_size)"
    train, dropped = drop_overlap(examples, chosen)
    if not train:
        raise RlvrError(f"data: every training row of {cfg.path} is also held out ({origin})")
    if dropped:
        origin += f"; {dropped} training rows that repeat a held-out question are left out of training"
    reading = examples.reading
    if held_out.reading != reading:
        reading += f"; held-out rows: {held_out.reading}"
    return Datasets(train, chosen, reading, origin)
