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

Group rewards (majority vote, …) are called once per group: pass ``group_sizes`` to :meth:`score`
(consecutive completions form one group). A per-batch deadline (``batch_deadline_s``) bounds the
whole call: whatever has not finished by then is an error "batch deadline", so a trainer step
never waits on stragglers longer than it chose to.

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
from collections.abc import Sequence
from multiprocessing.connection import wait
from multiprocessing.reduction import ForkingPickler
from typing import Any

from rlvr.data.example import Example
from rlvr.errors import RlvrError
from rlvr.rewards.results import RewardResult, ScoreBatch, assemble
from rlvr.rewards.spec import RewardSpec, check_gates
from rlvr.rewards.worker import START_TIMEOUT_S, WorkerHandle, mp_context

__all__ = ["RewardPool", "RewardResult", "RewardSpec"]

_STAT_KEYS = ("calls", "errors", "timeouts", "crashes", "deadlines")
DEADLINE_ERROR = "batch deadline"
_MAX_START_FAILURES = 3


class RewardPool:
    """Score completions with a weighted set of rewards, isolated in worker processes.

    ``workers=0`` uses one worker per available CPU. Every reward call is limited to ``timeout_s``
    seconds of wall-clock time, and a whole :meth:`score` call to ``batch_deadline_s`` (``None``:
    no batch limit; :meth:`score` can override it per call). Workers start in the constructor and
    live until :meth:`close` (or the end of a ``with`` block), so their start-up cost is paid once.

    Rewards must be importable by the workers: registered at the top level of a module or of the
    main script (not in a notebook cell or a function body), or named by an import path. Workers
    import the main script (once, in the forkserver) only when it defines a registered reward; such
    a script must then create pools under ``if __name__ == "__main__":`` (it is refused otherwise,
    :mod:`rlvr.rewards.main_module`). A script using built-in or importable rewards needs no guard.
    """

    def __init__(
        self,
        specs: list[RewardSpec],
        workers: int = 0,
        timeout_s: float = 5.0,
        batch_deadline_s: float | None = None,
    ) -> None:
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
        _check_deadline(batch_deadline_s)
        check_gates(self.specs)
        self.labels = labels
        self.timeout_s = float(timeout_s)
        self.batch_deadline_s = batch_deadline_s
        self._item_specs = tuple(i for i, s in enumerate(self.specs) if not s.group)
        self._group_specs = tuple(i for i, s in enumerate(self.specs) if s.group)
        self.num_workers = workers or _available_cpus()
        self._call_specs = [s.call_spec() for s in self.specs]
        self._preload = list(dict.fromkeys(m for s in self.specs for m in s.preload))
        self._ctx = mp_context(self._preload, [s.name for s in self.specs])
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
        *,
        group_sizes: Sequence[int] | None = None,
        token_logprobs: list[list[float]] | None = None,
        top_logprobs: list[list[list[float]]] | None = None,
        token_self_certainty: list[list[float]] | None = None,
        batch_deadline_s: float | None = None,
    ) -> list[RewardResult]:
        """Score ``completions[i]`` against ``examples[i]`` with every reward; one result per item.

        ``group_sizes`` splits the completions into consecutive groups (the G samples of one
        prompt, scored against the group's first example); group rewards need it. The optional
        per-completion lists (token counts, finish reasons, sampled-token logprobs, top-k logprobs
        per token, per-token self-certainty) reach the rewards that declare a keyword argument of
        that name.
        """
        n = len(completions)
        given = {
            "examples": examples,
            "completion_tokens": completion_tokens,
            "finish_reasons": finish_reasons,
            "token_logprobs": token_logprobs,
            "top_logprobs": top_logprobs,
            "token_self_certainty": token_self_certainty,
        }
        for name, values in given.items():
            if values is not None and len(values) != n:
                raise ValueError(f"{name} has {len(values)} entries for {n} completions")
        groups = _group_bounds(group_sizes, n)
        if self._group_specs and group_sizes is None:
            names = [self.labels[i] for i in self._group_specs]
            raise RlvrError(f"group rewards {names} need group_sizes= (completions per prompt)")
        extras = {
            key: list(values)
            for key, values in (
                ("completion_tokens", completion_tokens),
                ("finish_reason", finish_reasons),
                ("token_logprobs", token_logprobs),
                ("top_logprobs", top_logprobs),
                ("token_self_certainty", token_self_certainty),
            )
            if values is not None
        }
        deadline_s = self.batch_deadline_s if batch_deadline_s is None else batch_deadline_s
        _check_deadline(deadline_s)
        batch = ScoreBatch.build(completions, examples, extras, groups, self._item_specs, self._group_specs)
        with self._lock:
            if self._closed:
                raise RuntimeError("RewardPool.score called after close()")
            try:
                self._run(batch, None if deadline_s is None else time.monotonic() + deadline_s)
            except BaseException:
                # Interrupted mid-batch: workers may still hold calls whose reports would be mistaken
                # for the next batch's. Replace them.
                for index, worker in enumerate(self._workers):
                    if worker.running:
                        worker.kill()
                        self._workers[index] = self._new_worker()
                raise
        return [assemble(batch, item, self.specs) for item in range(n)]

    def score_groups(
        self, groups: list[list[str]], examples: list[Example], **kwargs: Any
    ) -> list[list[RewardResult]]:
        """:meth:`score` for a list of groups (one example per group); results nested the same way.

        Per-completion keyword lists (``completion_tokens=``, …) are nested like ``groups`` too.
        """
        if len(examples) != len(groups):
            raise ValueError(f"examples has {len(examples)} entries for {len(groups)} groups")
        nested = (
            "completion_tokens",
            "finish_reasons",
            "token_logprobs",
            "top_logprobs",
            "token_self_certainty",
        )
        flat_kwargs = {
            k: [x for g in v for x in g] if k in nested and v is not None else v for k, v in kwargs.items()
        }
        results = self.score(
            [c for g in groups for c in g],
            [e for e, g in zip(examples, groups) for _ in g],
            group_sizes=[len(g) for g in groups],
            **flat_kwargs,
        )
        out, start = [], 0
        for group in groups:
            out.append(results[start : start + len(group)])
            start += len(group)
        return out

    def take_stats(self) -> dict[str, dict[str, int]]:
        """Per-reward counts since the previous call, then reset.

        Keys are the spec labels — and, for the routing ``verifier`` reward, also
        ``"verifier/<routed name>"`` — each with calls, errors, timeouts, crashes and deadlines.
        """
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

    def _run(self, batch: ScoreBatch, deadline: float | None) -> None:
        chunk = max(1, min(64, math.ceil(len(batch.completions) / (4 * self.num_workers))))
        while batch.remaining:
            if deadline is not None and time.monotonic() >= deadline:
                self._expire(batch)
                return
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
            soonest = min([w.deadline for w in waiting] + ([deadline] if deadline is not None else []))
            timeout = max(0.0, soonest - time.monotonic())
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

    def _expire(self, batch: ScoreBatch) -> None:
        """The batch deadline passed: every call not reported yet becomes a "batch deadline" error."""
        for index, worker in enumerate(self._workers):
            if worker.running:
                worker.kill()
                for unit, spec in worker.running:
                    self._record(batch, unit, spec, None, DEADLINE_ERROR, kind="deadlines")
                worker.running.clear()
                self._workers[index] = self._new_worker()
                self.worker_restarts += 1
        while batch.queue:
            unit, specs = batch.queue.popleft()
            for spec in specs:
                self._record(batch, unit, spec, None, DEADLINE_ERROR, kind="deadlines")

    def _dispatch(self, index: int, batch: ScoreBatch, units: list[tuple[int, tuple[int, ...]]]) -> None:
        worker = self._workers[index]
        try:
            data = ForkingPickler.dumps(batch.payload(units))
        except Exception as exc:
            batch.requeue((unit, spec) for unit, specs in units for spec in specs)
            raise RlvrError(
                f"completions and examples must be picklable to reach reward workers: {exc!r}"
            ) from exc
        worker.running.extend((item, spec) for item, specs in units for spec in specs)
        worker.deadline = time.monotonic() + self.timeout_s
        try:
            worker.conn.send_bytes(data)
        except (OSError, ValueError):
            self._replace(index, batch, error=f"worker crashed: {worker.death_reason()}", kind="crashes")

    def _drain(self, index: int, batch: ScoreBatch) -> None:
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

    def _replace(self, index: int, batch: ScoreBatch, error: str | None, kind: str | None) -> None:
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
        self, batch: ScoreBatch, unit: int, spec: int, value: Any, error: str | None, kind: str | None
    ) -> None:
        label = self.labels[spec]
        keys = [label]
        if self.specs[spec].name == "verifier" and unit < len(batch.completions):
            routed = batch.examples[unit].verifier or self.specs[spec].params.get("default")
            keys.append(f"{label}/{routed}")
        for key in keys:
            for stats in (self.stats, self._step_stats):
                counts = stats.setdefault(key, dict.fromkeys(_STAT_KEYS, 0))
                counts["calls"] += 1
                if error is not None:
                    counts["errors"] += 1
                    if kind is not None:
                        counts[kind] += 1
        batch.record(unit, spec, value, error)


def _check_deadline(deadline_s: float | None) -> None:
    if deadline_s is not None and not (deadline_s > 0 and math.isfinite(deadline_s)):
        raise RlvrError(f"batch_deadline_s must be a positive number of seconds or None, got {deadline_s}")


def _group_bounds(group_sizes: Sequence[int] | None, n: int) -> list[tuple[int, int]]:
    if group_sizes is None:
        return []
    if any(size < 1 for size in group_sizes) or sum(group_sizes) != n:
        raise ValueError(f"group_sizes {list(group_sizes)} must be positive and sum to {n} completions")
    bounds, start = [], 0
    for size in group_sizes:
        bounds.append((start, start + size))
        start += size
    return bounds


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
