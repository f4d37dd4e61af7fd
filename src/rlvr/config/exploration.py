"""Exploration knobs of the rollout: an adaptive temperature, intent-factored generation, parameter noise.

Each is off by default and lives under ``rollout`` (one field of :class:`~rlvr.config.schema.RolloutConfig`
each); :func:`check_exploration` is the rollout section's check of how they agree with its other
settings. The mechanics are in :mod:`rlvr.rollout.exploration`.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, model_validator

from rlvr.config.section import Section


class TemperatureControlConfig(Section):
    target: float | None = Field(
        None,
        gt=0,
        description="Adaptive sampling temperature (E3, seeds 003:26): after each step the rollout "
        "temperature moves by `step` towards holding the step's sampled-token entropy (nats, the mean "
        "of -log p over sampled tokens) at this target, within [min, max]; it starts at "
        "rollout.temperature. None: the temperature stays fixed.",
    )
    step: float = Field(0.05, gt=0, description="How far the temperature moves after a step.")
    min: float = Field(0.5, gt=0, description="Lowest temperature the controller sets.")
    max: float = Field(1.5, gt=0, description="Highest temperature the controller sets.")

    @model_validator(mode="after")
    def _check(self) -> TemperatureControlConfig:
        if self.min > self.max:
            raise ValueError(
                f"rollout.temperature_control.min={self.min} exceeds "
                f"rollout.temperature_control.max={self.max}"
            )
        return self


class IntentConfig(Section):
    temperature: float | None = Field(
        None,
        gt=0,
        description="Intent-factored generation (IFG, seeds 002:19): each completion's intent (its "
        "tokens up to and including the one that completes `end`) is sampled at this temperature, the "
        "rest at rollout.temperature. None: off. HF engine only.",
    )
    end: str = Field(
        "\n", min_length=1, description="The string that ends the intent (e.g. a newline or '</intent>')."
    )
    max_tokens: int | None = Field(
        None,
        ge=1,
        description="The intent ends after this many tokens even without `end` (None: only at `end`).",
    )


class ParamNoiseConfig(Section):
    std: float = Field(
        0.0,
        ge=0,
        description="Adaptive quantization noise (AQN, QeRL, seeds 003:64): during each step's rollout, "
        "Gaussian noise of this std is added to every normalisation layer's weight (a per-channel "
        "multiplicative perturbation of the layer it feeds); the trained weights are restored bit for "
        "bit after sampling, and evaluation never sees it. 0: off. HF engine only.",
    )
    decay: float = Field(
        1.0, gt=0, le=1, description="The std is multiplied by this after every step (1: constant)."
    )
    min_std: float = Field(0.0, ge=0, description="The decayed std never falls below this.")

    @model_validator(mode="after")
    def _check(self) -> ParamNoiseConfig:
        if self.min_std > self.std and self.std > 0:
            raise ValueError(
                f"rollout.param_noise.min_std={self.min_std} exceeds rollout.param_noise.std={self.std}"
            )
        return self


def check_exploration(rollout: Any) -> Any:
    """The rollout section's checks across its exploration fields and its other settings."""
    control = rollout.temperature_control
    if control.target is not None and not control.min <= rollout.temperature <= control.max:
        raise ValueError(
            f"rollout.temperature={rollout.temperature} must lie within [rollout.temperature_control.min, "
            f"rollout.temperature_control.max] = [{control.min}, {control.max}] (the controller starts there)"
        )
    if rollout.ifg.temperature is not None:
        if rollout.engine != "hf":
            raise ValueError(
                "rollout.ifg.temperature: intent-factored generation switches the temperature inside a "
                f"completion, which rollout.engine={rollout.engine} cannot (one temperature a request); "
                "use rollout.engine=hf"
            )
        if rollout.temperature == 0:
            raise ValueError(
                "rollout.ifg.temperature needs rollout.temperature > 0 (the temperature after the intent)"
            )
    if rollout.param_noise.std > 0 and rollout.engine != "hf":
        raise ValueError(
            f"rollout.param_noise.std: parameter noise perturbs the sampling module in this process; "
            f"rollout.engine={rollout.engine} samples from its own copy of the weights; use rollout.engine=hf"
        )
    return rollout
