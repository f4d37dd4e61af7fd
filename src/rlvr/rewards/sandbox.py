"""Run untrusted Python (model-written code) so that it can neither cheat the reward nor harm the host.

Layers, outermost first:

1. **bubblewrap** (``bwrap``), when installed: new user, pid, network, ipc and uts namespaces (no
   network at all), a root file system built from nothing but read-only ``/usr`` (and the
   interpreter's own prefix), a private size-limited tmpfs ``/tmp``, fresh ``/proc`` and ``/dev``,
   an empty environment, ``--die-with-parent`` (a killed reward worker takes the sandbox with it)
   and ``--new-session``. The trainer's files (``/work``, ``$HOME``, ``/etc``) are simply absent.
   Running as root, the sandbox is started as ``nobody`` so that the process limit applies (the
   kernel exempts root from ``RLIMIT_NPROC``).
2. **Weak fallbacks** without bwrap, only with ``allow_unsafe`` (see below): ``unshare``
   user/pid/net/ipc/uts namespaces when the kernel allows them (backend ``"unshare"``), else none
   (``"rlimits"``); a private temporary working directory and an empty environment. Running as
   root, each run gets a **uid of its own** (random, never reused by a live run), so runs cannot
   signal each other or touch each other's working directories, and the run's processes are
   exactly that uid's.
3. **rlimits** per program run, set by the harness in each child: CPU seconds, address space,
   file size, open files, processes, no new privileges; plus a wall-clock limit per case and for
   the whole run, and a cap on the output kept.

**Every process of a run is killed when the run ends** (and between the cases of a run), on every
backend, also those that called ``setsid`` or double-forked to outlive it: with bubblewrap and
``unshare`` the run is a pid namespace, which the kernel empties when its init ends (the harness
also sweeps it with ``kill(-1)`` after each case) and which dies with the trainer
(``--die-with-parent``; ``setpriv --pdeathsig``, ``unshare --kill-child``); on ``rlimits`` a
trusted supervisor
(:mod:`rlvr.rewards._sandbox_supervisor`) owns the run and, before it exits, kills every process of
the run's uid (as root) or every descendant (it is a child subreaper, so orphans stay its
descendants). See :mod:`rlvr.rewards._sandbox_process` for the per-case sweep.

Inside, :mod:`rlvr.rewards._sandbox_harness` runs the program and reports through a pipe that the
program cannot write; a run counts only if that report says the harness reached its end. In
function tests the asserts run in the harness, never in the process that runs the program
(:mod:`rlvr.rewards._sandbox_functions`).

Time: the run's wall-clock limit (``Limits.total_s``, plus a short grace) is counted from the moment
the harness is up, not from the start of the sandbox, so a slow start-up on a loaded machine never
turns a program's ordinary timeout into a killed run; the start-up has its own limit
(:data:`STARTUP_S`). A caller can stop a run from another thread (``cancel``, a
:class:`threading.Event`): the sandbox is killed, with all its processes, within ~50 ms.

Only bubblewrap hides the host: on the weak fallbacks the program can read the host's files, write
wherever its user can (the host's /tmp included), follow symlinks anywhere, and without ``unshare``
reach the network, loopback services included (:func:`unsafe_warning` says it all). So
:func:`run_stdio` and :func:`run_function_tests` refuse to run there (:class:`UnsafeSandboxError`)
unless called with ``allow_unsafe=True`` (the ``allow_unsafe_sandbox`` param of the ``code``
reward and of the ``python`` tool), and :func:`require_isolation` warns each time it accepts that.
"""

from __future__ import annotations

import ast
import json
import logging
import os
import secrets
import selectors
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlvr.errors import RlvrError
from rlvr.rewards import (
    _sandbox_codec,
    _sandbox_functions,
    _sandbox_harness,
    _sandbox_process,
    _sandbox_supervisor,
)
from rlvr.rewards.sandbox_backend import (
    BACKEND_ENV,
    INSTALL_HINT,
    PYTHON_ENV,
    SANDBOX_PATH,
    UNSHARE,
    bwrap_args,
)
from rlvr.rewards.sandbox_backend import Backend as _Backend
from rlvr.rewards.sandbox_backend import probe as _backend
from rlvr.rewards.sandbox_backend import user_kwargs as _user_kwargs
from rlvr.rewards.sandbox_backend import works as _works

log = logging.getLogger(__name__)

STARTUP_S = 20.0  # seconds a sandbox may take to come up; not part of the run's own time limit
GRACE_S = 2.0  # beyond the run's total_s, once the harness is up, before the parent kills it
_CANCEL_POLL_S = 0.05  # how often a run checks its cancel event
_RUN_UID_BASE, _RUN_UID_SPAN = 0x60000000, 1 << 28  # per-run uids (weak backends, as root)


def _script(*modules: Any) -> str:
    """Modules as one script for ``python -c`` (the sandbox cannot import rlvr): each file in turn,
    without its imports from rlvr (marked ``# sandbox: inlined``), whose names the earlier files
    define."""
    parts = []
    for module in modules:
        source = Path(module.__file__).read_text()
        inlined: set[int] = set()
        for node in ast.parse(source).body:
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("rlvr."):
                inlined.update(range(node.lineno - 1, node.end_lineno or node.lineno))
        lines = source.splitlines()
        parts.append("\n".join(line for number, line in enumerate(lines) if number not in inlined))
    return "\n\n".join(parts) + "\n"


_HARNESS_SOURCE = _script(_sandbox_codec, _sandbox_process, _sandbox_functions, _sandbox_harness)
_SUPERVISOR_SOURCE = _script(_sandbox_process, _sandbox_supervisor)


class UnsafeSandboxError(RlvrError):
    """Untrusted code would run without bubblewrap, and the caller did not accept that risk."""


@dataclass(frozen=True)
class Limits:
    """Resource limits for one sandboxed run (all cases of one completion)."""

    case_s: float = 2.0  # wall-clock (and, rounded up, CPU) seconds per case / per function test run
    total_s: float = 6.0  # wall-clock seconds for all cases together
    memory_mb: int = 512  # address space per program run
    file_mb: int = 16  # largest file a program may write
    processes: int = 32  # processes/threads a program may have at once
    output_bytes: int = 65536  # stdout kept per case (more is an "output_limit" failure)
    tmpfs_mb: int = 64  # size of the private /tmp (bwrap only)


@dataclass
class SandboxResult:
    """What came back from one run.

    ``error`` is set when there is no complete report. ``started`` says whether the harness came
    up: an error after it started means the program killed or froze its harness, or the whole run
    overran its time (a failed run); an error before means the sandbox itself failed (no verdict at
    all). ``timed_out``: the run (or its start-up) passed its wall-clock limit and was killed;
    ``cancelled``: the caller's ``cancel`` event stopped it.
    """

    backend: str
    report: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    started: bool = False
    seconds: float = 0.0
    timed_out: bool = False
    cancelled: bool = False


def run_stdio(
    code: str,
    inputs: list[str],
    limits: Limits = Limits(),
    *,
    allow_unsafe: bool = False,
    cancel: threading.Event | None = None,
) -> SandboxResult:
    """Run ``code`` once per input (as its stdin); the report has one entry per case.

    Setting ``cancel`` (from any thread) kills the run and everything it started; the result then
    has ``cancelled`` and no report."""
    config = {"mode": "stdio", "code": code, "inputs": list(inputs)}
    return _run(config, None, limits, allow_unsafe, cancel)


def run_function_tests(
    code: str,
    test_code: str,
    entry_point: str | None,
    limits: Limits = Limits(),
    *,
    prelude: str = "",
    allow_unsafe: bool = False,
    cancel: threading.Event | None = None,
) -> SandboxResult:
    """Load ``code`` in one process and run the tests (HumanEval ``check(candidate)`` or top-level
    asserts) one statement at a time in another, which calls the program's functions across a
    pipe. ``prelude`` (trusted, e.g. HumanEval's prompt) defines helpers the tests may call.

    The report has ``total`` (statements that assert something about the candidate), ``passed``,
    ``reached_end`` and ``status`` (of the program's process: ``"ok"``, ``"timeout"``, ``"exit"``…).
    ``cancel`` as for :func:`run_stdio`.
    """
    try:
        tests = _sandbox_functions.split_tests(test_code, entry_point, prelude)
    except SyntaxError as exc:
        raise ValueError(f"the test code does not parse: {exc}") from exc
    config = {"mode": "function", "code": code, "entry_point": entry_point}
    return _run(config, tests, limits, allow_unsafe, cancel)


def backend_name() -> str:
    """``"bwrap"``, ``"unshare"`` or ``"rlimits"``: how untrusted code will be isolated here."""
    return _backend().name


def require_isolation(allow_unsafe: bool = False, *, warn: bool = True) -> str:
    """The backend's name when it isolates untrusted code from the host (bubblewrap), or when the
    caller accepts the risk; otherwise :class:`UnsafeSandboxError` saying what is exposed and how to
    fix it. Accepting a weak backend logs :func:`unsafe_warning` (every call, unless ``warn`` is
    False): callers call this once per training run, reward worker or environment."""
    name = _backend().name
    if name == "bwrap":
        return name
    if allow_unsafe:
        if warn:
            log.warning(unsafe_warning(name))
        return name
    exposed = "read the host's files, write to its /tmp and follow symlinks anywhere" + (
        " and open network connections (loopback services included)" if name == "rlimits" else ""
    )
    raise UnsafeSandboxError(
        f"the code sandbox needs bubblewrap (bwrap), which is not available here: the fallback "
        f"({name}) would let model-written code {exposed}. Install it (Debian/Ubuntu: "
        f"{INSTALL_HINT}), or accept the risk for this reward with the param "
        "allow_unsafe_sandbox: true."
    )


def unsafe_warning(name: str) -> str:
    """What model-written code can and cannot do on the weak backend ``name`` (``"unshare"`` or
    ``"rlimits"``): the warning logged whenever a run accepts it."""
    root = os.geteuid() == 0
    readable = "every world-readable file" if root else "every file the trainer's user can read"
    parts = [
        f"allow_unsafe_sandbox: bubblewrap is not available, so model-written code runs in the weak "
        f"'{name}' sandbox, which does NOT protect the host. The code can READ {readable} on the host "
        "(configs, data, checkpoints, keys), WRITE to the host's /tmp and any other world-writable "
        "directory (what it writes there stays after the run), follow symlinks anywhere on the host, "
        "and see the host's processes and their command lines (/proc)"
    ]
    if name == "rlimits":
        parts.append(
            ", and it has the NETWORK: loopback services (a local database, an inference server, "
            "the reward workers' ports), the local network, the cloud metadata address and the internet"
        )
    else:
        parts.append("; it has no network (a network namespace of its own)")
    if not root:
        parts.append(
            ". It runs as the trainer's own user, so it can also modify the trainer's files and "
            "signal or kill the trainer's processes (the supervisor of its own run included)"
        )
    parts.append(
        ". What it keeps: CPU, memory, file-size and process limits, an empty environment, a "
        "private working directory, and every process a run starts is killed when the run ends"
        + (" (each run has a uid of its own)" if root else "")
        + f". Install bubblewrap for a read-only, network-less sandbox ({INSTALL_HINT})."
    )
    return "".join(parts)


def _run_uid() -> int:
    """A uid for one run on a weak backend (as root), unused by any live process: runs cannot
    reach each other, and the run's processes are exactly this uid's."""
    while True:
        uid = _RUN_UID_BASE + secrets.randbelow(_RUN_UID_SPAN)
        if not _sandbox_process.processes_of_uid(uid):
            return uid


def _run(
    config: dict[str, Any],
    tests: dict[str, Any] | None,
    limits: Limits,
    allow_unsafe: bool,
    cancel: threading.Event | None,
) -> SandboxResult:
    require_isolation(allow_unsafe, warn=False)
    backend = _backend()
    uid = _run_uid() if backend.drop_to_nobody and backend.name != "bwrap" else None
    supervised = backend.name == "rlimits"
    start = time.monotonic()
    workdir = "/tmp" if backend.name == "bwrap" else tempfile.mkdtemp(prefix="rlvr-sandbox-")
    report_r, report_w = os.pipe()
    try:
        if uid is not None:
            os.chown(workdir, uid, uid)
        config = {
            **config,
            "report_fd": report_w,
            "workdir": workdir,
            "budget_s": limits.total_s,
            # how the harness finds the processes a program left (see _sandbox_process.kill_all):
            # a pid namespace or a uid of the run's own holds exactly them, else its descendants
            "sweep": "namespace" if not supervised else ("uid" if uid is not None else "descendants"),
            "nproc": limits.processes,
            "limits": {
                "case_s": limits.case_s,
                "memory_bytes": limits.memory_mb << 20,
                "file_bytes": limits.file_mb << 20,
                "output_bytes": limits.output_bytes,
            },
        }
        # Without a user namespace of its own, RLIMIT_NPROC counts every process of the uid: the
        # harness then allows `processes` more than exist when a child starts.
        config["nproc_shared"] = backend.name == "rlimits"
        command = _command(backend, limits, uid, report_w, workdir)
        try:
            proc = subprocess.Popen(
                command,
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                pass_fds=(report_w,),
                env={"PATH": SANDBOX_PATH, "LANG": "C.UTF-8"},
                cwd=workdir,
                start_new_session=True,
                **_popen_user(backend, uid),
            )
        except OSError as exc:
            return SandboxResult(backend.name, error=f"cannot start the sandbox: {exc}")
        os.close(report_w)
        report_w = -1
        messages = _sandbox_codec.encode(config)
        if tests is not None:
            messages += _sandbox_codec.encode(tests)
        report, stderr, cut = _exchange(proc, messages, report_r, limits, cancel, supervised)
    finally:
        for fd in (report_r, report_w):
            if fd >= 0:
                os.close(fd)
        if uid is not None:  # whatever is left of the run (its supervisor or pid namespace failed)
            _sandbox_process.sweep_uid(uid)
        if workdir != "/tmp":
            shutil.rmtree(workdir, ignore_errors=True)
    seconds = time.monotonic() - start
    started = report.startswith(_sandbox_harness.STARTED)
    if cut == "cancelled":
        return SandboxResult(
            backend.name, error="cancelled", started=started, seconds=seconds, cancelled=True
        )
    if cut == "timeout":
        error = (
            f"sandbox exceeded {limits.total_s + GRACE_S:g}s"
            if started
            else f"sandbox did not start within {STARTUP_S:g}s"
        )
        return SandboxResult(backend.name, error=error, started=started, seconds=seconds, timed_out=True)
    try:
        parsed = json.loads(report[len(_sandbox_harness.STARTED) :]) if started else None
    except ValueError:
        parsed = None
    if not isinstance(parsed, dict) or parsed.get("done") is not True:
        tail = stderr.decode("utf-8", "replace").strip().splitlines()[-3:]
        error = f"no complete report from the harness (exit {proc.returncode}): {tail}"
        return SandboxResult(backend.name, error=error, started=started, seconds=seconds)
    return SandboxResult(backend.name, report=parsed, started=True, seconds=seconds)


def _exchange(
    proc: subprocess.Popen[bytes],
    config: bytes,
    report_r: int,
    limits: Limits,
    cancel: threading.Event | None,
    supervised: bool,
) -> tuple[bytes, bytes, str | None]:
    """Feed the config, collect the report and (capped) stderr. Returns them and what cut the run
    short: None, ``"timeout"`` or ``"cancelled"``.

    Until the harness reports that it is up, the deadline is :data:`STARTUP_S` from now; from then
    on it is ``limits.total_s`` plus :data:`GRACE_S` from that moment, so that the time a loaded
    machine takes to start the sandbox never counts against the program."""
    deadline = time.monotonic() + STARTUP_S
    up = False
    cap = 64 * limits.output_bytes + (1 << 20)
    assert proc.stdin is not None and proc.stderr is not None
    stdin_fd, stderr_fd = proc.stdin.fileno(), proc.stderr.fileno()
    buffers = {report_r: bytearray(), stderr_fd: bytearray()}
    pending = memoryview(config)

    def cut(reason: str) -> tuple[bytes, bytes, str]:
        _stop(proc, supervised)
        return bytes(buffers[report_r]), bytes(buffers[stderr_fd]), reason

    with selectors.DefaultSelector() as selector:
        selector.register(stdin_fd, selectors.EVENT_WRITE)
        for fd in buffers:
            selector.register(fd, selectors.EVENT_READ)
        os.set_blocking(stdin_fd, False)
        while selector.get_map():
            if cancel is not None and cancel.is_set():
                return cut("cancelled")
            if not up and buffers[report_r].startswith(_sandbox_harness.STARTED):
                up, deadline = True, time.monotonic() + limits.total_s + GRACE_S
            left = deadline - time.monotonic()
            if left <= 0:
                return cut("timeout")
            for key, _ in selector.select(left if cancel is None else min(left, _CANCEL_POLL_S)):
                fd = key.fd
                if fd == stdin_fd:
                    try:
                        pending = pending[os.write(fd, pending[:65536]) :]
                    except BrokenPipeError:
                        pending = pending[:0]
                    if not pending:
                        selector.unregister(fd)
                        proc.stdin.close()
                    continue
                chunk = os.read(fd, 65536)
                if not chunk:
                    selector.unregister(fd)
                elif len(buffers[fd]) < cap:
                    buffers[fd] += chunk
    if not up and buffers[report_r].startswith(_sandbox_harness.STARTED):
        deadline = time.monotonic() + limits.total_s + GRACE_S
    while True:
        if cancel is not None and cancel.is_set():
            return cut("cancelled")
        left = deadline - time.monotonic()
        if left <= 0:
            return cut("timeout")
        try:
            proc.wait(timeout=left if cancel is None else min(left, _CANCEL_POLL_S))
        except subprocess.TimeoutExpired:
            continue
        return bytes(buffers[report_r]), bytes(buffers[stderr_fd]), None


def _stop(proc: subprocess.Popen[bytes], supervised: bool) -> None:
    """End a run early. A supervisor (``rlimits``) is asked to (SIGTERM), so that it kills the
    run's processes before it exits; anything else, or a supervisor that does not end, is killed
    with its process group (a pid namespace dies with it)."""
    if supervised and proc.poll() is None:
        try:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=5.0)
            return
        except (OSError, subprocess.TimeoutExpired):
            pass
    _kill(proc)


def _kill(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        pass
    proc.kill()
    proc.wait()


def _popen_user(backend: _Backend, uid: int | None) -> dict[str, Any]:
    """Who the process the trainer starts runs as: ``nobody`` for bubblewrap (as root); the run's
    own uid for ``unshare``; for ``rlimits`` the trainer's user (the supervisor, which starts the
    harness as the run's uid)."""
    if backend.name == "bwrap":
        return _user_kwargs(backend)
    if uid is None or backend.name == "rlimits":
        return {}
    return {"user": uid, "group": uid, "extra_groups": []}


def _command(backend: _Backend, limits: Limits, uid: int | None, report_fd: int, workdir: str) -> list[str]:
    python = [backend.python, "-I", "-S", "-c", _HARNESS_SOURCE]
    if backend.name == "bwrap":
        return [*bwrap_args(backend, limits.tmpfs_mb), "--", *python]
    # for when the trainer (its thread that started the run) dies mid-run; its own deadlines come
    # first. With unshare: killed with the trainer (setpriv's parent-death signal, like bwrap's
    # --die-with-parent; unshare --kill-child then takes the pid namespace), else a wall-clock cap.
    wall = STARTUP_S + limits.total_s + GRACE_S + 1.0
    if backend.name == "unshare":
        if shutil.which("setpriv"):
            prefix = ["setpriv", "--pdeathsig", "KILL"]
        else:
            prefix = ["timeout", "-s", "KILL", f"{wall:g}"] if shutil.which("timeout") else []
        return [*prefix, *UNSHARE, *python]
    args = {
        "uid": uid,
        "wall": wall,
        "parent": os.getpid(),
        "report_fd": report_fd,
        "workdir": workdir,
        "command": python,
    }
    return [backend.python, "-I", "-S", "-c", _SUPERVISOR_SOURCE, json.dumps(args)]


# Re-exported for callers and tests that probe or replace the backend through this module.
__all__ = [
    "BACKEND_ENV",
    "INSTALL_HINT",
    "PYTHON_ENV",
    "Limits",
    "SandboxResult",
    "UnsafeSandboxError",
    "_Backend",
    "unsafe_warning",
    "_backend",
    "_user_kwargs",
    "_works",
]
