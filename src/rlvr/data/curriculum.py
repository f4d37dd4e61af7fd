"""Curricula: prompts drawn by difficulty instead of a plain shuffle (``data.curriculum``, docs/data.md).

Three :class:`~rlvr.data.draw.Draw` kinds, each over a key resolved once per example at start-up:

- ``schedule`` (:class:`ScheduleOrder`): examples sorted easy to hard by ``key`` (a number; a list
  of keys sums their normalised ranks); a pacing function of the steps seen so far opens the
  easiest ``start`` share at step 0 and all of them at ``steps`` (``linear``, or ``root``: the
  competence curve ``sqrt(start² + (1 − start²)·t/steps)``). Prompts are drawn uniformly from the
  open pool without replacement until every open one was drawn (a *pass*), so none repeats early.
- ``band`` (:class:`BandOrder`): every prompt weighted by its measured pass rate (prime-rl's pool
  sampler): unseen, hard (≤ ``low``), in band (≤ ``high``), easy (above). A prompt whose last
  ``retire_after`` groups were all correct is *retired*: it keeps only the small weight
  ``w_retired`` (revisited now and then; a failed revisit ends its streak and it is back), so
  mastered prompts do not keep returning (the pitfall of a stateless filter, which rolls them out
  again and only then drops them).
- ``bandit`` (:class:`BanditOrder`): categories (the values of ``key``) chosen by a softmax over
  ``Q``, the learning signal each gave; ``Q ← α·r + (1 − α)·Q`` per observed batch, where ``r`` is
  the mean over the category's groups of the mean |reward − group mean|, the size of the
  (un-normalised) advantages those groups will get. It is measured at collection time, from the
  rewards: the learner computes the advantages themselves later.

Randomness comes from a fresh ``random.Random`` per :meth:`take`, seeded by (seed, kind, take
count), so a draw's whole state is a few counters (plus the bandit's Q) and a resumed run draws
exactly what the uninterrupted one would have.
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Sequence
from typing import Any

from rlvr.config.data_plan import CurriculumConfig
from rlvr.data.draw import Draw
from rlvr.data.example import Example
from rlvr.data.history import PromptHistory
from rlvr.data.sampler import PromptSampler
from rlvr.errors import RlvrError
from rlvr.trajectory import TrajectoryGroup

MAX_CATEGORIES = 64  # a bandit over more arms than this is a key that names rows, not categories


def build_curriculum(
    cfg: CurriculumConfig, examples: Sequence[Example], history: PromptHistory, seed: int
) -> Draw:
    """The curriculum ``data.curriculum`` asks for over ``examples`` (indices into it)."""
    if not examples:
        raise RlvrError("data.curriculum: there are no training examples to draw from")
    if cfg.kind == "schedule":
        keys = [cfg.key] if isinstance(cfg.key, str) else list(cfg.key or [])
        return ScheduleOrder(difficulties(examples, keys), history, seed, **cfg.params)
    if cfg.kind == "band":
        return BandOrder(len(examples), history, seed, **cfg.params)
    if cfg.kind == "bandit":
        assert isinstance(cfg.key, str)  # the config refuses a list for kind=bandit
        return BanditOrder([key_value(e, cfg.key) for e in examples], cfg.key, seed, **cfg.params)
    raise RlvrError(f"data.curriculum.kind={cfg.kind!r}: not a curriculum (schedule, band or bandit)")


# ----------------------------------------------------------------------------------- keys
def key_value(example: Example, key: str) -> Any:
    """``example``'s value at ``key`` (``data_source`` or ``metadata.<dotted.path>``)."""
    if key == "data_source":
        return example.data_source
    value: Any = example.metadata
    for part in key.split(".")[1:]:
        if not isinstance(value, dict) or part not in value or value[part] is None:
            raise RlvrError(
                f"data.curriculum.key={key}: {example.where} has no {key} (its metadata keys: "
                f"{', '.join(map(str, example.metadata)) or 'none'})"
            )
        value = value[part]
    if not isinstance(value, (str, int, float, bool)):
        raise RlvrError(
            f"data.curriculum.key={key}: {example.where} has a {type(value).__name__} there, not a "
            "number or a name"
        )
    return value


def difficulties(examples: Sequence[Example], keys: list[str]) -> list[float]:
    """Each example's difficulty: its number at the one key, or the sum over several keys of its
    normalised rank (0 for the key's smallest value, 1 for its largest, evenly between)."""
    columns = []
    for key in keys:
        column = []
        for example in examples:
            value = key_value(example, key)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise RlvrError(
                    f"data.curriculum.key={key}: {example.where} has {value!r}, not a finite number "
                    "(kind=schedule orders examples by it)"
                )
            column.append(float(value))
        columns.append(column)
    if len(columns) == 1:
        return columns[0]
    total = [0.0] * len(examples)
    for column in columns:
        levels = sorted(set(column))
        rank = {v: (n / (len(levels) - 1) if len(levels) > 1 else 0.0) for n, v in enumerate(levels)}
        total = [t + rank[v] for t, v in zip(total, column)]
    return total


def _rng(kind: str, seed: int, takes: int) -> random.Random:
    return random.Random(f"curriculum-{kind}-{seed}-{takes}")


def _latest_step(groups: list[TrajectoryGroup], history: PromptHistory) -> int:
    """The step the collector recorded these groups at (0 if none was recorded)."""
    return max((history.get(g.example_index).steps[-1:] or [0])[0] for g in groups) if groups else 0


# ----------------------------------------------------------------------------------- schedule
class ScheduleOrder:
    """Easy to hard: a growing pool of the easiest examples, drawn without replacement per pass."""

    def __init__(
        self,
        difficulty: list[float],
        history: PromptHistory,
        seed: int,
        start: float = 0.25,
        steps: int = 1,
        shape: str = "linear",
    ) -> None:
        self.difficulty, self.history, self.seed = difficulty, history, seed
        self.start, self.steps, self.shape = start, steps, shape
        # easiest first; examples of equal difficulty in a seeded order
        tie = list(range(len(difficulty)))
        random.Random(f"curriculum-order-{seed}").shuffle(tie)
        self.order = sorted(range(len(difficulty)), key=lambda i: (difficulty[i], tie[i]))
        self.step = 0  # steps observed (the collector's latest round)
        self.takes = 0
        self.drawn: set[int] = set()  # drawn in the current pass
        self._taken: list[int] = []
        self._open: int | None = None  # the pool the latest take drew from

    def fraction(self, step: int) -> float:
        """The share of examples open at ``step`` (steps observed so far)."""
        progress = min(1.0, step / self.steps)
        if self.shape == "root":
            return min(1.0, math.sqrt(self.start**2 + (1 - self.start**2) * progress))
        return min(1.0, self.start + (1 - self.start) * progress)

    def available(self) -> int:
        """How many of the easiest examples are open now (at least one)."""
        size = len(self.order)
        return max(1, min(size, math.ceil(self.fraction(self.step) * size - 1e-9)))

    def take(self, count: int) -> list[int]:
        rng = _rng("schedule", self.seed, self.takes)
        self.takes += 1
        self._open = self.available()
        pool = self.order[: self._open]
        out: list[int] = []
        while len(out) < count:
            left = [i for i in pool if i not in self.drawn]
            if not left:  # a new pass; this batch's prompts count as drawn in it when others remain
                self.drawn = {i for i in out if i in pool} if len(pool) > len(set(out)) else set()
                left = [i for i in pool if i not in self.drawn]
            chosen = rng.sample(left, min(count - len(out), len(left)))
            self.drawn.update(chosen)
            out.extend(chosen)
        self._taken.extend(out)
        return out

    def observe(self, groups: list[TrajectoryGroup]) -> None:
        self.step = max(self.step, _latest_step(groups, self.history))

    def state(self) -> dict[str, Any]:
        return {"step": self.step, "takes": self.takes, "drawn": sorted(self.drawn)}

    def load_state(self, state: dict[str, Any]) -> None:
        self.step, self.takes = int(state["step"]), int(state["takes"])
        self.drawn = {int(i) for i in state["drawn"]}

    def metrics(self) -> dict[str, float]:
        # the share open when this step's prompts were drawn (after its groups: the next step's)
        n_open = self.available() if self._open is None else self._open
        out = {"curriculum/available": n_open / len(self.order)}
        if self._taken:
            drawn = [self.difficulty[i] for i in self._taken]
            out["curriculum/mean_difficulty"] = sum(drawn) / len(drawn)
        self._taken, self._open = [], None
        return out


# ----------------------------------------------------------------------------------- band
BAND_CLASSES = ("unseen", "hard", "band", "easy", "retired")


class BandOrder:
    """Prompts weighted by their measured pass rate; mastered ones retired (prime-rl's pool sampler)."""

    def __init__(
        self,
        size: int,
        history: PromptHistory,
        seed: int,
        low: float = 0.25,
        high: float = 0.75,
        w_unseen: float = 1.0,
        w_hard: float = 0.2,
        w_band: float = 1.0,
        w_easy: float = 0.2,
        retire_after: int = 2,
        w_retired: float = 0.02,
        rate: str = "last",
    ) -> None:
        self.size, self.history, self.seed = size, history, seed
        self.low, self.high, self.retire_after, self.rate = low, high, retire_after, rate
        self.weights = {
            "unseen": w_unseen,
            "hard": w_hard,
            "band": w_band,
            "easy": w_easy,
            "retired": w_retired,
        }
        self.takes = 0
        self._drawn = dict.fromkeys(BAND_CLASSES, 0)

    def classify(self, index: int) -> str:
        """Which class example ``index`` is in now, by its history."""
        rec = self.history.get(index)
        if self.retire_after and rec.easy_streak >= self.retire_after:
            return "retired"
        passed = rec.last_pass if self.rate == "last" else rec.pass_rate
        if passed is None:
            return "unseen"
        return "hard" if passed <= self.low else "band" if passed <= self.high else "easy"

    def weight(self, index: int) -> float:
        """The weight example ``index`` is drawn with now."""
        return self.weights[self.classify(index)]

    def take(self, count: int) -> list[int]:
        rng = _rng("band", self.seed, self.takes)
        self.takes += 1
        classes = [self.classify(i) for i in range(self.size)]
        # weighted sampling without replacement: the smallest keys Exp(1)/w (Efraimidis-Spirakis)
        keyed = []
        for i, c in enumerate(classes):
            if self.weights[c] > 0:
                keyed.append((rng.expovariate(1.0) / self.weights[c], i))
        out = [i for _, i in sorted(keyed)[:count]]
        while len(out) < count:  # fewer prompts of positive weight: the rest uniformly, then repeats
            chosen = set(out)
            rest = [i for i in range(self.size) if i not in chosen] or list(range(self.size))
            out += rng.sample(rest, min(count - len(out), len(rest)))
        for i in out:
            self._drawn[classes[i]] += 1
        return out

    def observe(self, groups: list[TrajectoryGroup]) -> None:
        pass  # the collector recorded the groups in the history this reads

    def state(self) -> dict[str, Any]:
        return {"takes": self.takes}

    def load_state(self, state: dict[str, Any]) -> None:
        self.takes = int(state["takes"])

    def metrics(self) -> dict[str, float]:
        retired = sum(self.classify(i) == "retired" for i in range(self.size))
        out = {"curriculum/retired": retired / self.size}
        total = sum(self._drawn.values())
        if total:
            out.update({f"curriculum/share_{c}": n / total for c, n in self._drawn.items()})
        self._drawn = dict.fromkeys(BAND_CLASSES, 0)
        return out


# ----------------------------------------------------------------------------------- bandit
def group_signal(group: TrajectoryGroup) -> float | None:
    """Mean |reward − group mean| over the scored members; None with fewer than two scored."""
    scored = [r for r in group.rewards if r is not None]
    if len(scored) < 2:
        return None
    mean = sum(scored) / len(scored)
    return sum(abs(r - mean) for r in scored) / len(scored)


class BanditOrder:
    """Categories chosen by softmax(Q/τ) over their learning signal, then a prompt of the category."""

    def __init__(
        self,
        values: list[Any],
        key: str,
        seed: int,
        alpha: float = 0.5,
        temperature: float = 0.1,
        explore: float = 0.05,
    ) -> None:
        self.seed, self.alpha, self.temperature, self.explore = seed, alpha, temperature, explore
        labels = [str(v) for v in values]
        self.labels = sorted(set(labels))
        if len(self.labels) > MAX_CATEGORIES:
            raise RlvrError(
                f"data.curriculum.key={key} has {len(self.labels)} values; kind=bandit takes at most "
                f"{MAX_CATEGORIES} categories (a key such as data_source or a difficulty level, not one "
                "that differs per row)"
            )
        self.category = labels  # example index -> its category
        self.members = {c: [i for i, v in enumerate(labels) if v == c] for c in self.labels}
        self.orders = {
            c: PromptSampler(len(self.members[c]), seed * 1009 + n) for n, c in enumerate(self.labels)
        }
        self.q = dict.fromkeys(self.labels, 0.0)
        self.takes = 0
        self._drawn = dict.fromkeys(self.labels, 0)

    def probabilities(self) -> list[float]:
        """The chance of each category (``self.labels`` order): softmax(Q/τ), floored by explore."""
        top = max(self.q.values())
        raw = [math.exp((self.q[c] - top) / self.temperature) for c in self.labels]
        k = len(self.labels)
        return [(1 - self.explore) * r / sum(raw) + self.explore / k for r in raw]

    def take(self, count: int) -> list[int]:
        rng = _rng("bandit", self.seed, self.takes)
        self.takes += 1
        chosen = rng.choices(self.labels, weights=self.probabilities(), k=count)
        out = []
        for c in chosen:
            out.append(self.members[c][self.orders[c].take(1)[0]])
            self._drawn[c] += 1
        return out

    def observe(self, groups: list[TrajectoryGroup]) -> None:
        signals: dict[str, list[float]] = {}
        for group in groups:
            s = group_signal(group)
            if s is not None:
                signals.setdefault(self.category[group.example_index], []).append(s)
        for c, values in signals.items():
            self.q[c] = self.alpha * (sum(values) / len(values)) + (1 - self.alpha) * self.q[c]

    def state(self) -> dict[str, Any]:
        return {
            "takes": self.takes,
            "q": dict(self.q),
            "orders": {c: self.orders[c].state() for c in self.labels},
        }

    def load_state(self, state: dict[str, Any]) -> None:
        if set(state["q"]) != set(self.labels):
            raise RlvrError(
                "data.curriculum: the checkpoint's bandit categories "
                f"({', '.join(sorted(state['q']))}) are not this run's ({', '.join(self.labels)})"
            )
        self.takes = int(state["takes"])
        self.q = {c: float(state["q"][c]) for c in self.labels}
        for n, c in enumerate(self.labels):
            self.orders[c] = PromptSampler(len(self.members[c]), self.seed * 1009 + n, **state["orders"][c])

    def metrics(self) -> dict[str, float]:
        out = {f"curriculum/q/{_metric_name(c)}": self.q[c] for c in self.labels}
        total = sum(self._drawn.values())
        if total:
            out.update({f"curriculum/share/{_metric_name(c)}": n / total for c, n in self._drawn.items()})
        self._drawn = dict.fromkeys(self.labels, 0)
        return out


def _metric_name(label: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", label)[:40] or "_"
