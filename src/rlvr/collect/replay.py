"""Replay of past trajectories: a buffer of scored samples mixed into new groups (the RePO family,
seeds/002:22; docs/data.md, "Replay").

Every collect round the collector first mixes stored samples into the round's scored groups
(:meth:`ReplayBuffer.mix`), then stores that round's freshly sampled, scored trajectories
(:meth:`ReplayBuffer.add`), so a group never meets its own samples. Two rules (``data.replay.kind``):

- ``best_correct``: a group with no correct member gets the best stored correct sample of its
  prompt (highest reward, then newest) in place of its lowest-reward member. A prompt the policy
  solved once keeps a learning signal while the policy no longer solves it. The buffer keeps only
  correct samples under this rule (the only ones it replays).
- ``share``: ``round(share × size)`` members of every group (at least one fresh member stays) are
  replaced by stored samples of its prompt, best first.

A replayed copy keeps the sampling logprobs and the ``policy_version`` it was sampled with and is
marked ``replayed``; the learner weights its tokens by the truncated importance ratio
``min(π_old / π_behaviour, data.replay.cap)`` (:mod:`rlvr.train.learn.update`). Samples more than
``max_age`` versions old are not replayed. A changed group is a new :class:`TrajectoryGroup` (the
sampled one stays as sampled, for the logs); its fresh members are the sampled objects themselves.

Every group of a round is stored (a peer trainer buffered only its first group: TRL#6804), each
trajectory as a copy, so the learner's writes (advantages) never reach the buffer. The buffer is
bounded by ``capacity`` trajectories, the oldest leaving first; its whole content is a JSON-safe
dict (:meth:`state`), saved in checkpoints, so a resumed run replays exactly what the uninterrupted
one would.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from rlvr.config.data_plan import ReplayConfig
from rlvr.data.history import CORRECT_AT
from rlvr.errors import RlvrError
from rlvr.trajectory import Segment, Trajectory, TrajectoryGroup
from rlvr.vision.prompt import copy_prompt

_FIELDS = (
    "prompt_ids",
    "finish_reason",
    "text",
    "example_index",
    "example_id",
    "policy_version",
    "reward",
    "rewards",
    "errors",
    "turn_rewards",
    "turn_states",
    "step_rewards",
    "step_ends",
)


def _copy(t: Trajectory, replayed: bool) -> Trajectory:
    """A copy of ``t`` that shares no list or dict with it, without the learner's advantages."""
    return replace(
        t,
        prompt_ids=copy_prompt(t.prompt_ids),
        segments=[
            Segment(s.kind, list(s.token_ids), None if s.logprobs is None else list(s.logprobs))
            for s in t.segments
        ],
        rewards=dict(t.rewards),
        errors=dict(t.errors),
        turn_rewards=list(t.turn_rewards),
        turn_states=list(t.turn_states),
        step_rewards=list(t.step_rewards),
        step_ends=list(t.step_ends),
        advantage=None,
        token_advantages=None,
        replayed=replayed,
    )


def _reward(t: Trajectory) -> float:
    """The trained-on total; an unscored member (never mixed in: the collector passes scored ones)
    counts as the lowest."""
    return t.reward if t.reward is not None else float("-inf")


def _to_record(t: Trajectory) -> dict[str, Any]:
    return {
        **{k: getattr(t, k) for k in _FIELDS},
        "segments": [[s.kind, s.token_ids, s.logprobs] for s in t.segments],
    }


def _from_record(row: dict[str, Any]) -> Trajectory:
    fields = {k: row[k] for k in _FIELDS if k in row}  # fields newer than the saved buffer: defaults
    segments = [
        Segment(kind, list(ids), None if lps is None else list(lps)) for kind, ids, lps in row["segments"]
    ]
    return Trajectory(segments=segments, **fields)


class ReplayBuffer:
    """Past scored trajectories per training example, mixed into new groups by ``cfg.kind``'s rule.

    ``correctness`` names the reward component that says a sample is right (as
    :class:`rlvr.data.history.PromptHistory`). ``seed`` is accepted for the collector's interface:
    the rules are deterministic (a group's fresh members are exchangeable, so the last ones leave).
    """

    def __init__(self, cfg: ReplayConfig, correctness: str, seed: int = 0) -> None:
        if cfg.kind not in ("best_correct", "share"):
            raise RlvrError(
                f"data.replay.kind: a replay buffer needs best_correct or share, not {cfg.kind!r}"
            )
        self.cfg, self.correctness, self.seed = cfg, correctness, seed
        self.entries: dict[int, Trajectory] = {}  # insertion number -> stored copy, oldest first
        self.by_example: dict[int, list[int]] = {}  # example index -> its insertion numbers, oldest first
        self.next = 0  # the next insertion number
        self._replayed = 0  # since the last metrics() call
        self._rescued = 0
        self._ages: list[int] = []

    def __len__(self) -> int:
        return len(self.entries)

    def correct(self, t: Trajectory) -> bool:
        return t.reward is not None and t.rewards.get(self.correctness, 0.0) >= CORRECT_AT

    # ----------------------------------------------------------------------------- storing
    def add(self, groups: list[TrajectoryGroup]) -> None:
        """Store copies of every group's scored (under best_correct: correct) sampled trajectories;
        replayed copies are never stored again. The oldest leave beyond ``capacity``."""
        for group in groups:
            for t in group.trajectories:
                if t.replayed or t.reward is None:
                    continue
                if self.cfg.kind == "best_correct" and not self.correct(t):
                    continue
                self.entries[self.next] = _copy(t, replayed=False)
                self.by_example.setdefault(t.example_index, []).append(self.next)
                self.next += 1
        self._evict()

    def _evict(self) -> None:
        while len(self.entries) > self.cfg.capacity:
            number = next(iter(self.entries))
            t = self.entries.pop(number)
            numbers = self.by_example[t.example_index]
            numbers.remove(number)
            if not numbers:
                del self.by_example[t.example_index]

    def candidates(self, example_index: int, version: int, correct_only: bool) -> list[Trajectory]:
        """The stored samples of an example within ``max_age`` of ``version``, best first (highest
        reward, then newest)."""
        max_age = self.cfg.max_age
        found = []
        for number in self.by_example.get(example_index, []):
            t = self.entries[number]
            if max_age is not None and version - t.policy_version > max_age:
                continue
            if correct_only and not self.correct(t):
                continue
            found.append((t.reward, number, t))
        found.sort(key=lambda item: (item[0], item[1]), reverse=True)
        return [t for _, _, t in found]

    # ----------------------------------------------------------------------------- mixing
    def mix(self, groups: list[TrajectoryGroup], version: int) -> list[TrajectoryGroup]:
        """``groups`` with stored samples mixed in by the rule; a changed group is a new object
        (the given ones are never mutated), an unchanged one is returned as is."""
        return [self._mix_one(g, version) for g in groups]

    def _mix_one(self, group: TrajectoryGroup, version: int) -> TrajectoryGroup:
        members = list(group.trajectories)
        if not members:
            return group
        if self.cfg.kind == "best_correct":
            if any(self.correct(t) for t in members):
                return group
            best = self.candidates(group.example_index, version, correct_only=True)
            if not best:
                return group
            worst = min(range(len(members)), key=lambda i: _reward(members[i]))
            members[worst] = self._replayed_copy(best[0], version)
            self._rescued += 1
        else:
            count = min(round(self.cfg.share * len(members)), len(members) - 1)
            past = self.candidates(group.example_index, version, correct_only=False)[:count]
            if not past:
                return group
            members[len(members) - len(past) :] = [self._replayed_copy(t, version) for t in past]
        return replace(group, trajectories=members)

    def _replayed_copy(self, t: Trajectory, version: int) -> Trajectory:
        self._replayed += 1
        self._ages.append(version - t.policy_version)
        return _copy(t, replayed=True)

    def metrics(self) -> dict[str, float]:
        """``replay/*`` since the previous call: buffer size, samples mixed in, best_correct groups
        rescued, and (when any was mixed in) their mean age in policy versions."""
        metrics = {
            "replay/buffer_size": float(len(self.entries)),
            "replay/replayed": float(self._replayed),
            "replay/groups_rescued": float(self._rescued),
        }
        if self._ages:
            metrics["replay/mean_age"] = sum(self._ages) / len(self._ages)
        self._replayed, self._rescued, self._ages = 0, 0, []
        return metrics

    # ----------------------------------------------------------------------------- state
    def state(self) -> dict[str, Any]:
        """The stored samples in insertion order, with their numbers (JSON-safe)."""
        return {"next": self.next, "entries": [[n, _to_record(t)] for n, t in self.entries.items()]}

    def load_state(self, state: dict[str, Any]) -> None:
        try:
            entries = {int(n): _from_record(row) for n, row in state["entries"]}
            nxt = int(state["next"])
        except (KeyError, TypeError, ValueError) as err:
            raise RlvrError(f"checkpoint state 'replay' is malformed ({err!r})") from err
        self.entries, self.next, self.by_example = entries, nxt, {}
        for number, t in entries.items():
            self.by_example.setdefault(t.example_index, []).append(number)
        self._evict()  # a smaller data.replay.capacity on resume
