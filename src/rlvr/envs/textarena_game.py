"""TextArena's text games as rlvr environments (``env.name: textarena``).

TextArena (``pip install 'rlvr[textarena]'``) is a Gymnasium-style standard for text games: a game
is made by id (``ta.make("GuessTheNumber-v0")``), reset with a seed, and played by alternating
``get_observation()`` and ``step(action)`` until it is done; ``close()`` then gives each player's
reward. This adapter plays its single-player games (one policy, ``num_players=1``):

- the game comes from the config (``env.params: {env_id: GuessTheNumber-v0, env_kwargs: {...}}``),
  never from a data row; its raw form (``<id>-raw``) is used, without TextArena's observation
  wrappers, so that each turn adds only what the game said since the model's last move (the
  conversation stays token-exact: the model's own move is not echoed back);
- the episode's seed comes from the example (``metadata.seed``; the ``textarena`` dataset makes
  training games from even seeds and held-out games from odd ones);
- the reward is the game's own, given once when the game ends; a game that ends without a reward
  for the player is an error (the rollout counts it), never a 0. An episode rlvr cuts at
  ``env.max_turns`` before the game ends has no verdict and scores 0, as every environment's does.

TextArena games call Python's global ``random`` (and reseed it on reset); each episode keeps its own
random state and swaps it in around every call, under one lock, so games neither disturb rlvr's
randomness nor each other's across rollout threads.
"""

from __future__ import annotations

import random
import threading
from typing import Any

from rlvr.data.example import Example
from rlvr.envs.base import Environment, Message, Step, register_env
from rlvr.errors import RlvrError

_LOCK = threading.Lock()
NO_NEWS = "(The game has nothing to add. Your move.)"


def _textarena() -> Any:
    try:
        import textarena
    except ImportError as err:
        raise RlvrError("env.name=textarena needs TextArena: pip install 'rlvr[textarena]'") from err
    return textarena


@register_env("textarena")
class TextArenaGame(Environment):
    """One single-player TextArena game. ``outcome()``: ``solved`` (reward ≥ 1), ``reward`` (the
    game's), ``turns`` and ``invalid_move`` (the game ended on an invalid move)."""

    data_params: dict = {}  # a data row chooses nothing here; its seed is metadata.seed

    def __init__(self, env_id: str = "GuessTheNumber-v0", env_kwargs: dict[str, Any] | None = None) -> None:
        ta = _textarena()
        raw = env_id if env_id.endswith("-raw") else f"{env_id}-raw"
        if raw not in ta.envs.registration.ENV_REGISTRY:
            raise RlvrError(f"env.params.env_id: TextArena has no game {env_id!r}")
        self.env_id, self.raw, self.env_kwargs = env_id, raw, dict(env_kwargs or {})
        self.game: Any = None
        self.random_state: Any = None
        self.player = 0
        self.turns, self.reward, self.invalid, self.finished = 0, 0.0, False, False

    def _call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """``fn`` with this episode's own ``random`` state in place of the global one."""
        with _LOCK:
            outside = random.getstate()
            try:
                if self.random_state is not None:
                    random.setstate(self.random_state)
                return fn(*args, **kwargs)
            finally:
                self.random_state = random.getstate()
                random.setstate(outside)

    def reset(self, example: Example, rng: random.Random) -> list[Message]:
        ta = _textarena()
        seed = int(example.metadata.get("seed", rng.randrange(2**31)))
        self.random_state = random.Random(seed).getstate()
        self.game = self._call(ta.make, self.raw, **self.env_kwargs)
        self._call(self.game.reset, num_players=1, seed=seed)
        self.player, observation = self._call(self.game.get_observation)
        self.turns, self.reward, self.invalid, self.finished = 0, 0.0, False, False
        return [{"role": "user", "content": self._news(observation) or NO_NEWS}]

    def _news(self, observation: list[tuple[int, str, Any]]) -> str:
        """What the game said since the player's last move (its echo of that move left out)."""
        return "\n".join(text for sender, text, _ in observation if sender != self.player).strip()

    def step(self, text: str) -> Step:
        if self.game is None:
            raise RuntimeError("textarena: step() before reset()")
        self.turns += 1
        done, _ = self._call(self.game.step, text)
        if not done:
            player, observation = self._call(self.game.get_observation)
            if player != self.player:
                raise RuntimeError(
                    f"textarena {self.env_id}: expected player {self.player} to move, got {player}"
                )
            return Step([{"role": "user", "content": self._news(observation) or NO_NEWS}])
        rewards, info = self._call(self.game.close)
        if not isinstance(rewards, dict) or self.player not in rewards:
            raise RuntimeError(f"textarena {self.env_id}: the game ended without a reward for the player")
        self.reward, self.finished = float(rewards[self.player]), True
        self.invalid = bool((info or {}).get(self.player, {}).get("invalid_move", False))
        return Step(reward=self.reward, done=True, info={"invalid_moves": float(self.invalid)})

    def outcome(self) -> dict[str, float]:
        return {
            "solved": float(self.finished and self.reward >= 1.0),
            "reward": self.reward,
            "turns": float(self.turns),
            "invalid_move": float(self.invalid),
        }


def textarena_examples(count: int, seed: int, split: str = "train", **config: Any) -> list[Example]:
    """``count`` games: training games from even seeds, held-out ones from odd seeds (the seed
    fixes TextArena's random choices, e.g. the secret number; small games repeat across splits)."""
    from rlvr.envs.game_split import seeded_examples

    return seeded_examples("textarena", count, seed, split, **config)
