"""A small OpenEnv environment for tests/test_envs_openenv.py, importable by name
(``openenv_find:FindIt``). Apart from the test module so that collecting it imports no openenv."""

from __future__ import annotations

import random
import re
from typing import Any

from openenv.core.env_server import Environment
from openenv.core.env_server.types import Action, Observation, State

FIRST_NUMBER = re.compile(r"\d+")


class Say(Action):
    message: str


class Board(Observation):
    text: str = ""
    hint: str = ""


class FindIt(Environment):
    """Find a secret from 1 to 3, told higher/lower; 0.25 for each wrong guess, 1 for the secret."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self, bad_final: Any = 1.0, huge: bool = False) -> None:
        super().__init__()
        self.bad_final, self.huge, self._state, self.secret = bad_final, huge, State(), 0

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> Board:
        self.secret = random.Random(seed).randint(1, 3)
        self._state = State(episode_id=episode_id, step_count=0)
        return Board(text="Find my number from 1 to 3." + ("x" * 50_000 if self.huge else ""), hint="start")

    def step(self, action: Say, timeout_s: float | None = None, **kwargs: Any) -> Board:
        found = FIRST_NUMBER.search(action.message)
        guess = int(found.group()) if found else 0
        if guess == self.secret:
            reward = None if self.bad_final == "none" else self.bad_final
            return Board(text="Yes.", reward=reward, done=True)
        return Board(text="higher" if guess < self.secret else "lower", hint="again", reward=0.25)

    @property
    def state(self) -> State:
        return self._state
