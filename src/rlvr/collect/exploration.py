"""The rollout side of the exploration methods (docs/algorithms.md, "Exploration"), around each
collection step: the adaptive temperature's controller, AQN's parameter noise and IFG's counts.

The formulas and the noise itself live in :mod:`rlvr.rollout.exploration`; this module holds what a
run keeps between steps and how a step is wrapped, so the collector only calls :meth:`around` and
:meth:`after`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from rlvr.config.schema import RunConfig
from rlvr.errors import RlvrError
from rlvr.rollout import RolloutEngine
from rlvr.rollout.exploration import (
    TemperatureController,
    noise_generator,
    noise_std,
    parameter_noise,
    sampled_entropy,
)


class RolloutExploration:
    """One run's exploration state: refuses settings the run cannot honour when it is made."""

    def __init__(self, cfg: RunConfig, engine: RolloutEngine) -> None:
        self.cfg, self.engine = cfg, engine
        r = cfg.rollout
        if r.temperature_control.target is not None and cfg.train.max_staleness is not None:
            raise RlvrError(
                "rollout.temperature_control: the trainer recomputes log-probs at the rollout temperature of "
                "the step it trains, which asynchronous collection (train.max_staleness) has already moved "
                "on; set train.max_staleness=null"
            )
        if r.param_noise.std > 0 and not (hasattr(engine, "model") and hasattr(engine, "lock")):
            raise RlvrError(
                f"rollout.param_noise.std: the {type(engine).__name__} engine does not sample from a "
                "module in this process that noise could be added to; use rollout.engine=hf"
            )
        # rollout.temperature_control: the temperature moves after each step (state, checkpointed)
        self.temperature = (
            TemperatureController(r.temperature_control, r.temperature)
            if r.temperature_control.target is not None
            else None
        )
        self._intents = [0.0, 0.0, 0.0]  # IFG: completions, intent tokens, intents ended

    # ----------------------------------------------------------------------------- state
    def state(self) -> dict[str, Any] | None:
        return self.temperature.state() if self.temperature is not None else None

    def load_state(self, state: dict[str, Any] | None) -> None:
        if self.temperature is not None and state is not None:
            self.temperature.load_state(state)

    # ----------------------------------------------------------------------------- one step
    @contextmanager
    def around(self, round_: int) -> Iterator[dict[str, float]]:
        """Wrap collection step ``round_``: it samples at the controller's temperature, written into
        ``rollout.temperature`` (the one the learner recomputes log-probs with, so the update of
        this step uses it too), and under ``rollout.param_noise`` with noisy norm weights, restored
        bit for bit on exit. Yields the step's exploration metrics, filled in so far."""
        r = self.cfg.rollout
        metrics: dict[str, float] = {}
        if self.temperature is not None:
            r.temperature = self.temperature.temperature
            metrics["rollout/temperature"] = r.temperature
        std = noise_std(r.param_noise, round_)
        if r.param_noise.std > 0:
            metrics["rollout/param_noise_std"] = std
        if std <= 0:
            yield metrics
            return
        # under the engine's lock, so no other generate call (an evaluation, another thread) samples
        # from the perturbed module
        with (
            self.engine.lock,
            parameter_noise(self.engine.model, std, noise_generator(self.cfg.seed, round_)),
        ):
            yield metrics

    def after(self, seen: list) -> dict[str, float]:
        """The step's remaining metrics; the controller moves from the sampled-token entropy of the
        step's groups ``seen`` (the next step's temperature)."""
        metrics: dict[str, float] = {}
        if self.temperature is not None:
            entropy = sampled_entropy(seen)
            if entropy is not None:
                metrics["rollout/sampled_entropy"] = entropy
            self.temperature.observe(entropy)
        if self.cfg.rollout.ifg.temperature is not None and self._intents[0]:
            n, intent_tokens, ended = self._intents
            metrics["rollout/intent_tokens"] = intent_tokens / n
            metrics["rollout/intent_ended"] = ended / n
        self._intents = [0.0, 0.0, 0.0]
        return metrics

    def count_intents(self, completions: list) -> None:
        """IFG: count each completion's intent tokens (those at the intent temperature, from the
        first) and whether its intent ended inside it."""
        hot = self.cfg.rollout.ifg.temperature
        for c in completions:
            if c.temperatures is None:
                continue
            ended = next((i for i, t in enumerate(c.temperatures) if t != hot), None)
            self._intents[0] += 1
            self._intents[1] += len(c.temperatures) if ended is None else ended
            self._intents[2] += ended is not None
