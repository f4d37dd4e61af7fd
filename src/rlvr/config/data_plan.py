"""The config of *which* prompts and samples a run trains on (docs/data.md): selection before
rollout (``data.selection``), curricula (``data.curriculum``), replay of past samples
(``data.replay``) and a weighted mixture of sources (``data.sources``). Every section defaults to
off, so a config that names none of them draws prompts from the seeded shuffle as before.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field, model_validator

from rlvr.config.section import Section
from rlvr.errors import RlvrError


class SelectionConfig(Section):
    """GRESO-style selective rollout: skip prompts whose recent groups gave no learning signal."""

    kind: Literal["none", "greso"] = Field(
        "none",
        description="none: every drawn prompt is rolled out; greso: a prompt whose last groups were all "
        "correct (or all wrong) is skipped before rollout with a probability that grows with that streak "
        "(seeds/000:18).",
    )
    signal: Literal["correctness", "reward"] = Field(
        "correctness",
        description="What a streak counts: correctness = groups all correct (easy) or all wrong (hard) by "
        "the first reward; reward = groups whose total rewards were all equal (what dynamic sampling "
        "drops), easy when they passed at least half the time.",
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
    easy_at: float = Field(
        0.98, gt=0.0, le=1.0, description="A group's mean correctness at or above this is all-correct."
    )
    hard_at: float = Field(
        0.11, ge=0.0, lt=1.0, description="A group's mean correctness at or below this is all-wrong."
    )
    max_draws: int = Field(
        8,
        ge=1,
        description="Rounds of drawing (each up to the batch) before a step rolls out what it has.",
    )

    @model_validator(mode="after")
    def _check(self) -> SelectionConfig:
        if self.p_min >= self.p_max:
            raise ValueError(
                f"data.selection.p_min ({self.p_min}) must be below data.selection.p_max ({self.p_max})"
            )
        if not self.p_min <= self.p_start <= self.p_max:
            raise ValueError(
                f"data.selection.p_start ({self.p_start}) must lie within data.selection.p_min.."
                f"p_max ({self.p_min}..{self.p_max})"
            )
        if self.hard_at >= self.easy_at:
            raise ValueError(
                f"data.selection.hard_at ({self.hard_at}) must be below "
                f"data.selection.easy_at ({self.easy_at})"
            )
        return self


# The params of each curriculum kind and their defaults (None: required). Band's weights are prime-rl's
# pool sampler's (docs/data.md); a retired prompt is one whose all-correct streak reached retire_after
# (0: never); it keeps only the small weight w_retired, so it is revisited now and then.
CURRICULUM_PARAMS: dict[str, dict[str, Any]] = {
    "schedule": {"start": 0.25, "steps": None, "shape": "linear"},
    "band": {
        "low": 0.25,
        "high": 0.75,
        "w_unseen": 1.0,
        "w_hard": 0.2,
        "w_band": 1.0,
        "w_easy": 0.2,
        "retire_after": 2,
        "w_retired": 0.02,
        "rate": "last",
    },
    "bandit": {"alpha": 0.5, "temperature": 0.1, "explore": 0.05},
}


def _curriculum_params(kind: str, given: dict[str, Any]) -> dict[str, Any]:
    """``given`` with the kind's defaults filled in, each value checked (errors name the param)."""
    allowed = CURRICULUM_PARAMS[kind]
    for name in given:
        if name not in allowed:
            raise ValueError(
                f"data.curriculum.params.{name}: not a param of kind={kind}; its params: "
                + ", ".join(allowed)
            )
    params = {**allowed, **given}

    def number(name: str, low: float, high: float, low_open: bool = False, integer: bool = False) -> None:
        value = params[name]
        ok = isinstance(value, int if integer else (int, float)) and not isinstance(value, bool)
        if ok:
            ok = (value > low if low_open else value >= low) and value <= high
        if not ok:
            what = "an integer" if integer else "a number"
            lower = f"> {low}" if low_open else f">= {low}"
            raise ValueError(
                f"data.curriculum.params.{name}={value!r}: {what} {lower} and <= {high} (kind={kind})"
            )

    def choice(name: str, options: tuple[str, ...]) -> None:
        if params[name] not in options:
            raise ValueError(
                f"data.curriculum.params.{name}={params[name]!r}: one of {', '.join(options)} (kind={kind})"
            )

    if kind == "schedule":
        if params["steps"] is None:
            raise ValueError(
                "data.curriculum.params.steps is required for kind=schedule: the step by which every "
                "example is available (e.g. train.steps or half of it)"
            )
        number("start", 0.0, 1.0, low_open=True)
        number("steps", 1, float("inf"), integer=True)
        choice("shape", ("linear", "root"))
    elif kind == "band":
        number("low", 0.0, 1.0)
        number("high", 0.0, 1.0)
        if params["low"] >= params["high"]:
            raise ValueError(
                f"data.curriculum.params.low ({params['low']}) must be below params.high ({params['high']})"
            )
        for name in ("w_unseen", "w_hard", "w_band", "w_easy", "w_retired"):
            number(name, 0.0, float("inf"))
        number("retire_after", 0, float("inf"), integer=True)
        choice("rate", ("last", "mean"))
    else:
        number("alpha", 0.0, 1.0, low_open=True)
        number("temperature", 0.0, float("inf"), low_open=True)
        number("explore", 0.0, 1.0)
    return params


class CurriculumConfig(Section):
    """The order and weights prompts are drawn with (data/curriculum.py)."""

    kind: Literal["none", "schedule", "band", "bandit"] = Field(
        "none",
        description="none: a seeded shuffle, epoch by epoch; schedule: easy to hard over a difficulty key; "
        "band: prompts weighted by their measured pass rate (kept near 'solvable sometimes'); bandit: "
        "categories chosen by a softmax over the learning signal (mean |advantage|) they gave.",
    )
    key: str | list[str] | None = Field(
        None,
        description="Difficulty (schedule) or category (bandit): metadata.<path> (e.g. "
        "metadata.rg_entry.metadata.num_terms for reasoning-gym chain_sum) or data_source; schedule also "
        "takes a list of keys (difficulty: the sum of their normalised ranks). band reads the measured "
        "pass rate (key unset or pass_rate).",
    )
    params: dict[str, Any] = Field(
        default_factory=dict,
        description="Options of the chosen kind, the ones left out filled with their defaults: schedule "
        f"{CURRICULUM_PARAMS['schedule']}; band {CURRICULUM_PARAMS['band']}; bandit "
        f"{CURRICULUM_PARAMS['bandit']} (docs/data.md).",
    )

    @model_validator(mode="after")
    def _check(self) -> CurriculumConfig:
        if self.kind == "none":
            return self
        keys = [self.key] if isinstance(self.key, str) else list(self.key or [])
        for key in keys:
            if key not in ("data_source", "pass_rate") and not (
                key.startswith("metadata.") and all(key.split(".")[1:])
            ):
                raise ValueError(
                    f"data.curriculum.key={key!r}: give metadata.<path> (a dotted path into each "
                    "example's metadata), data_source, or pass_rate"
                )
        if self.kind == "band" and any(k != "pass_rate" for k in keys):
            raise ValueError(
                f"data.curriculum.key={self.key!r}: kind=band weights prompts by their measured pass "
                "rate; leave data.curriculum.key out (or set it to pass_rate)"
            )
        if self.kind in ("schedule", "bandit"):
            if not keys:
                raise ValueError(f"data.curriculum.kind={self.kind} needs data.curriculum.key")
            if "pass_rate" in keys:
                raise ValueError(
                    f"data.curriculum.key=pass_rate with kind={self.kind}: the pass rate is measured "
                    "during the run (unseen prompts have none); kind=band draws by it. A schedule or a "
                    "bandit needs a key every example has from the start (metadata.<path>, data_source)"
                )
        if self.kind == "bandit" and not isinstance(self.key, str):
            raise ValueError("data.curriculum.key: kind=bandit takes one key (its values are the categories)")
        self.params.update(_curriculum_params(self.kind, self.params))
        return self


class ReplayConfig(Section):
    """A buffer of past trajectories mixed into new groups (the RePO family, seeds/002:22;
    rlvr.collect.replay). A prompt meets its past samples only when it is drawn again: a small
    training set (data.train_size) or many steps."""

    kind: Literal["none", "best_correct", "share"] = Field(
        "none",
        description="none; best_correct: a group with no correct member gets the best past correct sample "
        "of its prompt (highest reward, then newest) in place of its lowest-reward member (the buffer "
        "keeps correct samples only); share: round(share × group size) members of every group are "
        "replaced by past samples of its prompt, best first (at least one fresh member stays).",
    )
    capacity: int = Field(1024, ge=1, description="Trajectories the buffer keeps (oldest leave first).")
    share: float = Field(0.125, ge=0.0, lt=1.0, description="kind=share: members of a group replayed.")
    max_age: int | None = Field(
        None, ge=1, description="Replay only samples at most this many policy versions old; None: any."
    )
    cap: float = Field(
        2.0,
        gt=0.0,
        description="Truncation of the importance weight π_old/π_sampled on replayed tokens: their loss is "
        "multiplied by min(π_old/π_sampled, cap), π_sampled being the policy that sampled them (with "
        "algo.loss=tis or masked_is the loss corrects them itself, with its own cap).",
    )


class SourceItem(Section):
    """One source of a mixture: its data, its weight and the reward that scores it. Its data keys
    mean what the same keys of ``data`` mean for a run of one source (rlvr.data.mixture)."""

    name: str = Field(
        description="What metrics (source/<name>/accuracy), eval groups and the report call this source: "
        "letters, digits, _ and -."
    )
    weight: float = Field(1.0, gt=0.0, description="Relative share of the prompts drawn from it.")
    source: Literal["reasoning_gym", "file", "hf", "env"] = Field(
        "reasoning_gym", description="Kind; default: file when path names a data file, hf for another path."
    )
    task: str | None = Field(None, description="Reasoning-gym task or environment dataset (source=env).")
    task_config: dict[str, Any] = Field(default_factory=dict, description="Task generator options.")
    path: str | None = Field(None, description="Data file (source=file) or HF dataset dir / hub id (hf).")
    split: str = Field("train", description="Dataset split trained on (source=hf).")
    eval_path: str | None = Field(
        None, description="Held-out rows of this source (file / hf), as data.eval_path."
    )
    eval_split: str | None = Field(None, description="HF split held out (source=hf), as data.eval_split.")
    question_key: str = Field("question", description="Column holding the question, as data.question_key.")
    answer_key: str | None = Field("answer", description="Column holding the reference, as data.answer_key.")
    messages_key: str | None = Field(None, description="Column holding a chat message list.")
    id_key: str | None = Field(None, description="Column holding a stable example id.")
    answer_format: str | None = Field(
        None,
        description="Instruction appended to this source's questions (as data.answer_format); None: "
        "data.answer_format when the config sets it, else answer_tag for generated tasks and none for "
        "files and HF datasets.",
    )
    train_size: int = Field(1000, ge=1, description="Generated training prompts (reasoning_gym, env).")
    eval_size: int | None = Field(
        None,
        ge=0,
        description="Held-out prompts from this source; None: as data.eval_size (200 generated; all of an "
        "eval source; else 10% of the rows, at most 200); 0: none.",
    )
    reward: str | None = Field(
        None,
        description="The registered reward that scores this source (the verifier router sends its "
        "examples there); None: the source's default (reasoning_gym; a file row's verifier column, else "
        "math; an environment's own).",
    )


SOURCE_NAME = re.compile(r"^[A-Za-z0-9_-]+$")


def check_source_names(names: list[Any]) -> None:
    """Refuse a source name that is not a plain name, or that an earlier source already has."""
    seen: dict[str, int] = {}
    for i, name in enumerate(names):
        if not isinstance(name, str) or not SOURCE_NAME.match(name):
            raise RlvrError(
                f"data.sources[{i}].name={name!r}: give each source a plain name (letters, digits, _ and -); "
                "it names the source's metrics (source/<name>/accuracy) and eval group"
            )
        if name in seen:
            raise RlvrError(
                f"data.sources[{i}].name={name!r} is also data.sources[{seen[name]}].name: source names "
                "must differ (they name each source's metrics)"
            )
        seen[name] = i
