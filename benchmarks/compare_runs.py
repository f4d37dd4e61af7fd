"""Do two run directories hold the same run? metrics.jsonl, samples.jsonl and eval_samples.jsonl
compared row by row, wall-clock keys (``time/*``, ``throughput/*``) left out.

Used to check that a refactor changes nothing: run the same config from the old tree and the new one
(``PYTHONPATH=<tree>/src``) and compare. On tiny-random, runs are bit-for-bit reproducible on CPU; on
SmolLM2 two runs of the *same* tree already differ at float level (MKL), so compare old with old too.

    python benchmarks/compare_runs.py runs/before runs/after
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

FILES = ("metrics.jsonl", "samples.jsonl", "eval_samples.jsonl")
WALL_CLOCK = ("time/", "throughput/")


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _timeless(row: dict) -> dict:
    return {k: v for k, v in row.items() if not k.startswith(WALL_CLOCK)}


def compare(a: Path, b: Path) -> int:
    """Print differing rows per file; return how many rows differ in all."""
    total = 0
    for name in FILES:
        left, right = _rows(a / name), _rows(b / name)
        if len(left) != len(right):
            print(f"{name}: {len(left)} rows vs {len(right)}")
            total += abs(len(left) - len(right))
        differ = 0
        for x, y in zip(left, right):
            x, y = _timeless(x), _timeless(y)
            if x != y:
                differ += 1
                keys = [k for k in {*x, *y} if x.get(k) != y.get(k)]
                print(
                    f"{name} step {x.get('step')}: "
                    + ", ".join(f"{k}: {x.get(k)!r} vs {y.get(k)!r}" for k in keys)
                )
        print(f"{name}: {len(left)} rows, {differ} differ")
        total += differ
    return total


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: compare_runs.py RUN_DIR_A RUN_DIR_B")
    sys.exit(1 if compare(Path(sys.argv[1]), Path(sys.argv[2])) else 0)
