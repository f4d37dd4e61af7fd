"""Selection before rollout (the GRESO family, seeds/000:18): skip prompts that will likely give
no learning signal before any completion is sampled for them.

A prompt whose latest ``z`` groups were all correct (its ``easy_streak``) or all wrong (its
``hard_streak``, :class:`~rlvr.data.history.PromptHistory`) is rolled out with probability
``max(p ** z, explore)`` and skipped otherwise, with ``p`` = ``p_easy`` or ``p_hard``: the longer
the streak, the likelier the skip, and ``explore`` keeps a floor so every prompt is retried now and
then (its streak may have ended). A prompt never rolled out, or whose last group was mixed, is
always rolled out. Skipped prompts are replaced by more drawn from the order underneath (the
batch is refilled), for at most ``max_draws`` rounds per :meth:`GresoSelection.take`.

The two bases adapt after every rolled-out batch (:meth:`GresoSelection.observe`), toward a target
share of zero-variance groups (``target_zero_variance``, split ``easy_share`` all-correct and the
rest all-wrong): when more of the batch's groups were all correct than the target, ``p_easy``
falls by ``p_step`` (a lower base skips more), when fewer it rises (skips less); ``p_hard`` the
same for all-wrong groups; both stay within ``[p_min, p_max]``.
"""

from __future__ import annotations

import random
from typing import Any

from rlvr.config.data_plan import SelectionConfig
from rlvr.data.draw import Draw
from rlvr.data.history import PromptHistory
from rlvr.trajectory import TrajectoryGroup


def rng_state(rng: random.Random) -> list[Any]:
    """``rng``'s state as JSON-safe lists (``random.Random.getstate`` holds tuples)."""
    version, internal, gauss = rng.getstate()
    return [version, list(internal), gauss]


def set_rng_state(rng: random.Random, state: list[Any]) -> None:
    """Restore what :func:`rng_state` saved (lists back to tuples)."""
    version, internal, gauss = state
    rng.setstate((version, tuple(internal), gauss))


class GresoSelection:
    """A :class:`~rlvr.data.draw.Draw` that skips prompts with a streak of zero-variance groups."""

    def __init__(
        self, cfg: SelectionConfig, inner: Draw, history: PromptHistory, seed: int, group_size: int
    ) -> None:
        self.cfg, self.inner, self.history, self.group_size = cfg, inner, history, group_size
        self.p_easy = self.p_hard = cfg.p_start
        # its own stream, apart from the order's and the sampling engine's
        self.rng = random.Random(f"greso-{seed}")
        self.skipped_total = 0
        self.forced_total = 0
        self._since = self._fresh()

    @staticmethod
    def _fresh() -> dict[str, int]:
        return {"skipped": 0, "candidates": 0, "rounds": 0, "forced": 0, "easy": 0, "hard": 0, "groups": 0}

    # ------------------------------------------------------------------------ selection
    def rollout_probability(self, index: int) -> float:
        """The probability that example ``index`` is rolled out when drawn: 1 without a streak,
        else ``max(p ** z, explore)``."""
        rec = self.history.get(index)
        if self.cfg.signal == "reward":  # a run of groups whose total rewards were all equal
            if rec.zero_variance_streak == 0:
                return 1.0
            p = self.p_easy if (rec.last_pass or 0.0) >= 0.5 else self.p_hard
            return max(p**rec.zero_variance_streak, self.cfg.explore)
        if rec.easy_streak > 0:
            return max(self.p_easy**rec.easy_streak, self.cfg.explore)
        if rec.hard_streak > 0:
            return max(self.p_hard**rec.hard_streak, self.cfg.explore)
        return 1.0

    def take(self, count: int) -> list[int]:
        """``count`` example indices to roll out, skipped ones replaced by more drawn from the order.

        After ``max_draws`` rounds it returns what it admitted (possibly fewer than ``count``); when
        that is nothing, the last round's candidates are rolled out anyway (``selection/forced``)."""
        admitted: list[int] = []
        skipped: list[int] = []
        candidates: list[int] = []
        for _ in range(self.cfg.max_draws):
            if len(admitted) >= count:
                break
            candidates = self.inner.take(count - len(admitted))
            self._since["rounds"] += 1
            self._since["candidates"] += len(candidates)
            if not candidates:
                break
            for index in candidates:
                p = self.rollout_probability(index)
                if p >= 1.0 or self.rng.random() < p:
                    admitted.append(index)
                else:
                    skipped.append(index)
        if not admitted and count > 0 and candidates:
            # nothing passed in max_draws rounds: an empty step trains nothing, so roll out the last
            # round's candidates rather than none (they are not counted as skipped)
            admitted = list(candidates)
            skipped = skipped[: -len(candidates)]  # the last round's, all skipped, come last
            self._since["forced"] += len(admitted)
            self.forced_total += len(admitted)
        for index in skipped:
            self.history.note_skipped(index)
        self._since["skipped"] += len(skipped)
        self.skipped_total += len(skipped)
        return admitted

    # ------------------------------------------------------------------------ adaptation
    def observe(self, groups: list[TrajectoryGroup]) -> None:
        """Move ``p_easy`` / ``p_hard`` by ``p_step`` toward the target zero-variance shares.

        A group is all-correct when its scored members' share of correct answers reaches
        ``easy_at``, all-wrong at or below ``hard_at`` (groups with no scored member are not
        counted). More all-correct groups than ``target_zero_variance * easy_share`` of the batch
        lowers ``p_easy`` (easy prompts are skipped more), fewer raises it; ``p_hard`` likewise
        against ``target_zero_variance * (1 - easy_share)``."""
        easy = hard = counted = 0
        for group in groups:
            flags = [f for f in self.history.correct_flags(group) if f is not None]
            if not flags:
                continue
            counted += 1
            passed = sum(flags) / len(flags)
            if self.cfg.signal == "reward":  # zero-variance groups, told apart by their pass rate
                if self.history.is_flat(group):
                    easy, hard = (easy + 1, hard) if passed >= 0.5 else (easy, hard + 1)
            elif passed >= self.cfg.easy_at:
                easy += 1
            elif passed <= self.cfg.hard_at:
                hard += 1
        self._adapt(easy, hard, counted)

    def _adapt(self, easy: int, hard: int, groups: int) -> None:
        """Adapt to a batch of ``groups`` rolled-out groups, ``easy`` all-correct and ``hard`` all-wrong."""
        if not groups:
            return
        c = self.cfg
        self._since["easy"] += easy
        self._since["hard"] += hard
        self._since["groups"] += groups
        self.p_easy = self._step(self.p_easy, easy / groups, c.target_zero_variance * c.easy_share)
        self.p_hard = self._step(self.p_hard, hard / groups, c.target_zero_variance * (1 - c.easy_share))

    def _step(self, p: float, share: float, target: float) -> float:
        if share > target:  # too many zero-variance groups of this kind: skip more
            p -= self.cfg.p_step
        elif share < target:  # too few: skip less
            p += self.cfg.p_step
        return min(self.cfg.p_max, max(self.cfg.p_min, p))

    # ------------------------------------------------------------------------ reporting, state
    def metrics(self) -> dict[str, float]:
        """Since the previous call: prompts skipped, the rollouts (completions) that saved, draw
        rounds, forced admissions, zero-variance shares; the bases now; rollouts saved in all; and
        the order's own metrics."""
        s, self._since = self._since, self._fresh()
        out = {
            "selection/skipped": float(s["skipped"]),
            "selection/rollouts_saved": float(s["skipped"] * self.group_size),
            "selection/rollouts_saved_total": float(self.skipped_total * self.group_size),
            "selection/p_easy": self.p_easy,
            "selection/p_hard": self.p_hard,
            "selection/draw_rounds": float(s["rounds"]),
            "selection/forced": float(s["forced"]),
        }
        if s["candidates"]:
            out["selection/skip_rate"] = s["skipped"] / s["candidates"]
        if s["groups"]:
            out["selection/easy_share"] = s["easy"] / s["groups"]
            out["selection/hard_share"] = s["hard"] / s["groups"]
        return {**self.inner.metrics(), **out}

    def state(self) -> dict[str, Any]:
        """JSON-safe: the bases, the RNG, the running totals, and the order's state under ``inner``."""
        return {
            "selection": {
                "p_easy": self.p_easy,
                "p_hard": self.p_hard,
                "rng": rng_state(self.rng),
                "skipped_total": self.skipped_total,
                "forced_total": self.forced_total,
            },
            "inner": self.inner.state(),
        }

    def load_state(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state`. A state without ``inner`` is the order's own (a checkpoint of a run
        without selection): the order resumes from it and selection starts afresh."""
        if "inner" not in state:
            self.inner.load_state(state)
            return
        own = state["selection"]
        self.p_easy, self.p_hard = float(own["p_easy"]), float(own["p_hard"])
        set_rng_state(self.rng, own["rng"])
        self.skipped_total = int(own["skipped_total"])
        self.forced_total = int(own.get("forced_total", 0))
        self.inner.load_state(state["inner"])
        self._since = self._fresh()
