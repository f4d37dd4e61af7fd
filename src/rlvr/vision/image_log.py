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
    """Writes the images logged rows name, once each (``samples.jsonl`` rows through
    :meth:`paths`, which the collector's records call; ``eval_samples.jsonl`` rows through
    :meth:`annotate`)."""

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

    def paths(self, trajectory: Any, example: Any) -> list[str]:
        """The image files of a training sample: every image its model saw (prompt, then a
        multi-turn environment's observations), else its example's prompt images."""
        pictures = trajectory_pictures(trajectory)
        if pictures:
            return [self._save(p) for p in pictures]
        return self._example_paths(example)

    def _example_paths(self, example: Any) -> list[str]:
        if not getattr(example, "images", None):
            return []
        if example.id not in self.of_example:
            self.of_example[example.id] = [self._save(p) for p in example.images]
        return self.of_example[example.id]

    def annotate(self, record: dict[str, Any]) -> dict[str, Any]:
        """A held-out row (``id`` names its example) with its example's image files."""
        example = self.examples.get(record.get("id"))
        paths = self._example_paths(example) if example is not None else []
        return {**record, "images": paths} if paths else record
