"""An environment that fails, in a run that also scores with reward functions: the environment's
error must survive the merge with the reward pool's result. The reward alone would score these
episodes 1.0; the trained-on reward must be None (skipped) or 0.0 with the error kept, never a
1.0 or a 0.0 without an error."""

from __future__ import annotations

import pytest
from test_rollout_episodes import ScriptedEngine
from tiny import TINY_RUN

from rlvr.collect.collector import Collector
from rlvr.config import load_config
from rlvr.data.example import Example
from rlvr.envs import Environment, Step, register_env
from rlvr.models import load_tokenizer


@register_env("test_failing_env")
class FailingEnv(Environment):
    """Raises on the model's first turn (after it already wrote the right answer)."""

    def step(self, text: str) -> Step:
        raise RuntimeError("the game's server went away")


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer("tiny-random")


def _collector(tok, on_error: str) -> Collector:
    cfg = load_config(
        None,
        [
            *TINY_RUN,
            "rollout.group_size=2",
            "rollout.prompts_per_step=1",
            "env.name=test_failing_env",
            "rewards.functions=[{name: exact_match}]",
            f"rewards.on_error={on_error}",
            "algo.dynamic_sampling=false",
        ],
    )
    examples = [Example(id="q", prompt=[{"role": "user", "content": "6*7?"}], reference="42")]
    return Collector(cfg, ScriptedEngine(tok, ["<answer>42</answer>"]), tok, examples)


@pytest.mark.parametrize("on_error", ["skip_group", "zero"])
def test_an_environment_error_survives_the_reward_pools_result(tok, on_error) -> None:
    collector = _collector(tok, on_error)
    try:
        collection = collector.collect()
    finally:
        collector.close()
    [group] = collection.seen
    for t in group.trajectories:
        assert "the game's server went away" in t.errors["env"]
        assert t.rewards["exact_match"] == 1.0  # the reward itself ran and scored the answer
        assert t.reward == (None if on_error == "skip_group" else 0.0)
    assert collection.metrics["reward/errors"] == 2.0
    assert collection.kept == ([] if on_error == "skip_group" else [group])
