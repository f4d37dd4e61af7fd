"""Run outputs people read: JSONL metrics and samples, progress bars."""

from rlvr.log.progress import eval_progress, note_issues, training_progress
from rlvr.log.writers import JsonlWriter, read_jsonl, truncate_after_step

__all__ = [
    "JsonlWriter",
    "eval_progress",
    "note_issues",
    "read_jsonl",
    "training_progress",
    "truncate_after_step",
]
