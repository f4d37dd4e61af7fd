"""A verifiers (v1) environment written the way verifiers documents it, for the adapter's demo
(``env.name: verifiers``; docs/interop.md): the same game as openenv_arithmetic.py, addition with one
retry, so the two adapters train on one task.

The taskset holds 500 problems "What is x + y?" (x, y in 0..20, drawn once from seed 0). The env asks,
reads the reply's first integer; wrong: it says so and asks once more. The reward, scored by
verifiers when the episode ends: 1 for a right first answer, 0.5 for a right second one, else 0.
The module's name is the taskset's id: put this folder on the path to use it.

    PYTHONPATH=benchmarks/interop rlvr train benchmarks/interop/verifiers_arithmetic.yaml
"""

from __future__ import annotations

import random
import re

import verifiers.v1 as vf

NUMBER = re.compile(r"-?\d+")


class SumData(vf.TaskData):
    x: int
    y: int


class SumTask(vf.Task[SumData, vf.State, vf.TaskConfig]):
    @vf.reward
    async def correct(self, task: SumData, trace: vf.Trace) -> float:
        answers = [m.content or "" for m in trace.assistant_messages]
        for attempt, text in enumerate(answers[:2]):
            found = NUMBER.search(text)
            if found is not None and int(found.group()) == task.x + task.y:
                return 1.0 if attempt == 0 else 0.5
        return 0.0


class SumTaskset(vf.Taskset[SumTask, vf.TasksetConfig]):
    def load(self):
        rng = random.Random(0)
        for _ in range(500):
            x, y = rng.randint(0, 20), rng.randint(0, 20)
            prompt = f"What is {x} + {y}? Answer with the number only."
            yield SumTask(SumData(prompt=prompt, x=x, y=y), self.config.task)


class RetryEnvConfig(vf.EnvConfig):
    player: vf.AgentConfig = vf.AgentConfig(max_turns=2)


class RetryEnv(vf.Env[RetryEnvConfig]):
    async def run(self, task, agents):
        async with agents.player.interaction(task) as chat:
            segment = await chat.turn()
            found = NUMBER.search(segment.last_reply)
            if not segment.terminated and (found is None or int(found.group()) != task.data.x + task.data.y):
                await chat.turn(f"That is not right. Try again: what is {task.data.x} + {task.data.y}?")


__all__ = ["SumTaskset", "RetryEnv"]
