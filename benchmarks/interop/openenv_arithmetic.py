"""An OpenEnv environment written the way OpenEnv documents it, served by OpenEnv's own server, for
the adapter's demo (``env.name: openenv``; docs/interop.md): addition with one retry.

Each episode asks "What is x + y?" (x, y drawn from the episode's seed, 0..``max_operand``). The
model's first answer is right: reward 1, done. Wrong: reward 0, and the environment says so and asks
once more; right the second time: reward 0.5, else 0; done either way. The answer read is the reply's
first integer. Rewards are per turn (``Observation.reward``), so a retried episode has two.

    python benchmarks/interop/openenv_arithmetic.py --port 8011   # serve (needs rlvr[openenv])
    rlvr train --config benchmarks/interop/openenv_arithmetic.yaml # train against it
"""

from __future__ import annotations

import argparse
import random
import re
from typing import Any

from openenv.core.env_server import Environment, create_app
from openenv.core.env_server.types import Action, Observation, State

NUMBER = re.compile(r"-?\d+")


class AnswerAction(Action):
    message: str


class QuestionObservation(Observation):
    prompt: str = ""


class ArithmeticRetry(Environment):
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self, max_operand: int = 20) -> None:
        super().__init__()
        self.max_operand = max_operand
        self._state = State()
        self.x = self.y = 0

    def reset(
        self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any
    ) -> QuestionObservation:
        rng = random.Random(seed)
        self.x, self.y = rng.randint(0, self.max_operand), rng.randint(0, self.max_operand)
        self._state = State(episode_id=episode_id, step_count=0)
        return QuestionObservation(prompt=f"What is {self.x} + {self.y}? Answer with the number only.")

    def step(
        self, action: AnswerAction, timeout_s: float | None = None, **kwargs: Any
    ) -> QuestionObservation:
        self._state.step_count += 1
        found = NUMBER.search(action.message)
        right = found is not None and int(found.group()) == self.x + self.y
        if right:
            reward = 1.0 if self._state.step_count == 1 else 0.5
            return QuestionObservation(prompt="Correct.", reward=reward, done=True)
        if self._state.step_count >= 2:
            return QuestionObservation(prompt=f"No: {self.x + self.y}.", reward=0.0, done=True)
        return QuestionObservation(
            prompt=f"That is not right. Try again: what is {self.x} + {self.y}?", reward=0.0, done=False
        )

    @property
    def state(self) -> State:
        return self._state


def main() -> None:
    import uvicorn

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8011)
    parser.add_argument("--max-operand", type=int, default=20)
    args = parser.parse_args()
    app = create_app(
        lambda: ArithmeticRetry(args.max_operand),
        AnswerAction,
        QuestionObservation,
        env_name="arithmetic_retry",
        max_concurrent_envs=64,
    )
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
