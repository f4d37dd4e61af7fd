"""Append-only JSONL files of a run: metrics.jsonl and samples.jsonl."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from rlvr.safe_parse import loads_json


def _clean(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None  # JSON has no NaN; None says "not available" honestly
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


class JsonlWriter:
    """One JSON object per line, flushed after each write so a crash loses at most one record."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._handle = open(self.path, "a", encoding="utf-8")

    def write(self, record: dict[str, Any]) -> None:
        self._handle.write(json.dumps(_clean(record), ensure_ascii=False) + "\n")
        self._handle.flush()

    def close(self) -> None:
        self._handle.close()


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    path = Path(path)
    if not path.exists():
        return []
    lines = enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
    return [loads_json(line, f"{path}:{number}") for number, line in lines if line.strip()]


def truncate_after_step(path: Path, step: int) -> None:
    """Drop records with ``step`` > ``step`` (used on resume: later steps will be redone)."""
    path = Path(path)
    if not path.exists():
        return
    kept = [r for r in read_jsonl(path) if r.get("step", -1) <= step]
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in kept), encoding="utf-8")
    tmp.replace(path)
