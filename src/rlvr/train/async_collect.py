"""Asynchronous collection with bounded staleness: sampling step k+1 overlaps training step k.

With ``train.max_staleness: s`` the collector runs in a background thread on its own copy of the
policy (:class:`CopySync` refreshes it after every update: pause the engine, copy the weights,
resume, tag the new version). The thread may run at most ``s`` collections ahead of the learner,
so a batch handed to the learner at version ``v`` was sampled by version ``v - s`` or newer; the
bound is also checked when a batch is taken, and a batch older than it (which the scheduling should
never produce) is dropped and counted (``async/stale_dropped``) instead of trained on. The
sampled-vs-current policy gap is what the importance ratio, clipping and the TIS / masked-IS
corrections in ``rlvr.algo`` already handle; ``async/staleness`` logs it per step.

``s = 0`` keeps the pipeline but lets the thread start a collection only after the previous update
is published: the same batches, in the same order, from the same weights as the synchronous loop
(tested to be identical), so the async machinery is checked against the sync loop bit for bit.
What overlaps is sampling, environment steps and reward scoring (their own processes and threads)
with the update; on a 2-core CPU the model compute of both halves shares the cores.
"""

from __future__ import annotations

import queue
import threading
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
    """Runs ``collector.collect`` in a thread, at most ``max_staleness`` batches ahead of the learner."""

    def __init__(self, collector: Collector, max_staleness: int, greedy_baseline: bool) -> None:
        self.collector, self.max_staleness, self.greedy_baseline = collector, max_staleness, greedy_baseline
        self._slots = threading.Semaphore(max_staleness + 1)  # batches started but not yet trained on
        self._ready: queue.Queue = queue.Queue()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rlvr-async-collect", daemon=True)
        self.stale_dropped = 0
        self._thread.start()

    def _run(self) -> None:
        import time

        while not self._stop.is_set():
            if not self._slots.acquire(timeout=0.1):
                continue
            if self._stop.is_set():
                return
            began = time.perf_counter()
            try:
                version = self.collector.engine.policy_version
                collection = self.collector.collect(greedy_baseline=self.greedy_baseline)
            except BaseException as err:  # the learner re-raises it: a dead collector never hangs the run
                self._ready.put(err)
                return
            self._ready.put(Batch(collection, version, time.perf_counter() - began))

    def next(self, learner_version: int) -> Batch:
        """The next batch sampled at most ``max_staleness`` versions before ``learner_version``."""
        while True:
            item = self._ready.get()
            if isinstance(item, BaseException):
                raise item
            if learner_version - item.version <= self.max_staleness:
                return item
            self.stale_dropped += 1
            self._slots.release()

    def trained(self) -> None:
        """The learner finished with a batch (and published its update): the thread may start another."""
        self._slots.release()

    def close(self) -> None:
        self._stop.set()
        self._slots.release()
        self._thread.join()  # a collection always ends (every step of it has a timeout)
