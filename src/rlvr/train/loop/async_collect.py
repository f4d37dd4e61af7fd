"""Asynchronous collection with bounded staleness: sampling step k+1 overlaps training step k.

With ``train.max_staleness: s`` the collector runs in a background thread on its own copy of the
policy (:class:`CopySync` refreshes it after every update: pause the engine, copy the weights,
resume, tag the new version) while the learner trains.

The schedule is fixed by the step counter, not by timing. Collection ``c`` (the batch the learner
trains at step ``c``, both counted from 0 at the start of the loop) may start once the learner has
published the update of step ``c - s - 1``; and the learner publishes an update only after every
collection it has allowed so far has ended (:meth:`AsyncCollector.wait_idle`). So collection ``c``
samples, from its first token to its last reward, with the weights that step ``max(0, c - s)``
trains: staleness ``min(c, s)`` at every step, every trajectory of a batch stamped with one
version, and a run that repeats itself. Under torchrun this is what keeps the ranks together:
every rank's thread runs the same collections with the same weights, and their collectives (on a
process group of their own, :meth:`rlvr.train.scale.distributed.Ranks.subgroup`) pair up in the same
order on every rank.

The learner trains batch ``c`` while collection ``c + s`` runs: ``s = 1`` is the overlap; a larger
``s`` adds staleness, not overlap. ``s = 0`` lets collection ``c`` start only after step ``c - 1``
is published: the same batches, in the same order, from the same weights as the synchronous loop
(tested to be identical). The check of the bound when a batch is taken (``async/stale_dropped``)
only fires for batches carried over from a checkpoint into a run with a smaller ``s``.

Between steps (after :meth:`wait_idle`) the thread is idle: a checkpoint saves the finished batches
the learner has not trained yet (:meth:`pending`), and a resume puts them back, so a resumed run
continues as the uninterrupted one. What overlaps is sampling, environment steps and reward scoring
(their own processes and threads) with the update; on a 2-core CPU the model compute of both halves
shares the cores.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

import torch

from rlvr.collect.collector import Collection, Collector


class CopySync:
    """The engine samples from its own copy of the policy: a push copies the learner's weights into
    it while no generation is running (the engine's lock), then sets the version."""

    def __init__(self, engine, version: int = 0) -> None:
        self.engine = engine
        self.engine.policy_version = version

    def push(self, model: torch.nn.Module, version: int) -> None:
        with self.engine.lock:  # pause generation, update, resume
            with torch.no_grad():
                for target, source in zip(self.engine.model.parameters(), model.parameters(), strict=True):
                    target.copy_(source)
                for target, source in zip(self.engine.model.buffers(), model.buffers(), strict=True):
                    target.copy_(source)
            self.engine.policy_version = version

    @property
    def version(self) -> int:
        return self.engine.policy_version


@dataclass
class Batch:
    collection: Collection
    version: int  # the policy version that sampled it
    collect_s: float


class AsyncCollector:
    """Runs ``collector.collect`` in a thread, at most ``max_staleness`` batches ahead of the learner.

    ``total`` caps the collections (the steps left: no batch is sampled that no step trains);
    ``pending`` are finished batches from a checkpoint, trained first.
    """

    def __init__(
        self,
        collector: Collector,
        max_staleness: int,
        greedy_baseline: bool,
        total: int | None = None,
        pending: Iterable[Batch] = (),
    ) -> None:
        self.collector, self.max_staleness, self.greedy_baseline = collector, max_staleness, greedy_baseline
        self.total = total
        self._ready: deque[Batch] = deque(pending)
        self._cond = threading.Condition()
        # collections counted from this loop's start, carried-over batches included
        self.started = self.finished = len(self._ready)
        self.granted = self._capped(max_staleness + 1)  # collections the thread may start
        self.error: BaseException | None = None
        self._stop = False
        self.stale_dropped = 0
        self._thread = threading.Thread(target=self._run, name="rlvr-async-collect", daemon=True)
        self._thread.start()

    def _capped(self, n: int) -> int:
        return n if self.total is None else min(n, self.total)

    def _run(self) -> None:
        device = getattr(self.collector.engine, "device", None)
        if isinstance(device, torch.device) and device.type == "cuda":
            torch.cuda.set_device(device)  # a thread starts on GPU 0; under torchrun: this rank's GPU
        while True:
            with self._cond:
                while self.started >= self.granted and not self._stop:
                    self._cond.wait()
                if self._stop:
                    return
                self.started += 1
            began = time.perf_counter()
            try:
                version = self.collector.engine.policy_version
                collection = self.collector.collect(greedy_baseline=self.greedy_baseline)
            except BaseException as err:  # the learner re-raises it: a dead collector never hangs the run
                with self._cond:
                    self.error = err
                    self._cond.notify_all()
                return
            with self._cond:
                self._ready.append(Batch(collection, version, time.perf_counter() - began))
                self.finished += 1
                self._cond.notify_all()

    def _raise(self) -> None:
        if self.error is not None:
            raise self.error

    def next(self, learner_version: int) -> Batch:
        """The next batch sampled at most ``max_staleness`` versions before ``learner_version``."""
        with self._cond:
            while True:
                while not self._ready:
                    self._raise()
                    self._cond.wait()
                item = self._ready.popleft()
                if learner_version - item.version <= self.max_staleness:
                    return item
                self.stale_dropped += 1  # a replacement is sampled in its place
                self.granted += 1
                self.total = None if self.total is None else self.total + 1
                self._cond.notify_all()

    def wait_idle(self) -> None:
        """Wait until every collection allowed so far has ended (before the learner publishes new
        weights: none of them changes under a running collection)."""
        with self._cond:
            while self.finished < self.granted:
                self._raise()
                self._cond.wait()

    def trained(self) -> None:
        """The learner finished with a batch (and published its update): the thread may start another."""
        with self._cond:
            self.granted = self._capped(self.granted + 1)
            self._cond.notify_all()

    def pending(self) -> list[Batch]:
        """The finished batches the learner has not taken yet (what a checkpoint keeps)."""
        with self._cond:
            return list(self._ready)

    def close(self) -> None:
        """Stop the thread; a collection that is running ends first (every step of it has a timeout)."""
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        self._thread.join()
