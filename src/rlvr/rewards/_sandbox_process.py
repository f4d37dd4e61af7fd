"""Untrusted children inside the sandbox: fork, rlimits, waiting, killing (stdlib only).

Used by the harness (:mod:`rlvr.rewards._sandbox_harness`), which runs inside the sandbox. A child
is forked from the harness and limited *before* any untrusted code runs in it: its own process
group, rlimits on CPU, memory, file size, open files and processes, standard streams on files in
the sandbox's private working directory, and every other descriptor closed except those it is
meant to keep. The harness marks itself non-dumpable first, so a child (same uid, no
capabilities) can neither ptrace it nor open its ``/proc/<pid>/{fd,mem}``.

Why fork instead of exec'ing a fresh interpreter per case: a fork costs about a millisecond, an
interpreter start about 20; the untrusted code only ever runs after the fork.
"""

import builtins
import os
import resource
import select
import signal
import sys
import time


def no_dumps() -> None:
    """Make /proc/<harness>/{fd,mem} and ptrace inaccessible to the children (same uid)."""
    try:
        import ctypes

        ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 4
    except Exception:  # noqa: BLE001 - without ctypes the harness is merely less protected
        pass


def limit_child(config: dict, keep_fds: tuple = ()) -> None:
    """In the forked child, before untrusted code: own process group, rlimits, no stray fds."""
    os.setpgid(0, 0)
    limits = config["limits"]
    cpu = max(1, int(limits["case_s"] + 0.999))
    settings = [
        (resource.RLIMIT_CPU, (cpu, cpu + 1)),
        (resource.RLIMIT_AS, (limits["memory_bytes"],) * 2),
        (resource.RLIMIT_FSIZE, (limits["file_bytes"],) * 2),
        (resource.RLIMIT_CORE, (0, 0)),
        (resource.RLIMIT_NOFILE, (64, 64)),
    ]
    nproc = config["nproc"]
    if config.get("nproc_shared"):  # no user namespace: the limit counts all our uid's processes
        nproc += _processes_of(os.getuid())
    settings.append((resource.RLIMIT_NPROC, (nproc, nproc)))
    for kind, value in settings:
        try:
            resource.setrlimit(kind, value)
        except (ValueError, OSError):
            pass
    for fd in range(3, 256):
        if fd not in keep_fds:
            try:
                os.close(fd)
            except OSError:
                pass


def _processes_of(uid: int) -> int:
    """Processes and threads the kernel counts against ``uid``'s RLIMIT_NPROC right now."""
    count = 0
    for pid in os.listdir("/proc"):
        try:
            with open(f"/proc/{pid}/status") as handle:
                fields = dict(line.split(":", 1) for line in handle if ":" in line)
        except (OSError, ValueError):
            continue
        if int(fields.get("Uid", "-1 0").split()[0]) == uid:
            count += int(fields.get("Threads", "1").strip())
    return count


def spawn(config: dict, stdin_path: str, tag: str, body, keep_fds: tuple = ()) -> int:
    """Fork a child that runs ``body()`` with its std streams on files; return its pid."""
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid:
        return pid
    code = 1
    try:
        for fd, path, flags in (
            (0, stdin_path, os.O_RDONLY),
            (1, f"{tag}.out", os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
            (2, f"{tag}.err", os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
        ):
            opened = os.open(path, flags | os.O_NOFOLLOW, 0o600)
            os.dup2(opened, fd)
            os.close(opened)
        signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
        limit_child(config, keep_fds)
        _add_exit_builtins()
        # Fresh stream objects on the files (the harness's stdin pipe is closed by the dup2).
        sys.stdin = os.fdopen(0, "r", closefd=False)
        sys.stdout = os.fdopen(1, "w", closefd=False)
        sys.stderr = os.fdopen(2, "w", closefd=False)
        body()
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # noqa: BLE001 - the untrusted program's own error
        import traceback

        traceback.print_exc()
        code = 1
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code & 0xFF)


def _add_exit_builtins() -> None:
    """``exit()`` and ``quit()`` as a program run by ``python`` has them (``-S`` skips the site
    module that defines them), so a correct program that ends with ``exit()`` is not a NameError."""

    def leave(code: object = None) -> None:
        raise SystemExit(code)

    builtins.exit = builtins.quit = leave


def wait(pid: int, seconds: float, config: dict) -> tuple[str, int | None, float]:
    """Wait up to ``seconds`` for the child; kill its group (and stragglers) either way."""
    start = time.monotonic()
    deadline = start + seconds
    status = None
    pidfd = None
    try:
        pidfd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        pass
    while True:
        done, raw = os.waitpid(pid, os.WNOHANG)
        if done:
            status = raw
            break
        left = deadline - time.monotonic()
        if left <= 0:
            break
        if pidfd is not None:
            select.select([pidfd], [], [], left)
        else:
            time.sleep(min(left, 0.002))
    if pidfd is not None:
        os.close(pidfd)
    elapsed = time.monotonic() - start
    kill_all(pid, config)
    if status is None:
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:  # already reaped by the sweep
            pass
        return "timeout", None, elapsed
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        return ("timeout" if sig == signal.SIGXCPU else f"signal {sig}"), None, elapsed
    return ("ok" if os.WEXITSTATUS(status) == 0 else "exit"), os.WEXITSTATUS(status), elapsed


def kill_all(pid: int, config: dict) -> None:
    """Kill the child's process group, and in our own pid namespace every process but us and init."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        pass
    if not config.get("own_pid_namespace"):
        return
    me = os.getpid()
    for _ in range(3):  # a fork bomb keeps forking while we sweep
        others = [int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) not in (1, me)]
        if not others:
            break
        for other in others:
            try:
                os.kill(other, signal.SIGKILL)
            except OSError:
                pass
        while True:
            try:
                if os.waitpid(-1, os.WNOHANG)[0] == 0:
                    break
            except ChildProcessError:
                break


def read_capped(path: str, limit: int) -> tuple[str, bool]:
    """At most ``limit`` bytes of a file a child wrote, and whether there was more. Never follows a
    symlink or blocks on a FIFO that the child may have put in its place."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return "", False
    try:
        with os.fdopen(fd, "rb") as handle:
            data = handle.read(limit + 1) or b""
    except OSError:
        return "", False
    return data[:limit].decode("utf-8", "replace"), len(data) > limit
