"""The prompt images of logged samples, on disk beside the logs (``<run>/images/``).

``samples.jsonl`` and ``eval_samples.jsonl`` rows of an example with images get ``images``: the
PNG files' paths relative to the run directory, written once per example. File names are a hash of
the example id (ids come from data rows: never a path). ``rlvr report`` shows them next to the
completions.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

IMAGE_DIR = "images"


class ImageLog:
    """Writes the images of ``examples`` (those that have any) when a logged row first names one."""

    def __init__(self, run_dir: Path, examples: Iterable[Any]) -> None:
        self.run_dir = run_dir
        self.examples = {e.id: e for e in examples if getattr(e, "images", None)}
        self.written: dict[str, list[str]] = {}

    def annotate(self, record: dict[str, Any]) -> dict[str, Any]:
        """``record`` with its example's image paths (unchanged when the example has none)."""
        example = self.examples.get(record.get("example_id", record.get("id")))
        if example is None:
            return record
        if example.id not in self.written:
            stem = hashlib.sha256(example.id.encode()).hexdigest()[:16]
            (self.run_dir / IMAGE_DIR).mkdir(exist_ok=True)
            paths = []
            for i, image in enumerate(example.images):
                relative = f"{IMAGE_DIR}/{stem}-{i}.png"
                if not (self.run_dir / relative).exists():
                    image.save(self.run_dir / relative, "PNG")
                paths.append(relative)
            self.written[example.id] = paths
        return {**record, "images": self.written[example.id]}
