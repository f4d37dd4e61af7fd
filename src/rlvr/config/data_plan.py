"""The config of *which* prompts and samples a run trains on (docs/data.md): selection before
rollout (``data.selection``), curricula (``data.curriculum``), replay of past samples
(``data.replay``) and a weighted mixture of sources (``data.sources``). Every section defaults to
off, so a config that names none of them draws prompts from the seeded shuffle as before.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from rlvr.config.section import Section


class SelectionConfig(Section):
    """GRESO-style selective rollout: skip prompts whose recent groups gave no learning signal."""

    kind: Literal["none", "greso"] = Field(
        "none",
        description="none: every drawn prompt is rolled out; greso: a prompt whose last groups were all "
        "correct (or all wrong) is skipped before rollout with a probability that grows with that streak "
        "(seeds/000:18).",
    )
    target_zero_variance: float = Field(
        0.25,
        ge=0.0,
        le=1.0,
        description="The share of rolled-out groups with zero reward variance the skip probabilities "
        "steer toward (they adapt every step).",
    )
    easy_share: float = Field(
        1 / 3,
        ge=0.0,
        le=1.0,
        description="The part of target_zero_variance allotted to all-correct groups (the rest: all-wrong).",
    )
    p_start: float = Field(0.5, gt=0.0, lt=1.0, description="Starting base of the skip probability.")
    p_step: float = Field(0.01, gt=0.0, le=0.5, description="How far each base moves per step.")
    p_min: float = Field(0.05, gt=0.0, lt=1.0, description="Lowest base.")
    p_max: float = Field(0.95, gt=0.0, lt=1.0, description="Highest base.")
    explore: float = Field(
        0.01,
        ge=0.0,
        le=1.0,
        description="Least probability of rolling out a prompt however long its streak (exploration).",
    )
    easy_at: float = Field(0.98, description="A group's mean correctness at or above this is all-correct.")
    hard_at: float = Field(0.11, description="A group's mean correctness at or below this is all-wrong.")
    max_draws: int = Field(
        8,
        ge=1,
        description="Rounds of drawing (each up to the batch) before a step rolls out what it has.",
    )


class CurriculumConfig(Section):
    """The order and weights prompts are drawn with (data/curriculum.py)."""

    kind: Literal["none", "schedule", "band", "bandit"] = Field(
        "none",
        description="none: a seeded shuffle, epoch by epoch; schedule: easy to hard over a difficulty key; "
        "band: prompts weighted by their measured pass rate (kept near 'solvable sometimes'); bandit: "
        "categories chosen by a softmax over the learning signal (mean |advantage|) they gave.",
    )
    key: str | None = Field(
        None,
        description="Difficulty (schedule) or category (bandit): metadata.<path> (e.g. "
        "metadata.difficulty.num_terms), data_source, or pass_rate (the measured one).",
    )
    params: dict[str, Any] = Field(
        default_factory=dict, description="Options of the chosen kind (docs/data.md lists them)."
    )


class ReplayConfig(Section):
    """A buffer of past trajectories mixed into new groups (the RePO family, seeds/002:22)."""

    kind: Literal["none", "best_correct", "share"] = Field(
        "none",
        description="none; best_correct: a group with no correct member gets the best past correct sample "
        "of its prompt in place of its worst member; share: a fixed share of every group is replayed.",
    )
    capacity: int = Field(1024, ge=1, description="Trajectories the buffer keeps (oldest leave first).")
    share: float = Field(0.125, ge=0.0, lt=1.0, description="kind=share: members of a group replayed.")
    max_age: int | None = Field(
        None, ge=1, description="Replay only samples at most this many policy versions old; None: any."
    )
    cap: float = Field(
        2.0, gt=0.0, description="Truncation of the importance weight π_θ/π_sampled of replayed tokens."
    )


class SourceItem(Section):
    """One source of a mixture: its data, its weight and the reward that scores it."""

    name: str = Field(description="What metrics and the report call this source (a plain name).")
    weight: float = Field(1.0, gt=0.0, description="Relative share of the prompts drawn from it.")
    source: Literal["reasoning_gym", "file", "hf", "env"] = Field("reasoning_gym", description="Kind.")
    task: str | None = Field(None, description="Reasoning-gym task or environment name.")
    task_config: dict[str, Any] = Field(default_factory=dict, description="Task generator options.")
    path: str | None = Field(None, description="File or HF dataset id (source=file / hf).")
    train_size: int = Field(1000, ge=1, description="Generated training prompts (reasoning_gym, env).")
    eval_size: int | None = Field(None, ge=0, description="Held-out prompts from this source.")
    reward: str | None = Field(
        None,
        description="The registered reward that scores this source (the verifier router sends its "
        "examples there); None: the source's default (reasoning_gym, math, environment).",
    )
