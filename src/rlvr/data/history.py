"""Prompt history: what every training example's rolled-out groups scored, step by step.

The collector records each scored group here (:meth:`PromptHistory.record`); selection before
rollout (:mod:`rlvr.data.selection`) and curricula (:mod:`rlvr.data.curriculum`) read it. Per
example it keeps the steps it was rolled out at (the last :data:`KEEP_STEPS`), the rewards of its
last group, its correct and scored sample counts (the pass rate), its streaks of all-correct and of
all-wrong groups, the policy version that last sampled it, how often selection skipped it, and its
first and latest pass rate (the report's "unsolved → solved" list). Unscored members (a reward
error, a timeout, an environment without a verdict) count in neither the pass rate nor a streak.

The whole history is a JSON-safe dict (:meth:`state`), saved in every checkpoint, so a resumed run
selects and orders prompts exactly as the uninterrupted one. :meth:`take_rows` hands the
orchestrator one ``prompt_history.jsonl`` row per group recorded since the last call.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from rlvr.trajectory import TrajectoryGroup

CORRECT_AT = 1.0 - 1e-6  # a sample is correct when its correctness component reaches 1 (as eval)


def correctness_key(cfg: Any) -> str:
    """The reward component that says whether an answer is right: the first reward's, or the
    environment's ``env/solved`` when only the environment rewards."""
    functions = cfg.rewards.functions
    return (functions[0].label or functions[0].name) if functions else "env/solved"


KEEP_STEPS = 16  # the steps an example was rolled out at that its record keeps (the latest)
EASY_AT, HARD_AT = 0.98, 0.11  # a group's mean correctness: all-correct at or above, all-wrong at or below


@dataclass
class PromptRecord:
    """The history of one training example."""

    groups: int = 0  # groups rolled out
    steps: list[int] = field(default_factory=list)  # the steps they were rolled out at (latest KEEP_STEPS)
    rewards: list[float | None] = field(default_factory=list)  # the last group's rewards (None: unscored)
    correct: int = 0  # correct samples, all groups
    scored: int = 0  # scored samples, all groups
    easy_streak: int = 0  # consecutive latest groups that were all correct
    hard_streak: int = 0  # consecutive latest groups that were all wrong
    zero_variance_streak: int = 0  # consecutive latest groups whose rewards were all equal
    version: int = -1  # the policy version that sampled its last group
    skipped: int = 0  # times selection skipped it before rollout
    first_pass: float | None = None  # pass rate of its first scored group
    last_pass: float | None = None  # pass rate of its latest scored group

    @property
    def pass_rate(self) -> float | None:
        """Correct over scored samples, all groups; None before any was scored."""
        return self.correct / self.scored if self.scored else None


class PromptHistory:
    """Per-example records of a run's rolled-out groups (indices into the collector's examples)."""

    def __init__(
        self, size: int, correctness: str, easy_at: float = EASY_AT, hard_at: float = HARD_AT
    ) -> None:
        self.size, self.correctness = size, correctness
        self.easy_at, self.hard_at = easy_at, hard_at
        self.records: dict[int, PromptRecord] = {}
        self._rows: list[dict[str, Any]] = []

    def get(self, index: int) -> PromptRecord:
        """The record of example ``index`` (an empty one if it was never rolled out)."""
        return self.records.get(index) or PromptRecord()

    def correct_flags(self, group: TrajectoryGroup) -> list[bool | None]:
        """Whether each member is correct (its correctness component reaches 1); None if unscored."""
        return [
            None if t.reward is None else t.rewards.get(self.correctness, 0.0) >= CORRECT_AT
            for t in group.trajectories
        ]

    @staticmethod
    def is_flat(group: TrajectoryGroup) -> bool:
        """Whether the group's scored rewards are all equal (what dynamic sampling drops)."""
        scored = [r for r in group.rewards if r is not None]
        return len(scored) > 1 and max(scored) - min(scored) <= 1e-6

    def record(self, groups: list[TrajectoryGroup], step: int, ids: list[str] | None = None) -> None:
        """Add freshly sampled, scored ``groups`` rolled out at ``step``."""
        for n, group in enumerate(groups):
            rec = self.records.setdefault(group.example_index, PromptRecord())
            flags = [f for f in self.correct_flags(group) if f is not None]
            rewards = group.rewards
            scored = [r for r in rewards if r is not None]
            rec.groups += 1
            rec.steps = [*rec.steps, step][-KEEP_STEPS:]
            rec.rewards = list(rewards)
            rec.version = max((t.policy_version for t in group.trajectories), default=rec.version)
            if not flags:  # nothing scored: no evidence either way, streaks unchanged
                passed = None
            else:
                passed = sum(flags) / len(flags)
                rec.correct += sum(flags)
                rec.scored += len(flags)
                rec.easy_streak = rec.easy_streak + 1 if passed >= self.easy_at else 0
                rec.hard_streak = rec.hard_streak + 1 if passed <= self.hard_at else 0
                flat = self.is_flat(group)
                rec.zero_variance_streak = rec.zero_variance_streak + 1 if flat else 0
                rec.first_pass = passed if rec.first_pass is None else rec.first_pass
                rec.last_pass = passed
            self._rows.append(
                {
                    "step": step,
                    "example": group.example_index,
                    **({"id": ids[n]} if ids else {}),
                    "pass": passed,
                    "reward_mean": sum(scored) / len(scored) if scored else None,
                    "unscored": len(rewards) - len(scored),
                    "easy_streak": rec.easy_streak,
                    "hard_streak": rec.hard_streak,
                    "version": rec.version,
                }
            )

    def note_skipped(self, index: int) -> None:
        """Selection skipped example ``index`` before rollout."""
        self.records.setdefault(index, PromptRecord()).skipped += 1

    def take_rows(self) -> list[dict[str, Any]]:
        """The ``prompt_history.jsonl`` rows recorded since the last call."""
        rows, self._rows = self._rows, []
        return rows

    def summary(self) -> dict[str, float]:
        """Metrics: examples seen, solved (latest pass rate > 0), mastered (all-correct streak)."""
        seen = [r for r in self.records.values() if r.groups]
        return {
            "history/seen": float(len(seen)),
            "history/solved": float(sum(1 for r in seen if (r.last_pass or 0.0) > 0)),
            "history/flipped": float(
                sum(1 for r in seen if r.first_pass == 0.0 and (r.last_pass or 0.0) > 0)
            ),
        }

    def state(self) -> dict[str, Any]:
        return {str(i): asdict(r) for i, r in sorted(self.records.items())}

    def load_state(self, state: dict[str, Any]) -> None:
        self.records = {int(i): PromptRecord(**r) for i, r in state.items()}
        self._rows = []
