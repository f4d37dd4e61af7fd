"""A reward worker process: the loop that runs inside it, and the handle the parent keeps.

Protocol over one duplex pipe: the worker first sends ``("ready", pid)`` once its imports and the
rewards' set-ups are done (so that time is never charged to a call's timeout). It then receives
chunks — lists of ``(unit, completion, example, extras, spec_indices)``, where ``extras`` holds the
pool-supplied keyword arguments the trainer passed, and a group unit carries lists (of completions
and of extras) — and sends one ``("done", unit, spec_index, ok, payload)`` message per reward
call, in order. The parent relies on that order: the call after the last reported one is the one
running, so its deadline starts when the previous report arrives. ``None`` or a closed pipe ends
the worker.

``worker_main`` and the functions it calls run in the child; ``WorkerHandle`` and ``mp_context`` run in
the parent. Rewards themselves never run in the trainer's process.
"""

from __future__ import annotations

import ctypes
import importlib
import math
import multiprocessing as mp
import numbers
import os
import signal
import sys
import time
from collections import deque
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

from rlvr.rewards.registry import BUILTIN_MODULES, get_reward, list_rewards, reward_preload, reward_setup
from rlvr.rewards.spec import CallSpec

_MAX_MESSAGE = 500
START_TIMEOUT_S = 120.0  # generous: a worker may have to import the reward modules itself


def worker_main(conn: Connection, specs: list[CallSpec], preload: list[str]) -> None:
    """Entry point of a worker process (the target of ``multiprocessing.Process``)."""
    _isolate()
    for module in preload:
        try:
            importlib.import_module(module)
        except Exception:  # noqa: BLE001 - the reward itself will report the import error per call
            pass
    fns = [_set_up(spec, _resolve(spec)) for spec in specs]
    conn.send(("ready", os.getpid()))
    while True:
        try:
            chunk = conn.recv()
        except (EOFError, OSError):
            return
        if chunk is None:
            return
        for unit, completion, example, extras, spec_indices in chunk:
            for index in spec_indices:
                ok, payload = call_reward(specs[index], fns[index], completion, example, extras)
                conn.send(("done", unit, index, ok, payload))


def call_reward(
    spec: CallSpec,
    fn: Callable[..., Any] | str,
    completion: str | list[str],
    example: Any,
    extras: dict[str, Any] | None = None,
) -> tuple[bool, Any]:
    """Run one reward call: ``(True, value)`` or ``(False, one-line error message)``.

    ``extras`` holds the pool-supplied keyword arguments; the function gets those it accepts (a
    missing one as ``None``, so the reward can say that it needs it). A group reward's value is a
    list with one checked value per completion.
    """
    if isinstance(fn, str):
        return False, fn
    kwargs = dict(spec.params)
    for key in spec.pool_kwargs:
        kwargs[key] = (extras or {}).get(key)
    try:
        value = fn(completion, example, **kwargs)
    except BaseException as exc:  # noqa: BLE001 - SystemExit from a reward is also its error
        return False, describe_exception(exc)
    if not spec.group:
        return check_value(spec.label, value)
    size = len(completion)
    if not isinstance(value, (list, tuple)) or len(value) != size:
        got = f"{len(value)} values" if isinstance(value, (list, tuple)) else type(value).__name__
        return False, f"TypeError: group reward {spec.label!r} returned {got} for a group of {size}"
    checked = []
    for item in value:
        ok, payload = check_value(spec.label, item)
        if not ok:
            return False, payload
        checked.append(payload)
    return True, checked


STEPS = "steps"  # the dict key of a reward's per-step rewards (docs/credit.md)
MAX_STEPS = 4096


def _check_steps(label: str, value: Any) -> list[float] | str:
    """A reward's ``steps``: a list of at most MAX_STEPS finite numbers, or the error message."""
    if isinstance(value, (list, tuple)) and len(value) > MAX_STEPS:  # before looking at each entry
        return f"ValueError: reward {label!r} returned {len(value)} step rewards (at most {MAX_STEPS})"
    if not isinstance(value, (list, tuple)) or not all(
        isinstance(x, numbers.Real) and not isinstance(x, bool) for x in value
    ):
        return f"TypeError: reward {label!r} returned 'steps' that is not a list of numbers"
    steps = [float(x) for x in value]
    if not all(math.isfinite(x) for x in steps):
        return f"ValueError: reward {label!r} returned a non-finite step reward"
    return steps


def check_value(label: str, value: Any) -> tuple[bool, float | dict[str, Any] | str]:
    """Accept a finite real number or a non-empty dict of them (whose ``steps`` key, if any, holds a
    list of them: one reward per step of the response); anything else is an error."""
    if isinstance(value, numbers.Real):
        number = float(value)
        if not math.isfinite(number):
            return False, f"ValueError: reward {label!r} returned a non-finite value ({number})"
        return True, number
    if isinstance(value, dict):
        if not value:
            return False, f"ValueError: reward {label!r} returned an empty dict"
        checked: dict[str, Any] = {}
        for key, item in value.items():
            if key == STEPS:
                steps = _check_steps(label, item)
                if isinstance(steps, str):
                    return False, steps
                checked[key] = steps
                continue
            if not isinstance(key, str) or not isinstance(item, numbers.Real):
                return False, (
                    f"TypeError: reward {label!r} returned a dict with {type(key).__name__} key {key!r} "
                    f"and {type(item).__name__} value; expected dict[str, float]"
                )
            if not math.isfinite(float(item)):
                return False, f"ValueError: reward {label!r} returned a non-finite value for {key!r}"
            checked[key] = float(item)
        return True, checked
    return False, (
        f"TypeError: reward {label!r} returned {type(value).__name__}; expected a float or dict[str, float]"
    )


def describe_exception(exc: BaseException) -> str:
    """``"Type: first line of message"``, bounded in length so logs stay readable."""
    lines = str(exc).strip().splitlines()
    text = f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__
    return text if len(text) <= _MAX_MESSAGE else text[: _MAX_MESSAGE - 3] + "..."


def _resolve(spec: CallSpec) -> Callable[..., Any] | str:
    """The reward function, or an error message to report for every call of it."""
    try:
        try:
            return get_reward(spec.name)
        except Exception:
            if not spec.module or spec.module in ("__main__", "__mp_main__"):
                raise
            importlib.import_module(spec.module)  # its @register_reward calls fill our registry
            return get_reward(spec.name)
    except Exception as exc:  # noqa: BLE001
        return (
            f"RlvrError: reward {spec.name!r} is not available in worker processes (define it at the "
            f"top level of an importable module): {describe_exception(exc)}"
        )


def _set_up(spec: CallSpec, fn: Callable[..., Any] | str) -> Callable[..., Any] | str:
    """Run the reward's per-worker set-up (e.g. load its model); a failure is every call's error."""
    setup = None if isinstance(fn, str) else reward_setup(fn)
    if setup is None:
        return fn
    try:
        setup(dict(spec.params))
    except Exception as exc:  # noqa: BLE001
        return f"reward {spec.label!r} set-up failed in the worker: {describe_exception(exc)}"
    return fn


def _isolate() -> None:
    """Own process group (so a kill also reaches the reward's subprocesses); die with the trainer.

    A worker hung in C code cannot run a watchdog, so its death is left to the kernel: the worker
    asks for SIGKILL when its parent (the forkserver) exits. The forkserver exits when the trainer
    does, but only once no forked child still holds its "alive" pipe — hence the worker closes its
    inherited copy.
    """
    if os.name != "posix":
        return
    try:
        os.setpgrp()
    except OSError:
        pass
    else:  # out of the terminal's foreground group: Ctrl-C no longer reaches it; the forkserver
        # ignored SIGINT (rlvr.rewards._forkserver_main), give the reward's own children the default
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        from multiprocessing import forkserver

        alive_fd = forkserver._forkserver._forkserver_alive_fd
        if alive_fd is not None:
            forkserver._forkserver._forkserver_alive_fd = None
            os.close(alive_fd)
    except (AttributeError, OSError):
        pass
    if sys.platform.startswith("linux"):
        parent = os.getppid()
        try:
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            return
        if os.getppid() != parent:  # the parent died before the request took effect
            os._exit(1)


# -- the parent's side -------------------------------------------------------------------------


class WorkerHandle:
    """The parent's side of one worker process: its pipe, and the calls sent but not yet reported."""

    def __init__(self, ctx: Any, specs: list[Any], preload: list[str]) -> None:
        self.conn, child_conn = ctx.Pipe(duplex=True)
        self.proc = ctx.Process(
            target=worker_main, args=(child_conn, specs, preload), daemon=True, name="rlvr-reward"
        )
        self.started_at = time.monotonic()
        self.proc.start()
        child_conn.close()  # so that the worker's death reads as EOF here
        self.ready = False
        self.running: deque[tuple[int, int]] = deque()  # (item, spec index), head is executing
        self.deadline = self.started_at + START_TIMEOUT_S

    def kill(self) -> None:
        """Kill the worker and every process in its group (what the reward may have started)."""
        if self.proc.exitcode is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (OSError, AttributeError):
                pass
            self.proc.kill()
        self.proc.join(timeout=5)
        self.conn.close()

    def death_reason(self) -> str:
        """Why the process is gone, for the error of the call it was running."""
        self.proc.join(timeout=1)
        code = self.proc.exitcode
        if code is None:
            return "worker process closed its pipe"
        if code < 0:
            try:
                return f"worker process killed by {signal.Signals(-code).name}"
            except ValueError:
                return f"worker process killed by signal {-code}"
        return f"worker process exited with code {code}"


def mp_context(preload: list[str], names: list[str] | tuple[str, ...] = ()) -> Any:
    """A running forkserver context that preloads the reward modules; spawn without forkserver.

    The forkserver starts once per process with the preload list of that moment, so it gets the
    heavy modules of *every* registered reward, not only this pool's: later pools fork warm too.
    It imports the main module once (see :mod:`rlvr.rewards._forkserver_main`) when a registered
    reward (or one of ``names``, this pool's rewards) was defined there, and otherwise marks it as
    imported so that workers never run the caller's script (:mod:`rlvr.rewards.main_module`).
    """
    from rlvr.rewards.main_module import check_main_guard, main_rewards

    in_main = main_rewards(names)
    check_main_guard(in_main)
    if "forkserver" not in mp.get_all_start_methods():
        return mp.get_context("spawn")
    from multiprocessing import forkserver, spawn

    from rlvr.rewards._forkserver_main import MAIN_ENV

    modules = [
        "rlvr.rewards._forkserver_main",
        *BUILTIN_MODULES,
        *(m for name in list_rewards() for m in reward_preload(name)),
        *preload,
    ]
    ctx = mp.get_context("forkserver")
    # Keep whatever the application asked for (the default is ["__main__"]), except that the main
    # module is left out when no reward lives there (CPython versions whose server honours it).
    current = list(getattr(forkserver._forkserver, "_preload_modules", None) or ["__main__"])
    if not in_main:
        current = [m for m in current if m != "__main__"]
    ctx.set_forkserver_preload(list(dict.fromkeys([*current, *modules])))
    data = spawn.get_preparation_data("rlvr-reward")
    mode = "path" if in_main else "skip-path"
    if "init_main_from_path" in data:
        main = f"{mode}:{data['init_main_from_path']}"
    elif "init_main_from_name" in data:
        main = f"{mode.replace('path', 'name')}:{data['init_main_from_name']}"
    else:
        main = ""
    os.environ[MAIN_ENV] = main
    # The server starts with SIGINT blocked and ignores it from its first import of ours on (a Ctrl-C
    # while it starts would otherwise print its own KeyboardInterrupt traceback); ours stays pending
    # until the server is up, then interrupts this process as usual.
    blocked = hasattr(signal, "pthread_sigmask")
    if blocked:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        forkserver.ensure_running()  # now, while the variable is set
    finally:
        os.environ.pop(MAIN_ENV, None)
        if blocked:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    return ctx
