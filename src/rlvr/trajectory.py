"""Trajectories: the unit that flows from the collector to the learner (docs/design.md, "The shape").

A :class:`Trajectory` is a ledger of token ids. Its prompt is the first, shared part of the ledger
(kept apart because the G trajectories of a group share it, and the learner encodes it once);
after it come the response *segments*, each ``sampled`` by the policy (with the sampling
logprob of every token), ``given`` (trained on but not sampled: a demonstration's assistant turns,
an expert solution mixed into a group; no sampling logprob) or ``context`` (tokens the policy did
not choose and is not trained on: an environment's or a tool's answer, a chat template's turn
markers, a conversation's user turns). Sampled and given tokens are trained on: the loss mask is
derived from the segments, never stored beside them, so the two cannot disagree. A single-turn
completion is the one-segment case; an SFT example is a trajectory whose trained segments are all
given (docs/stages.md).

A :class:`TrajectoryGroup` is the G trajectories of one prompt, scored; the learner's advantages
are computed within groups.

The JSONL form (:func:`trajectory_record`, :func:`read_trajectory_groups`) is what
``rlvr collect --out`` and ``train.log_trajectories`` write, one trajectory per line; it is exact
(token ids and logprobs as sampled), so a learner driven from the file makes the same update as
the live loop. Its fields are documented in ``docs/trajectories.md``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlvr.errors import RlvrError
from rlvr.rollout.base import Completion
from rlvr.safe_parse import loads_json
from rlvr.vision.prompt import copy_prompt

SAMPLED, GIVEN, CONTEXT = "sampled", "given", "context"
TRAINED = (SAMPLED, GIVEN)  # the kinds the loss mask covers


@dataclass
class Segment:
    """A run of response tokens of one origin: ``sampled`` (with logprobs), ``given`` or ``context``
    (both without)."""

    kind: str
    token_ids: list[int]
    logprobs: list[float] | None = None

    def __post_init__(self) -> None:
        if self.kind not in (SAMPLED, GIVEN, CONTEXT):
            raise ValueError(f"segment kind must be {SAMPLED!r}, {GIVEN!r} or {CONTEXT!r}, not {self.kind!r}")
        if self.kind == SAMPLED and (self.logprobs is None or len(self.logprobs) != len(self.token_ids)):
            raise ValueError("a sampled segment needs one sampling logprob per token")
        if self.kind != SAMPLED and self.logprobs is not None:
            raise ValueError(f"a {self.kind} segment has no sampling logprobs")


@dataclass
class Trajectory:
    """One prompt's response as a token ledger, with its rewards and where it came from.

    ``reward`` is the total the learner trains on; ``None`` when a reward errored and the run's
    policy is to skip such groups (``errors`` then says which reward failed and why; with
    ``rewards.on_error=zero`` the total is 0.0 and ``errors`` is still filled). ``turn_rewards``
    holds per-turn rewards of multi-turn episodes (empty for a single turn).
    """

    prompt_ids: list[int]
    segments: list[Segment]
    finish_reason: str  # "stop" (EOS), "length" (token limit), or an environment's own reason
    text: str = ""  # the decoded response, what the rewards read
    example_index: int = -1  # the example's position in the collector's dataset
    example_id: str = ""
    policy_version: int = 0  # the learner version whose weights sampled the sampled segments
    reward: float | None = None
    rewards: dict[str, float] = field(default_factory=dict)  # reward components, unweighted
    errors: dict[str, str] = field(default_factory=dict)  # reward label -> why it has no value
    turn_rewards: list[float] = field(default_factory=list)
    # the environment's state before each sampled turn (``Environment.state``; empty when it has
    # none): turns of one group in equal states form GiGPO's step groups (rlvr.algo.gigpo)
    turn_states: list[str | None] = field(default_factory=list)
    # a reward's per-step rewards (weighted, summed over rewards; included in ``reward``) and the
    # response-ledger position of each step's last token (rlvr.collect.steps); empty without them
    step_rewards: list[float] = field(default_factory=list)
    step_ends: list[int] = field(default_factory=list)
    # Monte-Carlo values of the states at step boundaries (rlvr.collect.vine) and where they are
    mc_values: list[float] = field(default_factory=list)
    mc_ends: list[int] = field(default_factory=list)
    advantage: float | None = None  # filled by the learner (mean over tokens for token-level ones)
    # the learner's advantage of each response token (0 on context tokens), for samples.jsonl's
    # token view; not part of the JSONL ledger
    token_advantages: list[float] | None = None
    # a copy of a past sample mixed into a later group (rlvr.collect.replay): its sampling logprobs
    # and policy_version are the original ones, and the learner weights it by the importance ratio
    replayed: bool = False
    # the images among the response's context tokens (a multi-turn environment's observations): a
    # rlvr.vision.prompt.ImageSet, passed to the training forwards with the response; None without
    response_vision: Any = None

    @classmethod
    def from_completion(
        cls, completion: Completion, example_index: int, example_id: str, policy_version: int
    ) -> Trajectory:
        """The one-segment trajectory of a single-turn completion."""
        return cls(
            prompt_ids=copy_prompt(completion.prompt_ids),
            segments=[Segment(SAMPLED, list(completion.token_ids), list(completion.logprobs))],
            finish_reason=completion.finish_reason,
            text=completion.text,
            example_index=example_index,
            example_id=example_id,
            policy_version=policy_version,
        )

    @property
    def response_ids(self) -> list[int]:
        """Every response token, sampled and context, in ledger order."""
        return [t for s in self.segments for t in s.token_ids]

    @property
    def loss_mask(self) -> list[float]:
        """1.0 on sampled and given tokens (trained on), 0.0 on context tokens, per response token."""
        return [1.0 if s.kind in TRAINED else 0.0 for s in self.segments for _ in s.token_ids]

    @property
    def given_mask(self) -> list[float]:
        """1.0 on given tokens (trained on, not sampled by the policy: no sampling logprob)."""
        return [1.0 if s.kind == GIVEN else 0.0 for s in self.segments for _ in s.token_ids]

    @property
    def is_given(self) -> bool:
        """Whether any trained token was given rather than sampled (a demonstration)."""
        return any(s.kind == GIVEN for s in self.segments)

    @property
    def sampling_logprobs(self) -> list[float]:
        """The sampling logprob of each response token (0.0 on context tokens, which were not sampled)."""
        return [lp for s in self.segments for lp in (s.logprobs or [0.0] * len(s.token_ids))]

    @property
    def logprobs(self) -> list[float]:
        """The sampling logprobs of the sampled tokens only, in order (what token-level rewards read)."""
        return [lp for s in self.segments if s.kind == SAMPLED for lp in s.logprobs or []]

    @property
    def num_sampled(self) -> int:
        return sum(len(s.token_ids) for s in self.segments if s.kind == SAMPLED)

    @property
    def num_trained(self) -> int:
        return sum(len(s.token_ids) for s in self.segments if s.kind in TRAINED)

    def __len__(self) -> int:
        """The number of trained tokens (sampled or given): what a completion's length means."""
        return self.num_trained


@dataclass
class TrajectoryGroup:
    """The trajectories of one prompt, scored. ``baseline_reward`` is a greedy completion's reward
    (ReMax's baseline) when the learner's estimator asked for one."""

    example_index: int
    trajectories: list[Trajectory]
    baseline_reward: float | None = None
    # self-distillation: the prompt the teacher scores the sampled tokens under (the example's prompt
    # with privileged context; rlvr.train.stages.distill.TeacherPrompts); not part of the JSONL
    teacher_prompt_ids: list[int] | None = None
    # a role game (rlvr.roles): which role sampled the group, the role's prompt text when it is not
    # the example's, and the weight the learner multiplies into the group's advantages
    role: str | None = None
    role_prompt: str | None = None
    loss_weight: float = 1.0

    def __len__(self) -> int:
        return len(self.trajectories)

    @property
    def rewards(self) -> list[float | None]:
        return [t.reward for t in self.trajectories]


# ----------------------------------------------------------------------------------------- JSONL
def trajectory_record(t: Trajectory, group: int, kept: bool, **extra: Any) -> dict[str, Any]:
    """One JSONL row: ``group`` numbers the trajectory's group within the file; ``kept`` says
    whether the group went (or would go) to the learner; ``extra`` adds fields (e.g. ``step``)."""
    return {
        **extra,
        "group": group,
        "kept": kept,
        "example_index": t.example_index,
        "example_id": t.example_id,
        "policy_version": t.policy_version,
        "prompt_ids": t.prompt_ids,
        "segments": [
            {"kind": s.kind, "token_ids": s.token_ids, **({"logprobs": s.logprobs} if s.logprobs else {})}
            for s in t.segments
        ],
        "finish_reason": t.finish_reason,
        "text": t.text,
        "reward": t.reward,
        "rewards": t.rewards,
        "errors": t.errors,
        "turn_rewards": t.turn_rewards,
        **({"turn_states": t.turn_states} if t.turn_states else {}),
        **({"step_rewards": t.step_rewards} if t.step_rewards else {}),
        **({"step_ends": t.step_ends} if t.step_ends else {}),
        **({"mc_values": _nan_as_null(t.mc_values), "mc_ends": t.mc_ends} if t.mc_ends else {}),
        "advantage": t.advantage,
        **({"replayed": True} if t.replayed else {}),
    }


def group_records(
    groups: Sequence[TrajectoryGroup], kept: Sequence[bool | Sequence[bool]], first: int, **extra: Any
) -> Iterator[dict]:
    """The rows of ``groups``, numbered from ``first``; a baseline reward rides on each row of its group.
    ``kept`` holds one flag per group, or one per trajectory of the group (a group trained on its
    scored members only)."""
    for offset, (g, keep) in enumerate(zip(groups, kept, strict=True)):
        baseline = {} if g.baseline_reward is None else {"baseline_reward": g.baseline_reward}
        if g.role is not None:  # a role game's role (rlvr.roles), for the logs
            baseline["role"] = g.role
        flags = [keep] * len(g.trajectories) if isinstance(keep, bool) else list(keep)
        for t, flag in zip(g.trajectories, flags, strict=True):
            yield trajectory_record(t, first + offset, flag, **extra, **baseline)


def _trajectory_from_record(row: dict[str, Any]) -> Trajectory:
    segments = [Segment(s["kind"], list(s["token_ids"]), s.get("logprobs")) for s in row["segments"]]
    return Trajectory(
        prompt_ids=list(row["prompt_ids"]),
        segments=segments,
        finish_reason=row["finish_reason"],
        text=row.get("text", ""),
        example_index=int(row.get("example_index", -1)),
        example_id=str(row.get("example_id", "")),
        policy_version=int(row.get("policy_version", 0)),
        reward=row.get("reward"),
        rewards=dict(row.get("rewards") or {}),
        errors=dict(row.get("errors") or {}),
        turn_rewards=list(row.get("turn_rewards") or []),
        turn_states=_states(row.get("turn_states")),
        step_rewards=[float(x) for x in row.get("step_rewards") or []],
        step_ends=[int(x) for x in row.get("step_ends") or []],
        mc_values=[math.nan if x is None else float(x) for x in row.get("mc_values") or []],
        mc_ends=[int(x) for x in row.get("mc_ends") or []],
        replayed=bool(row.get("replayed", False)),
    )


def _nan_as_null(values: list[float]) -> list[float | None]:
    return [None if math.isnan(v) else v for v in values]


def _states(value: Any) -> list[str | None]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(x is None or isinstance(x, str) for x in value):
        raise ValueError("key 'turn_states' must be a list of strings or nulls")
    return list(value)


def read_trajectory_groups(
    path: str | Path, kept_only: bool = False, **where: Any
) -> list[tuple[TrajectoryGroup, bool]]:
    """``(group, kept)`` pairs from a trajectories JSONL file, in file order.

    ``where`` keeps only rows whose fields equal the given values (e.g. ``step=3`` in a run's
    ``trajectories.jsonl``). Malformed rows raise :class:`RlvrError` naming the file, line and key.
    """
    path = Path(path)
    if not path.exists():
        raise RlvrError(f"{path}: no such file")
    groups: dict[tuple[Any, ...], tuple[TrajectoryGroup, bool]] = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = loads_json(line, f"{path}:{number}")
            if any(row.get(k) != v for k, v in where.items()):
                continue
            trajectory = _trajectory_from_record(row)
            key = (row.get("step"), row["group"])
            kept = bool(row["kept"])
        except json.JSONDecodeError as err:
            raise RlvrError(f"{path}:{number}: not valid JSON ({err.msg})") from err
        except KeyError as err:
            raise RlvrError(f"{path}:{number}: missing key {err.args[0]!r}") from err
        except (TypeError, ValueError) as err:
            raise RlvrError(f"{path}:{number}: {err}") from err
        if trajectory.reward is not None and not math.isfinite(trajectory.reward):
            raise RlvrError(f"{path}:{number}: key 'reward' is not a finite number")
        if key not in groups:
            groups[key] = (TrajectoryGroup(trajectory.example_index, [], row.get("baseline_reward")), kept)
        group, group_kept = groups[key]
        if group_kept != kept or trajectory.prompt_ids != (group.trajectories or [trajectory])[0].prompt_ids:
            raise RlvrError(f"{path}:{number}: group {row['group']} mixes prompts or kept flags")
        group.trajectories.append(trajectory)
    pairs = list(groups.values())
    return [p for p in pairs if p[1]] if kept_only else pairs
