"""Run untrusted Python (model-written code) so that it can neither cheat the reward nor harm the host.

Layers, outermost first:

1. **bubblewrap** (``bwrap``), when installed: new user, pid, network, ipc and uts namespaces (no
   network at all), a root file system built from nothing but read-only ``/usr`` (and the
   interpreter's own prefix), a private size-limited tmpfs ``/tmp``, fresh ``/proc`` and ``/dev``,
   an empty environment, ``--die-with-parent`` (a killed reward worker takes the sandbox with it)
   and ``--new-session``. The trainer's files (``/work``, ``$HOME``, ``/etc``) are simply absent.
   Running as root, the sandbox is started as ``nobody`` so that the process limit applies (the
   kernel exempts root from ``RLIMIT_NPROC``).
2. **Fallback** without bwrap: ``unshare`` user/pid/net/ipc/uts namespaces when the kernel allows
   them, else none; ``timeout -s KILL``; a private temporary working directory and an empty
   environment. The host's files stay *readable* in this mode: a one-time warning says so.
3. **rlimits** per program run, set by the harness in each child: CPU seconds, address space,
   file size, open files, processes; plus a wall-clock limit per case and for the whole run, and
   a cap on the output kept.

Inside, :mod:`rlvr.rewards._sandbox_harness` runs the program and reports through a pipe that the
program cannot write; a run counts only if that report says the harness reached its end. In
function tests the asserts run in the harness, never in the process that runs the program
(:mod:`rlvr.rewards._sandbox_functions`).

Only bubblewrap hides the host: on the fallbacks the program can read the host's files and write
wherever the trainer's user can (its /tmp included), and without ``unshare`` it has the network.
So :func:`run_stdio` and :func:`run_function_tests` refuse to run there (:class:`UnsafeSandboxError`)
unless called with ``allow_unsafe=True`` (the ``code`` reward's ``allow_unsafe_sandbox`` param).
"""

from __future__ import annotations

import json
import logging
import os
import selectors
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlvr.errors import RlvrError
from rlvr.rewards import _sandbox_codec, _sandbox_functions, _sandbox_harness, _sandbox_process
from rlvr.rewards.sandbox_backend import (
    BACKEND_ENV,
    INSTALL_HINT,
    NOBODY,
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

_INLINED = "# sandbox: inlined"


def _harness_script() -> str:
    """The harness and the modules it uses as one script for ``python -c`` (the sandbox cannot
    import rlvr): each file in turn, without the imports marked as inlined."""
    parts = []
    for module in (_sandbox_codec, _sandbox_process, _sandbox_functions, _sandbox_harness):
        lines = Path(module.__file__).read_text().splitlines()
        parts.append("\n".join(line for line in lines if not line.endswith(_INLINED)))
    return "\n\n".join(parts) + "\n"


_HARNESS_SOURCE = _harness_script()


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
    up: an error after it started means the program killed its harness (a failed run); an error
    before means the sandbox itself failed (no verdict at all).
    """

    backend: str
    report: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    started: bool = False
    seconds: float = 0.0


def run_stdio(
    code: str, inputs: list[str], limits: Limits = Limits(), *, allow_unsafe: bool = False
) -> SandboxResult:
    """Run ``code`` once per input (as its stdin); the report has one entry per case."""
    config = {"mode": "stdio", "code": code, "inputs": list(inputs)}
    return _run(config, None, limits, allow_unsafe)


def run_function_tests(
    code: str,
    test_code: str,
    entry_point: str | None,
    limits: Limits = Limits(),
    *,
    prelude: str = "",
    allow_unsafe: bool = False,
) -> SandboxResult:
    """Load ``code`` in one process and run the tests (HumanEval ``check(candidate)`` or top-level
    asserts) one statement at a time in another, which calls the program's functions across a
    pipe. ``prelude`` (trusted, e.g. HumanEval's prompt) defines helpers the tests may call.

    The report has ``total`` (statements that assert something about the candidate), ``passed``,
    ``reached_end`` and ``status`` (of the program's process: ``"ok"``, ``"timeout"``, ``"exit"``…).
    """
    try:
        tests = _sandbox_functions.split_tests(test_code, entry_point, prelude)
    except SyntaxError as exc:
        raise ValueError(f"the test code does not parse: {exc}") from exc
    config = {"mode": "function", "code": code, "entry_point": entry_point}
    return _run(config, tests, limits, allow_unsafe)


def backend_name() -> str:
    """``"bwrap"``, ``"unshare"`` or ``"rlimits"``: how untrusted code will be isolated here."""
    return _backend().name


def require_isolation(allow_unsafe: bool = False) -> str:
    """The backend's name when it isolates untrusted code from the host (bubblewrap), or when the
    caller accepts the risk; otherwise :class:`UnsafeSandboxError` saying what is exposed and how to
    fix it."""
    name = _backend().name
    if name == "bwrap" or allow_unsafe:
        return name
    exposed = "read the host's files and write to its /tmp" + (
        " and open network connections" if name == "rlimits" else ""
    )
    raise UnsafeSandboxError(
        f"the code sandbox needs bubblewrap (bwrap), which is not available here: the fallback "
        f"({name}) would let model-written code {exposed}. Install it (Debian/Ubuntu: "
        f"{INSTALL_HINT}), or accept the risk for this reward with the param "
        "allow_unsafe_sandbox: true."
    )


def _run(
    config: dict[str, Any], tests: dict[str, Any] | None, limits: Limits, allow_unsafe: bool
) -> SandboxResult:
    require_isolation(allow_unsafe)
    backend = _backend()
    start = time.monotonic()
    workdir = "/tmp" if backend.name == "bwrap" else tempfile.mkdtemp(prefix="rlvr-sandbox-")
    report_r, report_w = os.pipe()
    try:
        if backend.drop_to_nobody and backend.name != "bwrap":
            os.chown(workdir, NOBODY, NOBODY)
        config = {
            **config,
            "report_fd": report_w,
            "workdir": workdir,
            "budget_s": limits.total_s,
            "own_pid_namespace": backend.name == "bwrap",
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
        command = _command(backend, limits)
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
                **_user_kwargs(backend),
            )
        except OSError as exc:
            return SandboxResult(backend.name, error=f"cannot start the sandbox: {exc}")
        os.close(report_w)
        report_w = -1
        messages = _sandbox_codec.encode(config)
        if tests is not None:
            messages += _sandbox_codec.encode(tests)
        report, stderr, timed_out = _exchange(proc, messages, report_r, limits)
    finally:
        for fd in (report_r, report_w):
            if fd >= 0:
                os.close(fd)
        if workdir != "/tmp":
            shutil.rmtree(workdir, ignore_errors=True)
    seconds = time.monotonic() - start
    started = report.startswith(_sandbox_harness.STARTED)
    if timed_out:
        error = f"sandbox exceeded {limits.total_s + 2:g}s"
        return SandboxResult(backend.name, error=error, started=started, seconds=seconds)
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
    proc: subprocess.Popen[bytes], config: bytes, report_r: int, limits: Limits
) -> tuple[bytes, bytes, bool]:
    """Feed the config, collect the report and (capped) stderr, all under one wall-clock deadline."""
    deadline = time.monotonic() + limits.total_s + 2.0  # grace for sandbox start-up and teardown
    cap = 64 * limits.output_bytes + (1 << 20)
    assert proc.stdin is not None and proc.stderr is not None
    stdin_fd, stderr_fd = proc.stdin.fileno(), proc.stderr.fileno()
    buffers = {report_r: bytearray(), stderr_fd: bytearray()}
    pending = memoryview(config)
    with selectors.DefaultSelector() as selector:
        selector.register(stdin_fd, selectors.EVENT_WRITE)
        for fd in buffers:
            selector.register(fd, selectors.EVENT_READ)
        os.set_blocking(stdin_fd, False)
        while selector.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                _kill(proc)
                return bytes(buffers[report_r]), bytes(buffers[stderr_fd]), True
            for key, _ in selector.select(left):
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
    try:
        proc.wait(timeout=max(0.1, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        _kill(proc)
        return bytes(buffers[report_r]), bytes(buffers[stderr_fd]), True
    return bytes(buffers[report_r]), bytes(buffers[stderr_fd]), False


def _kill(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        pass
    proc.kill()
    proc.wait()


def _command(backend: _Backend, limits: Limits) -> list[str]:
    python = [backend.python, "-I", "-S", "-c", _HARNESS_SOURCE]
    if backend.name == "bwrap":
        return [*bwrap_args(backend, limits.tmpfs_mb), "--", *python]
    wall = f"{limits.total_s + 1:g}"
    prefix = ["timeout", "-s", "KILL", wall] if shutil.which("timeout") else []
    if backend.name == "unshare":
        prefix += [*UNSHARE]
    return [*prefix, *python]


# Re-exported for callers and tests that probe or replace the backend through this module.
__all__ = [
    "BACKEND_ENV",
    "INSTALL_HINT",
    "PYTHON_ENV",
    "Limits",
    "SandboxResult",
    "UnsafeSandboxError",
    "_Backend",
    "_backend",
    "_user_kwargs",
    "_works",
]
