"""A weighted mixture of data sources (``data.sources``), each scored by its own reward.

Each source is loaded as a run of that source alone would load it (:func:`load_mixture`); its
examples carry the source's name (``data_source``, the eval group and the ``source/<name>/*``
metrics) and the reward that scores them (``verifier``, which the routing ``verifier`` reward reads).
Training draws a source with probability proportional to its weight, then that source's next
example from its own seeded shuffle (:class:`MixtureOrder`); the held-out set is every source's own.
"""

from __future__ import annotations

import random
import zlib
from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from rlvr.config.data_plan import SourceItem, check_source_names
from rlvr.config.defaults import SOURCE_REWARDS
from rlvr.config.schema import DataConfig
from rlvr.data.example import Example
from rlvr.data.sampler import PromptSampler
from rlvr.data.split import drop_overlap
from rlvr.errors import RlvrError
from rlvr.trajectory import Trajectory, TrajectoryGroup

if TYPE_CHECKING:
    from rlvr.data.from_config import Datasets

CORRECT_AT = 1.0 - 1e-6  # a sample is correct when its correctness component reaches 1 (as eval)


# ------------------------------------------------------------------------------------------ loading
def source_config(item: SourceItem, data: DataConfig) -> DataConfig:
    """The config of a run of ``item`` alone: its own data keys, the mixture's shared ones
    (``system_prompt``, ``answer_format`` unless the source sets its own, ``few_shot``, ``seed``)."""
    table = item.source in ("file", "hf")
    return DataConfig(
        source=item.source,
        task=None if table else item.task,
        task_config=dict(item.task_config),
        path=item.path,
        split=item.split,
        eval_path=item.eval_path,
        eval_split=item.eval_split,
        question_key=item.question_key,
        answer_key=item.answer_key,
        messages_key=item.messages_key,
        id_key=item.id_key,
        train_size=item.train_size,
        eval_size=item.eval_size,
        seed=data.seed,
        system_prompt=data.system_prompt,
        few_shot=list(data.few_shot),
        answer_format=data.answer_format if item.answer_format is None else item.answer_format,
    )


def load_mixture(data: DataConfig) -> Datasets:
    """Every source's training and held-out examples, named by source and routed to its reward.

    Example ids are prefixed with the source's name (two sources of one task would otherwise share
    ids); a training example whose question another source holds out is left out of training.
    """
    from rlvr.data.from_config import Datasets, load_datasets

    check_source_names([item.name for item in data.sources])
    train: list[Example] = []
    held_out: list[Example] = []
    readings, origins = [], []
    for i, item in enumerate(data.sources):
        try:
            part = load_datasets(source_config(item, data))
        except RlvrError as err:
            raise RlvrError(f"data.sources[{i}] ({item.name}): {err}") from err
        for example in (*part.train, *part.held_out):
            example.id = f"{item.name}/{example.id}"
            example.data_source = item.name
            example.verifier = item.reward or example.verifier or SOURCE_REWARDS[item.source]
        train.extend(part.train)
        held_out.extend(part.held_out)
        if part.reading:
            readings.append(f"{item.name}: {part.reading}")
        origins.append(
            f"{item.name} {len(part.held_out)}" + (f" ({part.held_out_from})" if part.held_out_from else "")
        )
    train, dropped = drop_overlap(train, held_out)
    for i, item in enumerate(data.sources):
        if not any(e.data_source == item.name for e in train):
            raise RlvrError(
                f"data.sources[{i}] ({item.name}): every training example repeats a question another "
                "source holds out"
            )
    if len({bool(e.metadata.get("env")) for e in held_out}) > 1:
        raise RlvrError(
            "data.sources: the held-out set would mix environment episodes and single-turn problems, "
            "which are evaluated apart; set data.sources[i].eval_size=0 for the sources of one kind"
        )
    origin = "each source's own (" + ", ".join(origins) + ")"
    if dropped:
        origin += f"; {dropped} training examples that repeat another source's held-out question left out"
    return Datasets(train, held_out, "; ".join(readings), origin)


# --------------------------------------------------------------------------------------------- order
class MixtureOrder:
    """Draws a source with probability ∝ its weight, then that source's next example from its own
    seeded shuffle (every example of a source once per epoch of that source).

    The ``n``-th pick uses a generator seeded by (``seed``, ``n``), so the whole state is the number
    of picks and each source's (epoch, position): JSON-safe, and a resumed run draws exactly what
    the uninterrupted run would have.
    """

    def __init__(self, sources: Sequence[SourceItem], examples: Sequence[Example], seed: int) -> None:
        if not sources:
            raise ValueError("MixtureOrder needs at least one source")
        self.names = [s.name for s in sources]
        self.weights = [float(s.weight) for s in sources]
        self.seed = seed
        self.members: dict[str, list[int]] = {name: [] for name in self.names}
        for index, example in enumerate(examples):
            if example.data_source in self.members:
                self.members[example.data_source].append(index)
        for i, name in enumerate(self.names):
            if not self.members[name]:
                raise RlvrError(f"data.sources[{i}] ({name}) has no training examples")
        self.samplers = {
            name: PromptSampler(len(self.members[name]), self._seed(name)) for name in self.names
        }
        self.picks = 0
        self.drawn = dict.fromkeys(self.names, 0)  # since the last metrics()

    def _seed(self, name: str) -> int:
        # by name: adding a source leaves the other sources' shuffles as they were
        return self.seed * 65_537 + zlib.crc32(name.encode())

    def _pick(self) -> str:
        u = random.Random(f"mixture-{self.seed}-{self.picks}").random() * sum(self.weights)
        self.picks += 1
        for name, weight in zip(self.names, self.weights):
            u -= weight
            if u < 0:
                return name
        return self.names[-1]  # u == total after rounding

    def take(self, count: int) -> list[int]:
        out = []
        for _ in range(count):
            name = self._pick()
            self.drawn[name] += 1
            out.append(self.members[name][self.samplers[name].take(1)[0]])
        return out

    def observe(self, groups: list[TrajectoryGroup]) -> None:
        pass

    def state(self) -> dict[str, Any]:
        return {
            "picks": self.picks,
            "sources": {name: self.samplers[name].state() for name in self.names},
            "drawn": dict(self.drawn),
        }

    def load_state(self, state: dict[str, Any]) -> None:
        sources = state["sources"]
        if set(sources) != set(self.names):
            raise RlvrError(
                f"the checkpoint's mixture has sources {sorted(sources)}, this config {sorted(self.names)}: "
                "resume with the data.sources the run was started with"
            )
        self.picks = int(state["picks"])
        for name in self.names:
            size, seed = len(self.members[name]), self._seed(name)
            self.samplers[name] = PromptSampler(size, seed, **sources[name])
        self.drawn = {name: int(state.get("drawn", {}).get(name, 0)) for name in self.names}

    def metrics(self) -> dict[str, float]:
        """``data/<name>/drawn``: each source's share of the prompts drawn since the last call."""
        total = sum(self.drawn.values())
        if not total:
            return {}
        out = {f"data/{name}/drawn": count / total for name, count in self.drawn.items()}
        self.drawn = dict.fromkeys(self.names, 0)
        return out


# ------------------------------------------------------------------------------------------- metrics
def _correct(t: Trajectory, example: Example, correctness: str) -> bool:
    """Whether ``t`` is right: its ``correctness`` component reaches 1; an episode its environment
    scores alone (verifier ``environment``) by the environment's ``env/solved``."""
    if example.verifier == "environment" and "env/solved" in t.rewards:
        return t.rewards["env/solved"] >= CORRECT_AT
    return t.rewards.get(correctness, 0.0) >= CORRECT_AT


def source_metrics(
    seen: list[TrajectoryGroup],
    kept: list[TrajectoryGroup],
    examples: Sequence[Example],
    correctness: str,
) -> dict[str, float]:
    """Per source of the groups ``seen`` this step: ``source/<name>/accuracy`` (share of its samples
    whose ``correctness`` reaches 1), ``reward`` (mean total over its scored samples), ``admitted``
    (share of its groups the learner got) and ``groups`` (groups sampled).

    A kept group may be a new object (its scored members only, or with replayed ones), so a seen group
    counts as admitted when a kept group has its example index (each kept group admits one seen group:
    a prompt drawn twice in a step and kept once is admitted once).
    """
    unclaimed = Counter(g.example_index for g in kept)
    by_source: dict[str, list[tuple[TrajectoryGroup, bool]]] = {}
    for group in seen:
        admitted = unclaimed[group.example_index] > 0
        unclaimed[group.example_index] -= admitted
        by_source.setdefault(examples[group.example_index].data_source, []).append((group, admitted))
    out: dict[str, float] = {}
    for name in sorted(by_source):
        groups = by_source[name]
        samples = [(t, examples[g.example_index]) for g, _ in groups for t in g.trajectories]
        right = sum(_correct(t, example, correctness) for t, example in samples)
        out[f"source/{name}/accuracy"] = right / max(len(samples), 1)
        scored = [t.reward for t, _ in samples if not t.errors and t.reward is not None]
        if scored:
            out[f"source/{name}/reward"] = sum(scored) / len(scored)
        out[f"source/{name}/admitted"] = sum(admitted for _, admitted in groups) / len(groups)
        out[f"source/{name}/groups"] = float(len(groups))
    return out
