"""The supervisor of one run on the ``rlimits`` backend (stdlib only; never imports rlvr).

Without namespaces nothing contains the program's processes, so :mod:`rlvr.rewards.sandbox` starts
this small trusted process first (``python -I -S -c <script> <json>``, the script being
:mod:`~rlvr.rewards._sandbox_process` joined to this file). It starts the harness, waits for it
(at most ``wall`` seconds), and before it exits kills **every** process of the run, however it
tried to escape (``setsid``, double ``fork``, a killed harness):

- as root, the harness and the program run under a uid of their own, chosen per run
  (``uid``), which an unprivileged process cannot change: the sweep kills every process that has
  it, until none is left;
- otherwise the supervisor is a child subreaper: orphaned processes of the run are re-parented to
  it, so they stay its descendants, and the sweep kills all of them. (The program then shares the
  trainer's uid and could kill the supervisor itself first: see the sandbox's docs.)

It also ends (sweeping first) on ``SIGTERM``, which the trainer sends when it gives up on a run or
cancels it, and which the kernel sends when the trainer's thread that started it dies
(``PR_SET_PDEATHSIG``). Last it removes the run's working directory. Its exit code is the
harness's.
"""

import json
import os
import select
import shutil
import signal
import sys
import time

from rlvr.rewards._sandbox_process import (  # sandbox: inlined
    _PR_SET_PDEATHSIG,
    _reap,
    become_subreaper,
    descendants,
    kill_pids,
    prctl,
    reap_children,
    sweep_uid,
)


class _Stop(Exception):
    """SIGTERM: the trainer gave up on the run (or died)."""


def _stop(signum: int, frame: object) -> None:
    raise _Stop


def supervise(args: dict) -> int:
    signal.signal(signal.SIGTERM, _stop)
    become_subreaper()
    prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    pid = None
    code = 125
    try:
        if os.getppid() != args["parent"]:  # the trainer died before the death signal was armed
            return code
        pid = os.fork()
        if pid == 0:
            _exec_harness(args)
        os.close(args["report_fd"])  # only the harness holds the report pipe
        code = _wait(pid, time.monotonic() + args["wall"])
    except _Stop:
        pass
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        if pid:
            kill_pids([pid])
        if args["uid"] is not None:
            sweep_uid(args["uid"])
        else:
            for _ in range(50):  # each pass kills what exists; a fork bomb may still be forking
                if not kill_pids(descendants(os.getpid())):
                    break
                reap_children()
        reap_children()
        if args.get("workdir"):  # the trainer removes it too, unless it died
            shutil.rmtree(args["workdir"], ignore_errors=True)
    return code


def _exec_harness(args: dict) -> None:
    """In the forked child: become the run's uid (as root) and run the harness."""
    try:
        uid = args["uid"]
        if uid is not None:
            os.setgroups([])
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        command = args["command"]
        os.execv(command[0], command)
    finally:
        os._exit(127)


def _wait(pid: int, deadline: float) -> int:
    """The harness's exit code (128 + signal when killed; 124 when it ran past the deadline),
    reaping orphans meanwhile."""
    try:
        pidfd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        pidfd = None
    while True:
        done, status, _ = _reap(pid, os.WNOHANG)
        if done:
            if status is None:
                return 125
            return os.WEXITSTATUS(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status)
        reap_children()
        left = deadline - time.monotonic()
        if left <= 0:
            return 124
        if pidfd is not None:
            select.select([pidfd], [], [], min(left, 0.1))
        else:
            time.sleep(min(left, 0.01))


if __name__ == "__main__":
    sys.exit(supervise(json.loads(sys.argv[1])))
