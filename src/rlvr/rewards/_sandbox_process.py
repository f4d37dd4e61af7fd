"""Untrusted children inside the sandbox: fork, rlimits, waiting, killing (stdlib only).

Used by the harness (:mod:`rlvr.rewards._sandbox_harness`), which runs inside the sandbox. A child
is forked from the harness and limited *before* any untrusted code runs in it: its own process
group, rlimits on CPU, memory, file size, open files and processes, standard streams on files in
the sandbox's private working directory, and every other descriptor closed except those it is
meant to keep. The harness marks itself non-dumpable first, so a child (same uid, no
capabilities) can neither ptrace it nor open its ``/proc/<pid>/{fd,mem}``.

Why fork instead of exec'ing a fresh interpreter per case: a fork costs about a millisecond, an
interpreter start about 20; the untrusted code only ever runs after the fork.

When a child ends, :func:`kill_all` kills every process the program left (daemons that called
``setsid`` or double-forked included), so that nothing of one case survives into the next. How it
finds them is the run's ``sweep`` (chosen by :mod:`rlvr.rewards.sandbox` per backend):

- ``"namespace"`` (bubblewrap, ``unshare``: a pid namespace of the run's own) and ``"uid"``
  (``rlimits`` as root: a uid of the run's own): ``kill(-1, SIGKILL)``, which reaches every
  process the harness may signal except itself and its namespace's init, that is exactly the
  run's processes; repeated until none is left;
- ``"descendants"``: (``rlimits`` without root: the program shares the trainer's uid) the harness
  is a child subreaper, so orphaned and double-forked processes are re-parented to it and stay its
  descendants, found through ``/proc``.

The same module gives :mod:`rlvr.rewards._sandbox_supervisor` and the trainer :func:`sweep_uid`.
"""

import builtins
import os
import resource
import select
import signal
import sys
import time

_PR_SET_PDEATHSIG = 1
_PR_SET_DUMPABLE = 4
_PR_SET_CHILD_SUBREAPER = 36
_PR_SET_NO_NEW_PRIVS = 38
_REAPED: dict = {}  # pid -> (wait status, rusage) of children reaped by a sweep


def prctl(option: int, value: int) -> bool:
    """``prctl(option, value)``; False when it failed or ctypes is missing."""
    try:
        import ctypes

        return ctypes.CDLL(None).prctl(option, value, 0, 0, 0) == 0
    except Exception:  # noqa: BLE001 - without ctypes the process is merely less protected
        return False


def no_dumps() -> None:
    """Make /proc/<harness>/{fd,mem} and ptrace inaccessible to the children (same uid)."""
    prctl(_PR_SET_DUMPABLE, 0)


def become_subreaper() -> None:
    """Orphans among our descendants are re-parented to us (not to init), so they stay findable."""
    prctl(_PR_SET_CHILD_SUBREAPER, 1)


def limit_child(config: dict, keep_fds: tuple = ()) -> None:
    """In the forked child, before untrusted code: own process group, rlimits, no stray fds, and
    no new privileges (a setuid program it runs does not gain its owner's rights)."""
    os.setpgid(0, 0)
    prctl(_PR_SET_NO_NEW_PRIVS, 1)
    limits = config["limits"]
    cpu = cpu_seconds(config)
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
    """Wait up to ``seconds`` for the child; kill its group (and stragglers) either way.

    The status says which limit ended it, from what the harness saw, never from how long it took:
    ``"timeout"`` when the wall-clock limit passed (the harness killed it) or the CPU limit did
    (``SIGXCPU`` at the soft limit, or ``SIGKILL`` at the hard one with the CPU time to show for
    it), so a program that overruns is classified the same on an idle and on a loaded machine."""
    start = time.monotonic()
    deadline = start + seconds
    status = usage = None
    pidfd = None
    try:
        pidfd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        pass
    while True:
        done, raw, usage = _reap(pid, os.WNOHANG)
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
        _reap(pid, 0)  # killed above (or already reaped by the sweep)
        return "timeout", None, elapsed
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        return ("timeout" if _cpu_limit_hit(sig, usage, config) else f"signal {sig}"), None, elapsed
    return ("ok" if os.WEXITSTATUS(status) == 0 else "exit"), os.WEXITSTATUS(status), elapsed


def _cpu_limit_hit(sig: int, usage, config: dict) -> bool:
    if sig == signal.SIGXCPU:
        return True
    if sig != signal.SIGKILL or usage is None:
        return False
    return usage.ru_utime + usage.ru_stime >= cpu_seconds(config) - 0.01


def cpu_seconds(config: dict) -> int:
    """The soft CPU limit of a program run (the hard one is a second more)."""
    return max(1, int(config["limits"]["case_s"] + 0.999))


def _reap(pid: int, flags: int) -> tuple[bool, int | None, object]:
    """``(done, wait status, rusage)`` of our child ``pid``, also when a sweep reaped it first."""
    if pid in _REAPED:
        return (True, *_REAPED.pop(pid))
    try:
        done, status, usage = os.wait4(pid, flags)
    except ChildProcessError:  # reaped by someone else: nothing is known of how it ended
        return True, None, None
    return (True, status, usage) if done else (False, None, None)


def reap_children() -> None:
    """Reap every child that has ended (orphans re-parented to us included), keeping their status."""
    while True:
        try:
            pid, status, usage = os.wait4(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        _REAPED[pid] = (status, usage)


def kill_all(pid: int, config: dict) -> None:
    """Kill the child's process group and every other process of the program (see the module's
    docstring for how they are found), reaping what ends."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        pass
    sweep = config.get("sweep")
    me = os.getpid()
    for _ in range(50):  # a fork bomb keeps forking while we sweep; each pass kills what exists
        if sweep in ("namespace", "uid"):
            try:
                os.kill(-1, signal.SIGKILL)  # ESRCH: no other process in our pid namespace
            except ProcessLookupError:
                reap_children()
                return
            reap_children()
            # kill(-1) succeeds while any other process is visible, so for a uid look it up
            alive = sweep == "namespace" or any(p != me for p in processes_of_uid(os.getuid()))
        elif sweep == "descendants":
            alive = kill_pids(descendants(me))
            reap_children()
        else:
            return
        if not alive:
            return
        time.sleep(0.001)


def kill_pids(pids: list) -> bool:
    """SIGKILL each of ``pids``; whether any was still there."""
    found = False
    for other in pids:
        try:
            os.kill(other, signal.SIGKILL)
            found = True
        except OSError:
            pass
    return found


def _stat(pid: str) -> tuple[int, str] | None:
    """``(parent pid, state)`` of a process from ``/proc/<pid>/stat``; None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            fields = handle.read().rsplit(b")", 1)[1].split()  # the name may hold spaces and ")"
        return int(fields[1]), fields[0].decode()
    except (OSError, IndexError, ValueError):
        return None


def descendants(root: int) -> list:
    """Live (non-zombie) descendants of ``root``, from ``/proc``."""
    children: dict = {}
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            info = _stat(pid)
            if info is not None and info[1] != "Z":
                children.setdefault(info[0], []).append(int(pid))
    found, stack = [], [root]
    while stack:
        for child in children.get(stack.pop(), ()):
            found.append(child)
            stack.append(child)
    return found


def processes_of_uid(uid: int) -> list:
    """Live processes any of whose user ids (real, effective, saved, file system) is ``uid``."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/status") as handle:
                fields = dict(line.split(":", 1) for line in handle if ":" in line)
        except (OSError, ValueError):
            continue
        uids = fields.get("Uid", "").split()
        if str(uid) in uids and not fields.get("State", "").strip().startswith("Z"):
            found.append(int(pid))
    return found


def sweep_uid(uid: int, seconds: float = 5.0) -> bool:
    """(as root) SIGKILL every process of ``uid`` until none is left; False if some outlived
    ``seconds`` (e.g. stuck in the kernel)."""
    deadline = time.monotonic() + seconds
    while True:
        pids = processes_of_uid(uid)
        if not pids:
            return True
        kill_pids(pids)
        reap_children()
        if time.monotonic() > deadline:
            return False
        time.sleep(0.002)


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
