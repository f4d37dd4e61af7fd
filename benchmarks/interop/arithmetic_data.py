"""The tinker-cookbook's arithmetic task as rlvr data files, and the held-out problems both sides use.

The cookbook's ``ArithmeticDataset`` draws batch ``i`` from ``RandomState`` seeded ``i``: two
integers in [0, 100] per problem, "What is x + y?". :func:`training_problems` replays those draws;
:func:`held_out` picks problems none of them drew. ``python arithmetic_data.py OUT_DIR`` writes
``train.jsonl`` (the first 100 batches' problems, in order) and ``eval.jsonl`` (the held-out ones)
for ``rlvr train`` (benchmarks/interop/arithmetic_rlvr.yaml), and ``sft.jsonl``: the training
problems as chat conversations with the right answer, for the cookbook's SFT recipe
(``chat_sl.train dataset=.../sft.jsonl``). Needs numpy only.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np


def training_draws(n_batches: int = 100, batch_size: int = 8) -> list[tuple[int, int]]:
    draws, rng = [], np.random.RandomState(None)
    for index in range(n_batches):
        rng.seed(index)
        for _ in range(batch_size):
            draws.append((int(rng.randint(0, 101)), int(rng.randint(0, 101))))
    return draws


def held_out(n: int = 200, batch_size: int = 8, seed: int = 12345) -> list[tuple[int, int]]:
    seen, rng, out = set(training_draws(100, batch_size)), np.random.RandomState(seed), []
    while len(out) < n:
        pair = (int(rng.randint(0, 101)), int(rng.randint(0, 101)))
        if pair not in seen and pair not in out:
            out.append(pair)
    return out


def _rows(pairs: list[tuple[int, int]]) -> str:
    return "".join(
        json.dumps({"question": f"What is {x} + {y}?", "answer": str(x + y)}) + "\n" for x, y in pairs
    )


if __name__ == "__main__":
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "runs/interop/arithmetic-data")
    out.mkdir(parents=True, exist_ok=True)
    (out / "train.jsonl").write_text(_rows(training_draws()))
    (out / "eval.jsonl").write_text(_rows(held_out()))
    chats = (
        {
            "messages": [
                {"role": "user", "content": f"What is {x} + {y}?"},
                {"role": "assistant", "content": str(x + y)},
            ]
        }
        for x, y in training_draws()
    )
    (out / "sft.jsonl").write_text("".join(json.dumps(chat) + "\n" for chat in chats))
    print(f"wrote {out}/train.jsonl, eval.jsonl and sft.jsonl")
