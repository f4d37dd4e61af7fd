"""The images of logged samples, on disk beside the logs (``<run>/images/``).

``samples.jsonl`` rows get ``images``: the PNG files, relative to the run directory, of every image
the trajectory's model saw (its prompt's, then a multi-turn environment's observations, in order);
``eval_samples.jsonl`` rows those of their example's prompt. A file is named by a hash of its PNG
bytes, so an image seen many times (a board, an example's picture) is written once, and no name
comes from input data. ``rlvr report`` shows them next to the completions.
"""

from __future__ import annotations

import hashlib
import io
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from rlvr.vision.prompt import vision_of

IMAGE_DIR = "images"


def trajectory_pictures(trajectory: Any) -> list[Any]:
    """The images a trajectory's model saw, in order (prompt, then observations); [] when unknown."""
    pictures = []
    for part in (trajectory.prompt_ids, trajectory.response_vision):
        vision = vision_of(part)
        if vision is not None:
            pictures += getattr(vision, "pictures", None) or []
    return pictures


class ImageLog:
    """Writes the images logged rows name, once each."""

    def __init__(self, run_dir: Path, examples: Iterable[Any]) -> None:
        self.run_dir = run_dir
        self.examples = {e.id: e for e in examples if getattr(e, "images", None)}
        self.of_example: dict[str, list[str]] = {}
        self.written: set[str] = set()

    def _save(self, image: Any) -> str:
        out = io.BytesIO()
        image.save(out, "PNG")
        data = out.getvalue()
        relative = f"{IMAGE_DIR}/{hashlib.sha256(data).hexdigest()[:16]}.png"
        if relative not in self.written:
            (self.run_dir / IMAGE_DIR).mkdir(exist_ok=True)
            if not (self.run_dir / relative).exists():
                (self.run_dir / relative).write_bytes(data)
            self.written.add(relative)
        return relative

    def annotate(self, record: dict[str, Any], trajectory: Any = None) -> dict[str, Any]:
        """``record`` with the paths of its images: ``trajectory``'s when given and known, else
        its example's prompt images (unchanged when there are none)."""
        pictures = trajectory_pictures(trajectory) if trajectory is not None else []
        if pictures:
            return {**record, "images": [self._save(p) for p in pictures]}
        example = self.examples.get(record.get("example_id", record.get("id")))
        if example is None:
            return record
        if example.id not in self.of_example:
            self.of_example[example.id] = [self._save(p) for p in example.images]
        return {**record, "images": self.of_example[example.id]}
