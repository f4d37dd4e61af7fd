"""Train and held-out games that share neither a seed nor a game.

A game's example carries only a seed (``metadata["seed"]``); the environment draws its board or
secret from it. Disjoint seeds are not enough for a held-out set: a small game has few distinct
boards (a 4 × 4 lake with 3 holes has a few hundred), so 400 training seeds would cover most of
them. Each game therefore assigns every board or secret to one split once and for all (a fixed
fifth of them are held out) and :func:`split_seeds` keeps only the seeds whose game falls in the
asked split: even seeds for training, odd ones for the held-out set.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from rlvr.data.example import Example


def split_seeds(game: str, count: int, seed: int, split: str, held_out: Callable[[int], bool]) -> list[int]:
    """``count`` seeds for ``split`` ("train" or "eval") drawn by ``seed``: even seeds whose game is
    not ``held_out`` for training, odd seeds whose game is for the held-out set. Raises ValueError
    when the split has (almost) no games, e.g. a board too small to hold any out."""
    if split not in ("train", "eval"):
        raise ValueError(f"{game}: split must be 'train' or 'eval', got {split!r}")
    rng = random.Random(f"rlvr-{game}-split:{seed}:{split}")
    seeds: list[int] = []
    for _ in range(50 * count + 1000):
        if len(seeds) == count:
            return seeds
        candidate = 2 * rng.randrange(2**30) + (split == "eval")
        if held_out(candidate) == (split == "eval"):
            seeds.append(candidate)
    if len(seeds) == count:
        return seeds
    raise ValueError(
        f"{game}: found too few {split} games among the seeds drawn; these parameters leave "
        f"(almost) no {'held-out' if split == 'eval' else 'training'} games"
    )


def seeded_examples(env: str, count: int, seed: int, split: str = "train", **config: Any) -> list[Example]:
    """``count`` episodes of an adapted environment (``textarena``, ``openenv``) told apart by their
    seed alone: training seeds even, held-out seeds odd. The environment's own game is unknown here,
    so nothing beyond the seed is held out (a small game's boards repeat across the splits)."""
    if config:
        raise ValueError(f"{env}: data.task_config takes nothing (got {sorted(config)}); see env.params")
    return [
        Example(
            id=f"{env}-{game_seed}",
            prompt=[{"role": "user", "content": "Play the game."}],
            data_source=env,
            verifier="environment",
            metadata={"env": env, "seed": game_seed},
        )
        for game_seed in split_seeds(env, count, seed, split, held_out=lambda s: s % 2 == 1)
    ]
