"""Deterministic, resumable order over training examples."""

from __future__ import annotations

import random


class PromptSampler:
    """Yields example indices epoch by epoch, each epoch a fresh seeded shuffle.

    Its whole state is (epoch, position), so a checkpoint can store it and a resumed run draws
    exactly the prompts the uninterrupted run would have drawn.
    """

    def __init__(self, size: int, seed: int, epoch: int = 0, position: int = 0) -> None:
        if size < 1:
            raise ValueError("PromptSampler needs at least one example")
        self.size, self.seed, self.epoch, self.position = size, seed, epoch, position
        self._order = self._shuffle(epoch)

    def _shuffle(self, epoch: int) -> list[int]:
        order = list(range(self.size))
        random.Random(self.seed * 1_000_003 + epoch).shuffle(order)
        return order

    def take(self, count: int) -> list[int]:
        out = []
        for _ in range(count):
            if self.position >= self.size:
                self.epoch, self.position = self.epoch + 1, 0
                self._order = self._shuffle(self.epoch)
            out.append(self._order[self.position])
            self.position += 1
        return out

    def state(self) -> dict[str, int]:
        return {"epoch": self.epoch, "position": self.position}
