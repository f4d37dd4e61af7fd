"""Run reward functions in worker processes, each call under a hard wall-clock timeout.

Why processes and not threads or ``signal.alarm``: a reward may spin in Python, hang in C (sympy,
regex, a solver), leak memory, or kill its interpreter. Only a separate process can be stopped in
all of those cases, and only the caller's own deadline bookkeeping works from any thread. Peers that
used ``signal.alarm`` in threads got silent 0.0 rewards; here a reward that cannot be scored is an
*error* — reported per component, counted in :attr:`RewardPool.stats`, never a number.

Scheduling: items go to workers in chunks (few IPC round trips), but workers report every call as
it finishes, so the parent always knows which call is running on which worker and since when. A
call that passes its deadline gets its worker killed (with the reward's own subprocesses) and
replaced; the calls queued behind it go back to the queue and the rest of the batch is still scored.

Workers come from a ``forkserver``: one clean, single-threaded server process imports the reward
modules once, and every worker (and every replacement after a kill) is a cheap fork of it. Forking
the trainer itself would copy a process with torch's threads running, which is not safe.
"""

from __future__ import annotations

import math
import os
import threading
import time
import weakref
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from multiprocessing.connection import wait
from multiprocessing.reduction import ForkingPickler
from typing import Any

from rlvr.data.example import Example
from rlvr.errors import RlvrError
from rlvr.rewards.spec import RewardSpec
from rlvr.rewards.worker import START_TIMEOUT_S, WorkerHandle, mp_context

__all__ = ["RewardPool", "RewardResult", "RewardSpec"]

_STAT_KEYS = ("calls", "errors", "timeouts", "crashes")
_MAX_START_FAILURES = 3


@dataclass
class RewardResult:
    """The rewards of one completion.

    ``components`` maps each spec's label to its (unweighted) value; a reward returning a dict
    contributes ``"label/key"`` for each key instead. ``errors`` maps the label of every reward that
    could not be scored (timeout, crash, exception, bad value) to a one-line reason, and its
    component is absent. ``total`` is the weighted sum over specs — for a dict reward, its
    ``"score"`` key if present, else the sum of its values — or ``None`` when any reward errored,
    so that a missing reward is never mistaken for a zero.
    """

    total: float | None
    components: dict[str, float] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """True when every reward was scored."""
        return not self.errors


@dataclass
class _Batch:
    """The state of one :meth:`RewardPool.score` call."""

    completions: list[str]
    examples: list[Example]
    tokens: list[int] | None
    finish_reasons: list[str] | None
    values: list[dict[int, float | dict[str, float]]]
    errors: list[dict[int, str]]
    queue: deque[tuple[int, tuple[int, ...]]]  # (item, spec indices still to run)
    remaining: int

    def payload(self, units: list[tuple[int, tuple[int, ...]]]) -> list[tuple[Any, ...]]:
        return [
            (
                item,
                self.completions[item],
                self.examples[item],
                None if self.tokens is None else self.tokens[item],
                None if self.finish_reasons is None else self.finish_reasons[item],
                specs,
            )
            for item, specs in units
        ]

    def requeue(self, calls: Iterable[tuple[int, int]]) -> None:
        """Put calls back at the front of the queue, regrouped by item, keeping their order."""
        units: list[tuple[int, list[int]]] = []
        for item, spec in calls:
            if units and units[-1][0] == item:
                units[-1][1].append(spec)
            else:
                units.append((item, [spec]))
        for item, specs in reversed(units):
            self.queue.appendleft((item, tuple(specs)))


class RewardPool:
    """Score completions with a weighted set of rewards, isolated in worker processes.

    ``workers=0`` uses one worker per available CPU. Every reward call is limited to ``timeout_s``
    seconds of wall-clock time. Workers start in the constructor and live until :meth:`close`
    (or the end of a ``with`` block), so their start-up cost is paid once.

    Rewards must be importable by the workers: registered at the top level of a module or of the
    main script (not in a notebook cell or a function body), or named by an import path. A script
    that creates a pool needs the usual ``if __name__ == "__main__":`` guard, because the worker
    side imports the main module (once, in the forkserver) to find the rewards registered there.
    """

    def __init__(self, specs: list[RewardSpec], workers: int = 0, timeout_s: float = 5.0) -> None:
        self.specs = [s if isinstance(s, RewardSpec) else RewardSpec.model_validate(s) for s in specs]
        if not self.specs:
            raise RlvrError(
                "RewardPool needs at least one reward spec; registered rewards: see list_rewards()"
            )
        labels = [s.key for s in self.specs]
        duplicates = sorted({label for label in labels if labels.count(label) > 1})
        if duplicates:
            raise RlvrError(f"reward labels must be unique, repeated: {duplicates}; set `label` on the specs")
        if workers < 0:
            raise RlvrError(f"workers must be >= 0 (0 = one per CPU), got {workers}")
        if not (timeout_s > 0 and math.isfinite(timeout_s)):
            raise RlvrError(f"timeout_s must be a positive number of seconds, got {timeout_s}")
        self.labels = labels
        self.timeout_s = float(timeout_s)
        self.num_workers = workers or _available_cpus()
        self._call_specs = [s.call_spec() for s in self.specs]
        self._preload = list(dict.fromkeys(m for s in self.specs for m in s.preload))
        self._ctx = mp_context(self._preload)
        self.stats: dict[str, dict[str, int]] = {label: dict.fromkeys(_STAT_KEYS, 0) for label in labels}
        self._step_stats: dict[str, dict[str, int]] = {
            label: dict.fromkeys(_STAT_KEYS, 0) for label in labels
        }
        self.worker_restarts = 0
        self._start_failures = 0
        self._lock = threading.Lock()
        self._closed = False
        self._workers: list[WorkerHandle] = []
        self._finalizer = weakref.finalize(self, _shutdown, self._workers)
        for _ in range(self.num_workers):
            self._workers.append(self._new_worker())

    # -- public API ----------------------------------------------------------------------------

    def score(
        self,
        completions: list[str],
        examples: list[Example],
        completion_tokens: list[int] | None = None,
        finish_reasons: list[str] | None = None,
    ) -> list[RewardResult]:
        """Score ``completions[i]`` against ``examples[i]`` with every reward; one result per item."""
        n = len(completions)
        for name, values in (("examples", examples), ("completion_tokens", completion_tokens)):
            if values is not None and len(values) != n:
                raise ValueError(f"{name} has {len(values)} entries for {n} completions")
        if finish_reasons is not None and len(finish_reasons) != n:
            raise ValueError(f"finish_reasons has {len(finish_reasons)} entries for {n} completions")
        all_specs = tuple(range(len(self.specs)))
        batch = _Batch(
            completions=list(completions),
            examples=list(examples),
            tokens=None if completion_tokens is None else list(completion_tokens),
            finish_reasons=None if finish_reasons is None else list(finish_reasons),
            values=[{} for _ in range(n)],
            errors=[{} for _ in range(n)],
            queue=deque((item, all_specs) for item in range(n)),
            remaining=n * len(all_specs),
        )
        with self._lock:
            if self._closed:
                raise RuntimeError("RewardPool.score called after close()")
            try:
                self._run(batch)
            except BaseException:
                # Interrupted mid-batch: workers may still hold calls whose reports would be mistaken
                # for the next batch's. Replace them.
                for index, worker in enumerate(self._workers):
                    if worker.running:
                        worker.kill()
                        self._workers[index] = self._new_worker()
                raise
        return [self._result(batch, item) for item in range(n)]

    def take_stats(self) -> dict[str, dict[str, int]]:
        """Per-reward counts since the previous call (calls, errors, timeouts, crashes), then reset."""
        taken = self._step_stats
        self._step_stats = {label: dict.fromkeys(_STAT_KEYS, 0) for label in self.labels}
        return taken

    def close(self) -> None:
        """Stop the workers. Idempotent."""
        with self._lock:
            self._closed = True
            self._finalizer()

    def __enter__(self) -> RewardPool:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- scheduling ----------------------------------------------------------------------------

    def _run(self, batch: _Batch) -> None:
        chunk = max(1, min(64, math.ceil(len(batch.completions) / (4 * self.num_workers))))
        while batch.remaining:
            for index, worker in enumerate(self._workers):
                if worker.ready and not worker.running and batch.queue:
                    if worker.proc.exitcode is not None:  # died while idle: nothing to blame it for
                        self._replace(index, batch, error=None, kind=None)
                        continue
                    units = [batch.queue.popleft() for _ in range(min(chunk, len(batch.queue)))]
                    self._dispatch(index, batch, units)
            waiting = [w for w in self._workers if w.running or not w.ready]
            if not waiting:  # nothing queued, running or starting, yet calls are missing: a bug
                raise RuntimeError(f"reward pool lost track of {batch.remaining} reward calls")
            timeout = max(0.0, min(w.deadline for w in waiting) - time.monotonic())
            ready = set(wait([w.conn for w in waiting] + [w.proc.sentinel for w in waiting], timeout))
            for index, worker in enumerate(list(self._workers)):
                if worker.conn in ready or worker.proc.sentinel in ready:
                    self._drain(index, batch)
            now = time.monotonic()
            for index, worker in enumerate(list(self._workers)):
                if (worker.running or not worker.ready) and now >= worker.deadline:
                    if worker.ready:
                        message = f"timeout after {self.timeout_s:g}s"
                        self._replace(index, batch, error=message, kind="timeouts")
                    else:
                        self._start_failed(index, f"did not start within {START_TIMEOUT_S:g}s")

    def _dispatch(self, index: int, batch: _Batch, units: list[tuple[int, tuple[int, ...]]]) -> None:
        worker = self._workers[index]
        try:
            data = ForkingPickler.dumps(batch.payload(units))
        except Exception as exc:
            batch.requeue((item, spec) for item, specs in units for spec in specs)
            raise RlvrError(
                f"completions and examples must be picklable to reach reward workers: {exc!r}"
            ) from exc
        worker.running.extend((item, spec) for item, specs in units for spec in specs)
        worker.deadline = time.monotonic() + self.timeout_s
        try:
            worker.conn.send_bytes(data)
        except (OSError, ValueError):
            self._replace(index, batch, error=f"worker crashed: {worker.death_reason()}", kind="crashes")

    def _drain(self, index: int, batch: _Batch) -> None:
        """Read every report the worker has sent; notice if it died."""
        worker = self._workers[index]
        at_eof = False
        while True:
            try:
                if not worker.conn.poll():
                    break
                message = worker.conn.recv()
            except (EOFError, OSError):
                at_eof = True
                break
            if message[0] == "ready":
                worker.ready = True
                self._start_failures = 0
                continue
            _, item, spec, ok, payload = message
            expected = worker.running.popleft()
            if expected != (item, spec):  # a protocol bug must not silently misattribute rewards
                raise RuntimeError(f"reward worker reported {(item, spec)}, expected {expected}")
            self._record(batch, item, spec, payload if ok else None, None if ok else payload, kind=None)
            worker.deadline = time.monotonic() + self.timeout_s
        if not at_eof and worker.proc.exitcode is None:
            return
        if not worker.ready:
            self._start_failed(index, worker.death_reason())
        else:
            self._replace(index, batch, error=f"worker crashed: {worker.death_reason()}", kind="crashes")

    def _replace(self, index: int, batch: _Batch, error: str | None, kind: str | None) -> None:
        """Kill worker ``index``, blame its running call (if any), requeue the rest, start a new one."""
        worker = self._workers[index]
        worker.kill()
        if worker.running:
            item, spec = worker.running.popleft()
            self._record(batch, item, spec, None, error or "worker died", kind=kind or "crashes")
            batch.requeue(worker.running)
            worker.running.clear()
        self._workers[index] = self._new_worker()
        self.worker_restarts += 1

    def _start_failed(self, index: int, reason: str) -> None:
        self._workers[index].kill()
        self._start_failures += 1
        if self._start_failures >= _MAX_START_FAILURES:
            raise RuntimeError(f"reward worker failed to start {self._start_failures} times: {reason}")
        self._workers[index] = self._new_worker()

    def _new_worker(self) -> WorkerHandle:
        return WorkerHandle(self._ctx, self._call_specs, self._preload)

    # -- results -------------------------------------------------------------------------------

    def _record(
        self, batch: _Batch, item: int, spec: int, value: Any, error: str | None, kind: str | None
    ) -> None:
        label = self.labels[spec]
        for stats in (self.stats[label], self._step_stats[label]):
            stats["calls"] += 1
            if error is not None:
                stats["errors"] += 1
                if kind is not None:
                    stats[kind] += 1
        if error is not None:
            batch.errors[item][spec] = error
        else:
            batch.values[item][spec] = value
        batch.remaining -= 1

    def _result(self, batch: _Batch, item: int) -> RewardResult:
        components: dict[str, float] = {}
        total = 0.0
        for spec, value in sorted(batch.values[item].items()):
            label, weight = self.labels[spec], self.specs[spec].weight
            if isinstance(value, dict):
                components.update({f"{label}/{key}": v for key, v in value.items()})
                total += weight * (value["score"] if "score" in value else sum(value.values()))
            else:
                components[label] = value
                total += weight * value
        errors = {self.labels[spec]: message for spec, message in sorted(batch.errors[item].items())}
        return RewardResult(total=None if errors else total, components=components, errors=errors)


def _available_cpus() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:
        return max(1, os.cpu_count() or 1)


def _shutdown(workers: list[WorkerHandle]) -> None:
    for worker in workers:
        try:
            worker.conn.send(None)
        except (OSError, ValueError):
            pass
    deadline = time.monotonic() + 2.0
    for worker in workers:
        worker.proc.join(timeout=max(0.0, deadline - time.monotonic()))
        worker.kill()
    workers.clear()
