"""Expert demonstrations played in an environment: the SFT data of ``sft.player: optimal``.

The cold start of the SFT → RL recipes (seeds/001:395) needs conversations of the task played well.
For an environment that has a scripted expert (:meth:`rlvr.envs.base.Environment.expert_turn`:
FrozenLake's shortest path, number guessing's binary search, Wordle's minimax guess, the search
oracle that knows the example's answer), they need not come from a file: each training example of
``data.*`` is opened exactly as the RL rollout opens it (the same environment, ``env_params`` and
reset seed, so the same system prompt, example game and first observation), and the expert plays
it to the end through the environment's text interface. The conversation is a
:class:`~rlvr.data.chat_data.ChatExample` whose trained turns are the expert's moves; an example game
the opening shows stays context (``first_trained``).

Only won games are kept (a demonstration teaches what to do); how many the expert lost is printed.
The held-out examples give the held-out SFT loss (``sft/eval_loss``) the same way, on boards,
secrets and words never trained on.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rlvr.data.chat_data import ChatExample
from rlvr.envs.base import Environment, make_env
from rlvr.envs.data_params import env_params, route_env
from rlvr.errors import RlvrError

if TYPE_CHECKING:
    from rlvr.config import RunConfig
    from rlvr.data.example import Example


@dataclass
class ExpertGames:
    """The won games as chat examples, and how many were played and lost."""

    examples: list[ChatExample]
    played: int
    lost: int


def _seed_of(example: Example, fallback: int) -> int:
    seed = example.metadata.get("seed", fallback)
    return seed if isinstance(seed, int) else fallback


def play_expert(env: Environment, example: Example, index: int, max_turns: int) -> tuple[list, int, bool]:
    """``(conversation, first_trained, won)``: ``example`` opened by ``env`` as the rollout opens
    it, then played by ``env.expert_turn`` for at most ``max_turns`` moves."""
    messages = env.reset(example, random.Random(_seed_of(example, index)))
    first = len(messages)
    try:
        for _ in range(max_turns):
            text = env.expert_turn(messages)
            step = env.step(text)
            messages.append({"role": "assistant", "content": text})
            if step.done:
                break
            messages.extend(step.messages)
        won = bool(env.outcome().get("solved", 0.0))
    finally:
        env.close()
    return messages, first, won


def expert_games(cfg: RunConfig, examples: list[Example], split: str) -> ExpertGames:
    """Every one of ``examples`` played by its environment's expert (``split`` names them in errors
    and in each conversation's origin)."""
    played: list[ChatExample] = []
    lost = 0
    for index, example in enumerate(examples):
        name = route_env(example, cfg.env.name)
        if name is None:
            raise RlvrError(
                f"sft.player=optimal: {example.where} plays in no environment (set env.name, or data "
                "from an environment: data.source=env)"
            )
        env = make_env(name, env_params(example, name, cfg.env.name, cfg.env.params))
        if not env.has_expert():
            raise RlvrError(
                f"sft.player=optimal: environment '{name}' has no scripted expert to play its games ("
                "frozenlake, guess_number, wordle and search have one); give SFT a chat-data file in sft.path"
            )
        messages, first, won = play_expert(env, example, index, cfg.env.max_turns)
        if not won:
            lost += 1
            continue
        origin = f"{split} game {index} ({example.id}) played by {name}'s expert"
        played.append(ChatExample(messages, None, origin, index, first_trained=first))
    if not played:
        raise RlvrError(
            f"sft.player=optimal: the expert won none of the {len(examples)} {split} games within "
            f"env.max_turns={cfg.env.max_turns}: there is nothing to train on (raise env.max_turns)"
        )
    return ExpertGames(played, len(examples), lost)
