"""A verifier that takes its time (for benchmarks/async_vs_sync.py): it sleeps, then scores length."""

from __future__ import annotations

import time


def slow_length(completion: str, example, *, seconds: float = 0.1) -> float:
    time.sleep(seconds)
    return min(len(completion), 100) / 100
