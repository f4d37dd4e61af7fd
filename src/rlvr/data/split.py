"""Hold out evaluation examples, and make sure none of them is also trained on.

A held-out score means something only if the model never trained on those questions; random
generators (and concatenated files) can repeat a question, so :func:`drop_overlap` checks by
content, not by id.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Hashable, Sequence
from typing import TypeVar

from rlvr.data.example import Example
from rlvr.errors import RlvrError

T = TypeVar("T")


def split_train_eval(examples: Sequence[T], eval_size: int, seed: int) -> tuple[list[T], list[T]]:
    """Split into ``(train, eval)`` with ``eval_size`` examples drawn at random by ``seed``.

    The same seed and input give the same split. Both parts keep the input order, so a split
    reads like the file it came from. ``eval_size == len(examples)`` is allowed (evaluation
    only, empty train); more than that is an error rather than a silently smaller eval set.
    """
    if eval_size < 0:
        raise RlvrError(f"eval size must be 0 or more, got {eval_size}.")
    if eval_size > len(examples):
        raise RlvrError(
            f"eval size {eval_size} is larger than the dataset ({len(examples)} examples); "
            "lower the eval size or provide more data."
        )
    # A private Random: the split must not depend on, or disturb, the global random state.
    chosen = set(random.Random(seed).sample(range(len(examples)), eval_size))
    train = [e for i, e in enumerate(examples) if i not in chosen]
    held_out = [e for i, e in enumerate(examples) if i in chosen]
    return train, held_out


def _question(example: Example) -> str:
    return example.question


def drop_overlap(
    train: Sequence[T], eval_examples: Sequence[T], key: Callable[[T], Hashable] = _question
) -> tuple[list[T], int]:
    """Remove train examples whose ``key`` (by default the question text) occurs in eval.

    Returns ``(kept_train, n_removed)``; eval is never changed, so its size stays what was asked.
    """
    eval_keys = {key(e) for e in eval_examples}
    kept = [e for e in train if key(e) not in eval_keys]
    return kept, len(train) - len(kept)
