"""Training over torch.distributed ranks: ``torchrun --nproc-per-node N -m rlvr train ...``.

Without torchrun's environment (``RANK``, ``WORLD_SIZE``) nothing here runs: :class:`Solo` does
every operation in place and the single-process loop is unchanged.

Under torchrun every rank runs the same loop on its own copy of the policy:

- **Collection is split, then gathered.** Every rank draws the same prompt indices from the shared,
  seeded order; rank ``r`` samples and scores the ``r``-th contiguous slice of them with its own
  engine (its own sampling RNG: ``seed + rank``) and reward workers; the scored groups are
  all-gathered (:meth:`Ranks.spread`), so every rank holds the whole batch in the order one
  process would have drawn it. Dynamic-sampling filters, refills, advantages (including ones
  normalised over the batch) and metrics are then the same computation as in one process.
- **The update is split by whole groups.** :class:`Shard` gives each rank the groups of every
  minibatch assigned to it (balanced by tokens). The loss weights are computed over the *whole*
  minibatch first (:func:`rlvr.algo.token_weights`: the global token or sequence count is the
  denominator of every mode), then restricted to the rank's rows; gradients are *summed* over the
  ranks, so N ranks make the update one process makes on the same batch.
- **Rank 0 writes the run directory**; the other ranks write nothing. Checkpoints hold the full
  model (``from_pretrained`` and ``rlvr eval`` load them) and every rank's RNG state.
- **Asynchronous collection** (``train.max_staleness``): each rank's background thread collects
  while its main thread trains; the thread's gathers run on a process group of their own
  (:meth:`Ranks.subgroup`), the learner's collectives on the default one, and the collection
  schedule is fixed by the step counter (:mod:`rlvr.train.loop.async_collect`), so every rank's thread
  runs the same collections with the same weights.

The policy is wrapped in DDP (``train.distributed=ddp``) or sharded with FSDP2's ``fully_shard``
(``fsdp2``; see :mod:`rlvr.train.scale.fsdp`). The backend is gloo on the CPU and NCCL on CUDA devices.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypeVar

import torch
import torch.distributed as dist

from rlvr.errors import RlvrError

if TYPE_CHECKING:
    from rlvr.config import RunConfig

T = TypeVar("T")
R = TypeVar("R")

# Keys of the update's diagnostics that are already the same on every rank (computed after the
# gradient all-reduce, or not from the data at all); all others are per-rank shares and are summed.
REPLICATED_METRICS = ("grad_norm", "lr", "critic_grad_norm")


def under_torchrun() -> bool:
    """Whether this process was started by torchrun (or another launcher setting its variables)."""
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ


def rank_seed(seed: int, rank: int) -> int:
    """The sampling seed of ``rank``: rank 0 keeps the run's seed (one rank samples as one process)."""
    return seed + rank


def bounds(count: int, rank: int, world: int) -> tuple[int, int]:
    """The contiguous slice ``[start, end)`` of ``count`` items that ``rank`` of ``world`` handles."""
    return count * rank // world, count * (rank + 1) // world


class Solo:
    """One process: every collective is the identity."""

    rank, world, local_rank = 0, 1, 0
    is_main = True
    active = False

    def spread(self, items: Sequence[T], fn: Callable[[list[T]], list[R]]) -> list[R]:
        return fn(list(items))

    def any(self, flag: bool) -> bool:
        return bool(flag)

    def from_main(self, value: T) -> T:
        return value

    def gather(self, value: T) -> list[T]:
        return [value]

    def sum_metrics(self, metrics: dict[str, float]) -> dict[str, float]:
        return metrics

    def on_main(self, fn: Callable[[], T]) -> T:
        return fn()

    def rng_of(self, trainer_state: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        """The RNG state to restore from a checkpoint's trainer state, and whether it is exact."""
        return trainer_state["rng"], True

    def seed_sampling(self, seed: int, generator: torch.Generator) -> None:
        pass

    def barrier(self) -> None:
        pass

    def subgroup(self) -> Solo:
        """One process has no groups: itself."""
        return self

    def close(self) -> None:
        pass


class Ranks(Solo):
    """This process's place among torchrun's ranks, and the collectives the loop uses.

    Python objects (scored groups, metrics, decisions) travel over a gloo group even when the
    gradients use NCCL, so they never occupy GPU memory.
    """

    active = True

    def __init__(
        self,
        rank: int,
        world: int,
        local_rank: int,
        objects: Any = None,
        owned: bool = False,
        timeout: timedelta | None = None,
    ) -> None:
        self.rank, self.world, self.local_rank = rank, world, local_rank
        self.is_main = rank == 0
        self.objects = objects  # the process group for Python objects (None: the default group)
        self.owned = owned  # this object started the process group (and ends it in close)
        self.timeout = timeout  # the default group's (a subgroup gets the same)
        self._own_group = False  # this object created ``objects`` (subgroup) and destroys it in close

    def spread(self, items: Sequence[T], fn: Callable[[list[T]], list[R]]) -> list[R]:
        """``fn`` over this rank's contiguous slice of ``items``; every rank gets all results in order."""
        start, end = bounds(len(items), self.rank, self.world)
        mine = fn(list(items[start:end])) if end > start else []
        parts: list[Any] = [None] * self.world
        dist.all_gather_object(parts, mine, group=self.objects)
        return [x for part in parts for x in part]

    def any(self, flag: bool) -> bool:
        """True on every rank when ``flag`` is true on any (a SIGTERM that reached one rank)."""
        return any(self.gather_all(bool(flag)))

    def gather_all(self, value: T) -> list[T]:
        parts: list[Any] = [None] * self.world
        dist.all_gather_object(parts, value, group=self.objects)
        return parts

    def from_main(self, value: T) -> T:
        """Rank 0's ``value`` on every rank (rank 0's decisions: time limits, eval results)."""
        box = [value if self.is_main else None]
        dist.broadcast_object_list(box, src=0, group=self.objects)
        return box[0]

    def gather(self, value: T) -> list[T]:
        """Every rank's ``value``, in rank order, on every rank."""
        return self.gather_all(value)

    def sum_metrics(self, metrics: dict[str, float]) -> dict[str, float]:
        """Per-rank counters (reward errors, environment steps) summed over the ranks."""
        total: dict[str, float] = {}
        for part in self.gather_all(metrics):
            for key, value in part.items():
                total[key] = total.get(key, 0.0) + value
        return total

    def on_main(self, fn: Callable[[], T]) -> T:
        """``fn()`` on rank 0 (writing the run directory, a checkpoint); its result on every rank.
        Its :class:`RlvrError` is raised on every rank, so no rank waits for one that gave up."""
        outcome: tuple[Any, str | None] = (None, None)
        failure: RlvrError | None = None
        if self.is_main:
            try:
                outcome = (fn(), None)
            except RlvrError as err:
                outcome, failure = (None, str(err)), err
        result, error = self.from_main(outcome)
        if failure is not None:
            raise failure
        if error is not None:
            raise RlvrError(f"rank 0: {error}")
        return result

    def rng_of(self, trainer_state: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        """This rank's RNG state in a checkpoint written by as many ranks; else rank 0's (not exact:
        the caller gives the rank a fresh sampling stream)."""
        states = trainer_state.get("rank_rng")
        if states is not None and len(states) == self.world:
            return states[self.rank], True
        return trainer_state["rng"], False

    def seed_sampling(self, seed: int, generator: torch.Generator) -> None:
        """This rank's own sampling stream (the engine's generator, CUDA's RNG): ``seed + rank``."""
        generator.manual_seed(rank_seed(seed, self.rank))
        if torch.cuda.is_available():
            torch.cuda.manual_seed(rank_seed(seed, self.rank))

    def barrier(self) -> None:
        dist.barrier(group=self.objects)

    def subgroup(self) -> Ranks:
        """The same ranks over a gloo process group of their own, for collectives issued from
        another thread (the asynchronous collector's, :mod:`rlvr.train.loop.async_collect`).

        Collectives on one group pair up by the order each rank issues them. Two threads of a rank
        issuing them on one group interleave in whatever order their timing gives, differently on
        each rank: the ranks would pair a gradient all-reduce with a gather of groups, and hang or
        mix the data. With a group per thread each group's order is its thread's program order,
        the same on every rank. Every rank must call this at the same point (it is a collective)."""
        group = dist.new_group(backend="gloo", timeout=self.timeout)
        sub = Ranks(self.rank, self.world, self.local_rank, group, owned=False, timeout=self.timeout)
        sub._own_group = True
        return sub

    def close(self) -> None:
        if self._own_group and dist.is_initialized():
            dist.destroy_process_group(self.objects)
        if self.owned and dist.is_initialized():
            dist.destroy_process_group()


def start_ranks(device: str, timeout_s: float = 1800.0) -> Solo:
    """:class:`Solo` without torchrun; otherwise join the process group (gloo on the CPU, NCCL on
    CUDA) and return this process's :class:`Ranks`."""
    if not under_torchrun():
        return Solo()
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    cuda = torch.device(device).type == "cuda"
    if cuda:
        if not torch.cuda.is_available():
            raise RlvrError(f"model.device={device} under torchrun, but CUDA is not available")
        torch.cuda.set_device(local_rank)
    owned = not dist.is_initialized()  # a caller may have started it (several runs in one group)
    timeout = timedelta(seconds=timeout_s)
    if owned:
        dist.init_process_group(
            backend="nccl" if cuda else "gloo",
            timeout=timeout,
            device_id=torch.device("cuda", local_rank) if cuda else None,
        )
    objects = dist.new_group(backend="gloo", timeout=timeout) if cuda else None
    return Ranks(rank, world, local_rank, objects, owned, timeout)


def rank_device(device: str, ranks: Solo) -> str:
    """``cuda`` means this rank's own GPU (``cuda:LOCAL_RANK``) under torchrun; others are unchanged."""
    if ranks.active and device == "cuda":
        return f"cuda:{ranks.local_rank}"
    return device


def check_distributed(cfg: RunConfig, world: int) -> None:
    """Settings that do not run under torchrun (``world`` ranks) yet: an error naming the key."""
    if cfg.train.distributed == "fsdp2" and (cfg.algo.critic.kind != "none" or cfg.model.lora.r):
        raise RlvrError(
            "train.distributed=fsdp2 does not take a critic (algo.critic.kind) or LoRA (model.lora.r) "
            "yet: use train.distributed=ddp"
        )
    if cfg.rollout.engine == "vllm" and cfg.rollout.vllm.url and world > 1:
        raise RlvrError(
            f"rollout.vllm.url={cfg.rollout.vllm.url} under torchrun: every rank pushes its weights to "
            "and samples from a server of its own; leave rollout.vllm.url unset (each rank starts one) "
            "or place them with cluster.ray=true"
        )


class Discard:
    """A log writer that writes nothing (ranks other than 0)."""

    def __init__(self, path: Any = None) -> None:
        self.path = path

    def write(self, record: dict[str, Any]) -> None:
        pass

    def close(self) -> None:
        pass
