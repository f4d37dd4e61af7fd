"""Build the training and held-out examples a run config asks for."""

from __future__ import annotations

from dataclasses import dataclass

from rlvr.config.schema import DataConfig
from rlvr.data.env_source import load_env_examples
from rlvr.data.example import Example
from rlvr.data.file_source import load_file
from rlvr.data.hf_source import load_hf_dataset
from rlvr.data.prompts import demonstration_turns, insert_demonstrations
from rlvr.data.reasoning_gym_source import load_reasoning_gym
from rlvr.data.split import drop_overlap, split_train_eval
from rlvr.errors import RlvrError


@dataclass
class Datasets:
    """The training and held-out examples, and how a file's or dataset's rows were read
    (``reading``: which column is the prompt and which the reference; empty for generated data)."""

    train: list[Example]
    held_out: list[Example]
    reading: str = ""


def build_datasets(cfg: DataConfig) -> tuple[list[Example], list[Example]]:
    """(train, eval) examples; eval is disjoint from train by question text."""
    data = load_datasets(cfg)
    return data.train, data.held_out


def load_datasets(cfg: DataConfig) -> Datasets:
    """:func:`build_datasets`, with how the rows were read (what the run's header prints)."""
    data = _load(cfg)
    if cfg.few_shot:
        turns = demonstration_turns(cfg.few_shot, cfg.answer_format)
        for example in (*data.train, *data.held_out):
            example.prompt = insert_demonstrations(example.prompt, turns)
    return data


def _load(cfg: DataConfig) -> Datasets:
    common = {"system_prompt": cfg.system_prompt, "answer_format": cfg.answer_format}
    if cfg.source == "env":
        train = load_env_examples(cfg.task, cfg.train_size, cfg.seed, "train", dict(cfg.task_config))
        held_out = load_env_examples(cfg.task, cfg.eval_size, cfg.seed + 1, "eval", dict(cfg.task_config))
        return Datasets(train, held_out)
    if cfg.source == "reasoning_gym":
        # Two seeds, two generators: the held-out set never depends on train_size.
        train = load_reasoning_gym(cfg.task, cfg.train_size, cfg.seed, cfg.task_config, **common)
        held_out = (
            load_reasoning_gym(cfg.task, cfg.eval_size, cfg.seed + 1_000_003, cfg.task_config, **common)
            if cfg.eval_size
            else []
        )
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
    if cfg.source == "file":
        examples = load_file(cfg.path, **mapping)
    else:
        examples = load_hf_dataset(cfg.path, split=cfg.split, **mapping)
    if cfg.eval_size >= len(examples):
        raise RlvrError(
            f"data.eval_size={cfg.eval_size} leaves no training examples: {cfg.path} has {len(examples)} rows"
        )
    train, held_out = split_train_eval(examples, cfg.eval_size, cfg.seed)
    return Datasets(train, held_out, examples.reading)
