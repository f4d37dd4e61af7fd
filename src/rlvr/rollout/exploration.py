"""Exploration at rollout time: an adaptive temperature and parameter noise (config: ``rollout.*``).

- **Adaptive temperature** (E3, seeds 003:26): the abstract adapts the temperature "to maintain the
  entropy at a stable level" and leaves the rule open. :func:`next_temperature` uses the rule of
  the adaptive entropy coefficient (:func:`rlvr.algo.adaptive_entropy_coef`): a fixed ``step`` up
  when the entropy is below the target, down when above, clamped. The entropy measured is the
  step's *sampled-token entropy*, ``mean(−log p)`` over every sampled token of the step
  (:func:`sampled_entropy`), from the engine's own per-token logprobs under the sampling
  temperature: an unbiased Monte-Carlo estimate of the per-token entropy of the distribution
  sampled from (exact for ``top_p = 1``; with nucleus truncation it is the cross-entropy of the
  truncated sampler against the untruncated one), that costs no extra pass and works with every
  engine. :class:`TemperatureController` holds the one number of state.
- **Parameter noise** (AQN, QeRL, seeds 003:64): :func:`parameter_noise` adds Gaussian noise to
  the weight of every normalisation layer (RMSNorm / LayerNorm) for the duration of a rollout and
  then writes the saved originals back, so the weights after are bit for bit those before. QeRL
  puts its noise there because a norm weight scales each channel of the layer it feeds: adding
  ``z`` to ``w`` multiplies that channel by ``1 + z/w``, the per-channel multiplicative noise a
  quantised weight carries, with one vector per layer instead of a matrix. The std decays
  geometrically per step (:func:`noise_std`; QeRL decays it over training), and each step's noise
  comes from its own generator seeded by ``(seed, step)`` (:func:`noise_generator`), so a resumed
  run draws the same noise without extra state and the sampling RNG's stream is untouched.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import torch

from rlvr.config.exploration import ParamNoiseConfig, TemperatureControlConfig
from rlvr.trajectory import SAMPLED, TrajectoryGroup


# ----------------------------------------------------------------------------- adaptive temperature
def next_temperature(
    temperature: float, entropy: float, target: float, step: float, low: float, high: float
) -> float:
    """The next sampling temperature: ``temperature + step`` when ``entropy < target``,
    ``temperature − step`` when above, unchanged when equal; clamped to [``low``, ``high``]."""
    if entropy < target:
        temperature += step
    elif entropy > target:
        temperature -= step
    return min(max(temperature, low), high)


def sampled_entropy(groups: Iterable[TrajectoryGroup]) -> float | None:
    """Mean ``−log p`` over every sampled token of ``groups`` (the engine's logprobs at the sampling
    temperature; given and context tokens have none and are left out). None: no sampled token."""
    total, count = 0.0, 0
    for group in groups:
        for t in group.trajectories:
            for segment in t.segments:
                if segment.kind == SAMPLED and segment.logprobs:
                    total -= sum(segment.logprobs)
                    count += len(segment.logprobs)
    return total / count if count else None


class TemperatureController:
    """The rollout temperature under ``rollout.temperature_control``: starts at ``start``
    (``rollout.temperature``) and moves once per step with :meth:`observe`."""

    def __init__(self, cfg: TemperatureControlConfig, start: float) -> None:
        if cfg.target is None:
            raise ValueError("rollout.temperature_control.target is not set")
        self.cfg, self.temperature = cfg, float(start)

    def observe(self, entropy: float | None) -> None:
        """Move the temperature after a step whose sampled-token entropy was ``entropy`` (None: stay)."""
        if entropy is None:
            return
        c = self.cfg
        assert c.target is not None
        self.temperature = next_temperature(self.temperature, entropy, c.target, c.step, c.min, c.max)

    def state(self) -> dict[str, float]:
        return {"temperature": self.temperature}

    def load_state(self, state: dict[str, Any]) -> None:
        self.temperature = float(state["temperature"])


# ----------------------------------------------------------------------------- parameter noise
def noise_std(cfg: ParamNoiseConfig, step: int) -> float:
    """The noise std of training step ``step`` (1-based): ``std · decay^(step−1)``, at least ``min_std``."""
    if cfg.std <= 0:
        return 0.0
    return max(cfg.std * cfg.decay ** max(step - 1, 0), cfg.min_std)


def noise_generator(seed: int, step: int) -> torch.Generator:
    """The CPU generator of step ``step``'s noise: a function of ``(seed, step)`` alone."""
    return torch.Generator(device="cpu").manual_seed((seed * 1_000_003 + step) % (2**63 - 1))


def norm_weights(model: torch.nn.Module) -> list[torch.nn.Parameter]:
    """The weight of every normalisation layer of ``model`` (``nn.LayerNorm`` and any module whose
    class name ends in ``RMSNorm`` or ``LayerNorm``: transformers' LlamaRMSNorm, Qwen2RMSNorm, ...)."""
    found = []
    for module in model.modules():
        name = type(module).__name__
        if isinstance(module, torch.nn.LayerNorm) or name.endswith(("RMSNorm", "LayerNorm")):
            weight = getattr(module, "weight", None)
            if isinstance(weight, torch.nn.Parameter):
                found.append(weight)
    return found


@contextmanager
def parameter_noise(model: torch.nn.Module, std: float, generator: torch.Generator) -> Iterator[int]:
    """Inside: every norm weight of ``model`` carries ``N(0, std²)`` noise (drawn in fp32 on the CPU
    from ``generator``, then cast to the weight's dtype and device). On leaving, even by an error,
    the saved originals are copied back: the weights are bit for bit what they were. Yields how
    many weights were perturbed (0 when ``std`` is 0: nothing is touched)."""
    weights = norm_weights(model) if std > 0 else []
    saved = [w.detach().clone() for w in weights]
    try:
        with torch.no_grad():
            for w in weights:
                noise = torch.randn(w.shape, generator=generator, dtype=torch.float32) * std
                w.add_(noise.to(device=w.device, dtype=w.dtype))
        yield len(weights)
    finally:
        with torch.no_grad():
            for w, original in zip(weights, saved):
                w.copy_(original)
