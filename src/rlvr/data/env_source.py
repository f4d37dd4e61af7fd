"""Examples made by an environment's own generator (``data.source: env``, ``data.task: <name>``).

An environment whose problems are generated (a search corpus's questions, a game's boards) registers
a generator ``(count, seed, split, **task_config) -> list[Example]`` here; its examples carry
``metadata.env`` so that they play out in that environment. The held-out split never shares a
problem with the training split: the generator guarantees it (by a split of its problem set, or by
disjoint seeds).

Built in: ``search`` (questions about a generated corpus, split by question), and the games
``frozenlake``, ``guess_number`` and ``wordle``, whose examples carry a seed (training seeds even,
held-out seeds odd) and whose boards or secrets are split too (:mod:`rlvr.envs.game_split`);
``data.task_config`` holds the game's options and travels with each example (``env_params``).
``code_functions`` is single-turn (no environment): small Python function tasks with hidden tests
for the ``code`` reward and the coder / test-writer game (:mod:`rlvr.data.code_functions`).
``vision_count``, ``vision_colour``, ``vision_position`` and ``vision_chart`` are single-turn too:
image questions drawn with Pillow (``Example.images``), answered by a number or a word that the
``exact_match`` reward checks (:mod:`rlvr.data.vision_tasks`; train and held-out scenes disjoint).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rlvr.data.example import Example
from rlvr.errors import RlvrError
from rlvr.registry import Registry

ExampleGenerator = Callable[..., list[Example]]
ENV_DATASETS: Registry[ExampleGenerator] = Registry("environment dataset")


def register_env_dataset(name: str) -> Callable[[ExampleGenerator], ExampleGenerator]:
    return ENV_DATASETS.register(name)


@register_env_dataset("search")
def _search(count: int, seed: int, split: str, **config: Any) -> list[Example]:
    from rlvr.envs.search import search_examples

    if "hops" in config:
        config["hops"] = tuple(config["hops"])
    return search_examples(count, seed, split=split, **config)


@register_env_dataset("frozenlake")
def _frozenlake(count: int, seed: int, split: str, **config: Any) -> list[Example]:
    from rlvr.envs.frozen_lake import frozenlake_examples

    return frozenlake_examples(count, seed, split, **config)


@register_env_dataset("guess_number")
def _guess_number(count: int, seed: int, split: str, **config: Any) -> list[Example]:
    from rlvr.envs.guess_number import guess_number_examples

    return guess_number_examples(count, seed, split, **config)


@register_env_dataset("wordle")
def _wordle(count: int, seed: int, split: str, **config: Any) -> list[Example]:
    from rlvr.envs.wordle import wordle_examples

    return wordle_examples(count, seed, split, **config)


@register_env_dataset("textarena")
def _textarena(count: int, seed: int, split: str, **config: Any) -> list[Example]:
    from rlvr.envs.textarena_game import textarena_examples

    return textarena_examples(count, seed, split, **config)


@register_env_dataset("openenv")
def _openenv(count: int, seed: int, split: str, **config: Any) -> list[Example]:
    from rlvr.envs.game_split import seeded_examples

    return seeded_examples("openenv", count, seed, split, **config)


@register_env_dataset("verifiers")
def _verifiers(count: int, seed: int, split: str, **config: Any) -> list[Example]:
    from rlvr.envs.verifiers_env import verifiers_examples

    return verifiers_examples(count, seed, split, **config)


@register_env_dataset("code_functions")
def _code_functions(count: int, seed: int, split: str, **config: Any) -> list[Example]:
    from rlvr.data.code_functions import code_function_examples

    if config:
        raise ValueError(f"code_functions takes no options (got {', '.join(config)})")
    return code_function_examples(count, seed, split)


@register_env_dataset("vision_count")
def _vision_count(count: int, seed: int, split: str, **config: Any) -> list[Example]:
    from rlvr.data.vision_tasks import vision_count_examples

    return vision_count_examples(count, seed, split, **config)


@register_env_dataset("vision_colour")
def _vision_colour(count: int, seed: int, split: str, **config: Any) -> list[Example]:
    from rlvr.data.vision_tasks import vision_colour_examples

    return vision_colour_examples(count, seed, split, **config)


@register_env_dataset("vision_position")
def _vision_position(count: int, seed: int, split: str, **config: Any) -> list[Example]:
    from rlvr.data.vision_tasks import vision_position_examples

    return vision_position_examples(count, seed, split, **config)


@register_env_dataset("vision_chart")
def _vision_chart(count: int, seed: int, split: str, **config: Any) -> list[Example]:
    from rlvr.data.vision_tasks import vision_chart_examples

    return vision_chart_examples(count, seed, split, **config)


def load_env_examples(task: str, count: int, seed: int, split: str, config: dict[str, Any]) -> list[Example]:
    import rlvr.envs  # noqa: F401  (the built-in environments register their generators)

    try:
        generator = ENV_DATASETS.get(task)
    except RlvrError as err:
        raise RlvrError(f"data.task: {err}") from err
    try:
        return generator(count, seed, split, **config)
    except (TypeError, ValueError) as err:
        raise RlvrError(f"data.task_config for '{task}': {err}") from err
