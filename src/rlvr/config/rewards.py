"""The rewards section: which reward functions score a completion, and how their errors count."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from rlvr.config.section import Section


class RewardItem(Section):
    name: str = Field(description="Registered reward name or 'module:function'.")
    weight: float = Field(1.0, description="Weight in the total reward.")
    params: dict[str, Any] = Field(default_factory=dict, description="Keyword arguments of the reward.")
    label: str | None = Field(None, description="Component name in metrics (default: name); must be unique.")
    gate: str | None = Field(None, description="Count this component only when component `gate` passes.")
    gate_min: float = Field(1.0, description="Score the gate component must reach.")


class ShapingItem(Section):
    name: str = Field(description="Registered shaping function (rlvr.algo.REWARD_SHAPERS).")
    params: dict[str, Any] = Field(default_factory=dict, description="Its keyword arguments.")


class RewardsConfig(Section):
    functions: list[RewardItem] = Field(
        default_factory=list,
        description="Reward components, summed with their weights. Default by data source: the "
        "default job's three (chain_sum), reasoning_gym for other tasks, verifier (else math) for "
        "files and HF datasets, none for environment datasets (docs/data.md).",
    )
    workers: int = Field(0, ge=0, description="Reward worker processes; 0 = number of cores.")
    timeout_s: float = Field(5.0, gt=0, description="Hard wall-clock limit per reward call.")
    batch_deadline_s: float | None = Field(None, gt=0, description="Limit for scoring a whole step's batch.")
    on_error: Literal["partial", "skip_group", "zero"] = Field(
        "partial",
        description="A sample without a verdict (reward error, timeout, missing score): partial = left out "
        "of its group, which trains on its scored members when rewards.min_scored remain (else it is "
        "dropped); skip_group = the group is dropped; zero = scored 0 (every case counted).",
    )
    min_scored: int = Field(
        2,
        ge=1,
        description="on_error=partial: fewest scored members a group trains on (at most rollout.group_size).",
    )
    shaping: list[ShapingItem] = Field(
        default_factory=list,
        description="Shapers (rlvr.algo.REWARD_SHAPERS) applied in order to the sequence rewards of the kept "
        "groups before the advantage estimator.",
    )
    step_separator: str = Field(
        "\n\n",
        min_length=1,
        description="Where a response splits into steps, for a reward that returns per-step rewards "
        "(a dict with 'steps': one number per step of the final turn's text split here; docs/credit.md).",
    )
