"""Training data: :class:`Example` and the sources that produce it."""

from rlvr.data.example import Example
from rlvr.data.file_source import SUPPORTED_EXTENSIONS, load_file
from rlvr.data.hf_source import load_hf_dataset
from rlvr.data.prompts import (
    ANSWER_FORMATS,
    ANSWER_TAG_INSTRUCTION,
    BOXED_INSTRUCTION,
    build_messages,
    resolve_answer_format,
)
from rlvr.data.reasoning_gym_source import list_reasoning_gym_tasks, load_reasoning_gym
from rlvr.data.split import drop_overlap, split_train_eval

__all__ = [
    "ANSWER_FORMATS",
    "ANSWER_TAG_INSTRUCTION",
    "BOXED_INSTRUCTION",
    "SUPPORTED_EXTENSIONS",
    "Example",
    "build_messages",
    "drop_overlap",
    "list_reasoning_gym_tasks",
    "load_file",
    "load_hf_dataset",
    "load_reasoning_gym",
    "resolve_answer_format",
    "split_train_eval",
]
