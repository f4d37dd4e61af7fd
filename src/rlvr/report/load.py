"""Reading run directories for ``rlvr report``: every row checked, every problem named by file and line.

A run directory holds ``metrics.jsonl`` (required: one row per training step and per evaluation),
and optionally ``samples.jsonl`` (training completions), ``eval_samples.jsonl`` (held-out greedy
completions) and ``config.yaml``. Rows are read as the trainer writes them (``rlvr.log.writers``);
keys a report does not know are kept for the generic charts, keys it reads must have the right type.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from rlvr.errors import RlvrError
from rlvr.safe_parse import load_yaml, loads_json

# key -> (check, what it should be) for the keys a report reads; others pass through untouched
_NUMBER = (lambda v: v is None or (isinstance(v, (int, float)) and not isinstance(v, bool)), "a number")
_STRING = (lambda v: v is None or isinstance(v, str), "a string")
_MAPPING = (lambda v: v is None or isinstance(v, dict), "an object")
_STRINGS = (lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v), "a list of strings")
_NUMBERS = (
    lambda v: (
        isinstance(v, list)
        and all(x is None or (isinstance(x, (int, float)) and not isinstance(x, bool)) for x in v)
    ),
    "a list of numbers",
)
SAMPLE_KEYS = {
    "step": _NUMBER,
    "prompt": _STRING,
    "question": _STRING,
    "completion": _STRING,
    "reference": _STRING,
    "reward": _NUMBER,
    "score": _NUMBER,
    "advantage": _NUMBER,
    "rewards": _MAPPING,
    "errors": _MAPPING,
    "group": _STRING,
    "role": _STRING,
    "phase": _STRING,
    "token_text": _STRINGS,
    "token_logprobs": _NUMBERS,
    "token_advantages": _NUMBERS,
    "images": _STRINGS,
}


@dataclass
class Run:
    """One run directory's logs, as read (rows in file order)."""

    name: str
    path: Path
    metrics: list[dict[str, Any]]
    samples: list[dict[str, Any]] = field(default_factory=list)
    eval_samples: list[dict[str, Any]] = field(default_factory=list)
    config: dict[str, Any] | None = None
    stages: list[tuple[str, int]] = field(default_factory=list)  # a pipeline's (stage, first step)

    @property
    def train_rows(self) -> list[dict[str, Any]]:
        return [r for r in self.metrics if r.get("phase", "train") == "train"]

    @property
    def eval_rows(self) -> list[dict[str, Any]]:
        return [r for r in self.metrics if r.get("phase", "train") != "train"]


def read_rows(path: Path) -> list[dict[str, Any]]:
    """The JSON objects of a JSONL file; a line that is not one raises naming the file and line."""
    rows = []
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise RlvrError(f"{path}: cannot read ({err})") from err
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = loads_json(line, f"{path}:{number}")
        except json.JSONDecodeError as err:
            raise RlvrError(f"{path}:{number}: not valid JSON ({err.msg})") from err
        if not isinstance(row, dict):
            raise RlvrError(f"{path}:{number}: not a JSON object")
        rows.append((number, row))
    return rows


def _check_metrics(path: Path, rows: list[tuple[int, dict[str, Any]]]) -> list[dict[str, Any]]:
    checked = []
    for number, row in rows:
        step = row.get("step")
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise RlvrError(f"{path}:{number}: key 'step' must be a non-negative integer (got {step!r})")
        if not isinstance(row.get("phase", "train"), str):
            raise RlvrError(f"{path}:{number}: key 'phase' must be a string (got {row['phase']!r})")
        for key, value in row.items():
            if isinstance(value, float) and not math.isfinite(value):
                row[key] = None  # Python's json reads NaN and Infinity; a chart leaves a gap
        checked.append(row)
    return checked


def _check_samples(path: Path, rows: list[tuple[int, dict[str, Any]]]) -> list[dict[str, Any]]:
    for number, row in rows:
        for key, (ok, kind) in SAMPLE_KEYS.items():
            if key in row and not ok(row[key]):
                raise RlvrError(f"{path}:{number}: key '{key}' must be {kind} (got {row[key]!r:.60})")
        text = row.get("token_text")
        for key in ("token_logprobs", "token_advantages"):
            if text is not None and key in row and len(row[key]) != len(text):
                raise RlvrError(
                    f"{path}:{number}: key '{key}' has {len(row[key])} values for {len(text)} tokens"
                )
    return [row for _, row in rows]


def load_run(directory: str | Path) -> Run:
    """A run directory's logs; raises :class:`RlvrError` naming the directory, file or line at fault."""
    path = Path(directory)
    if not path.exists():
        raise RlvrError(f"{path}: no such run directory")
    if not path.is_dir():
        raise RlvrError(f"{path}: not a directory (give a run directory, e.g. runs/grpo-chain-sum)")
    if (path / "pipeline.json").is_file():
        return _load_pipeline(path)
    metrics_path = path / "metrics.jsonl"
    if not metrics_path.is_file():
        raise RlvrError(f"{path}: no metrics.jsonl (not a run directory, or the run has not started)")
    run = Run(path.name, path, _check_metrics(metrics_path, read_rows(metrics_path)))
    if not run.metrics:
        raise RlvrError(f"{metrics_path}: no rows yet (the run has not finished its first step or eval)")
    for name, attr in (("samples.jsonl", "samples"), ("eval_samples.jsonl", "eval_samples")):
        if (path / name).is_file():
            setattr(run, attr, _check_samples(path / name, read_rows(path / name)))
    run.config = _read_config(path)
    return run


def _read_config(path: Path) -> dict[str, Any] | None:
    """A run directory's config.yaml as a mapping (None when absent or not a mapping)."""
    config = path / "config.yaml"
    if not config.is_file():
        return None
    try:
        loaded = load_yaml(config.read_text(encoding="utf-8"), str(config))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as err:
        raise RlvrError(f"{config}: not valid YAML ({err})") from err
    return loaded if isinstance(loaded, dict) else None


def _load_pipeline(path: Path) -> Run:
    """A pipeline's stages as one run on one axis: each stage's rows with ``stage`` set and their
    steps shifted by the steps of the stages before it (``pipeline.json``'s ``start_step``)."""
    from rlvr.train.stages.pipeline import pipeline_stage_dirs

    stages = pipeline_stage_dirs(path)
    if not stages:
        raise RlvrError(f"{path}: a pipeline whose stages have not started yet (no stage metrics.jsonl)")
    merged = Run(path.name, path, [])
    for name, kind, directory, start in stages:
        stage = load_run(directory)
        merged.stages.append((f"{name} ({kind})", start))
        for attr in ("metrics", "samples", "eval_samples"):
            rows = getattr(merged, attr)
            for row in getattr(stage, attr):
                step = row.get("step")
                shifted = step + start if isinstance(step, (int, float)) else step
                rows.append({**row, "step": shifted, "stage": f"{name} ({kind})"})
    merged.config = _read_config(path)
    return merged


def load_runs(directories: list[str | Path]) -> list[Run]:
    """Each directory's run; runs with the same directory name are told apart by their parent."""
    if not directories:
        raise RlvrError("rlvr report needs at least one run directory")
    runs = [load_run(d) for d in directories]
    names = [r.name for r in runs]
    for run in runs:
        if names.count(run.name) > 1:
            run.name = f"{run.path.parent.name}/{run.path.name}"
    if len({r.name for r in runs}) < len(runs):  # the same directory twice
        for i, run in enumerate(runs):
            run.name = f"{run.name} ({i + 1})"
    return runs
