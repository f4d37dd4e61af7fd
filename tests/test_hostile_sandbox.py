"""Hostile programs against the code sandbox's process boundary, on every backend available here.

A program that leaves a daemon behind (``setsid``, a double ``fork``) must not outlive its run: on
the weak backends (no bubblewrap, ``allow_unsafe``) such a daemon could otherwise rewrite files or
kill and answer later runs. Nothing of one case may reach the next case of the same run; runs on a
weak backend as root get a uid of their own; a run can be cancelled from another thread and then
leaves nothing running either.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import pytest

from rlvr.rewards import sandbox

LIMITS = sandbox.Limits(case_s=1.0, total_s=3.0, memory_mb=256)
ROOT = os.geteuid() == 0


def _available(name: str) -> str | None:
    """Why backend ``name`` cannot run here, or None."""
    real = sandbox._backend()
    if name == "bwrap" and real.name != "bwrap":
        return "bubblewrap is not installed (apt-get install -y bubblewrap)"
    if name == "unshare" and not sandbox._works(
        sandbox._Backend("unshare", real.python, real.python_prefix, real.drop_to_nobody)
    ):
        return "unshare namespaces are not permitted here"
    return None


def _use(name: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """Force backend ``name``; ``"rlimits-shared"`` is ``rlimits`` as without root: no uid of the
    run's own, so the supervisor finds the run's processes as its descendants."""
    shared = name == "rlimits-shared"
    name = "rlimits" if shared else name
    reason = _available(name)
    if reason is not None:
        pytest.skip(reason)
    real = sandbox._backend()
    backend = sandbox._Backend(name, real.python, real.python_prefix, real.drop_to_nobody and not shared)
    monkeypatch.setattr(sandbox, "_backend", lambda: backend)
    return name


WEAK = ["unshare", "rlimits", "rlimits-shared"]


@pytest.fixture(params=WEAK)
def weak(request, monkeypatch) -> str:
    """A weak backend (as on a machine without bubblewrap), forced through the backend probe."""
    return _use(request.param, monkeypatch)


@pytest.fixture(params=["bwrap", *WEAK])
def backend(request, monkeypatch) -> str:
    return _use(request.param, monkeypatch)


def processes_with(token: str, settle_s: float = 2.0) -> list[int]:
    """Live processes whose command line holds ``token``, after waiting up to ``settle_s`` for them
    to go (a killed pid namespace is torn down by the kernel asynchronously)."""
    deadline = time.monotonic() + settle_s
    while True:
        found = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                if token.encode() not in Path(f"/proc/{pid}/cmdline").read_bytes():
                    continue
                state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            except (OSError, IndexError):
                continue
            if state != "Z":
                found.append(int(pid))
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.05)


def daemon_program(body: str, token: str, *args: str, when: str = "True") -> str:
    """A program that (if ``when``) double-forks, detaches (``setsid``) and leaves a python running
    ``body`` with ``args`` from ``sys.argv[2]`` on and ``token`` on its command line (so that the
    test can find it); it prints ``up`` once the daemon runs, so a test cannot pass vacuously."""
    ready = "import os, sys\nos.write(int(sys.argv[1]), b'1')\nos.close(int(sys.argv[1]))\n"
    argv = ", ".join(repr(a) for a in (*args, token))
    return (
        "import os, sys\n"
        f"if {when}:\n"
        "    r, w = os.pipe()\n"
        "    if os.fork() == 0:\n"
        "        os.setsid()\n"
        "        if os.fork() == 0:\n"
        "            os.set_inheritable(w, True)\n"
        f"            os.execv(sys.executable, [sys.executable, '-c', {ready + body!r}, str(w), {argv}])\n"
        "        os._exit(0)\n"
        "    os.close(w)\n"
        "    print('up' if os.read(r, 1) == b'1' else 'down')\n"
    )


def sleeper(token: str, seconds: float = 60) -> str:
    """A program that becomes a python sleeping ``seconds``, ``token`` on its command line."""
    body = f"import time; time.sleep({seconds})"
    return f"import os, sys\nos.execv(sys.executable, [sys.executable, '-c', {body!r}, {token!r}])"


def test_a_daemon_left_by_a_run_is_killed_when_the_run_ends(weak):
    token = f"rlvr-daemon-{uuid.uuid4().hex}"
    marker = Path("/tmp") / token  # the weak backends share the host's /tmp
    body = "import time\ntime.sleep(1.5)\nopen(sys.argv[2], 'w').write('x')\ntime.sleep(60)"
    try:
        start = time.monotonic()
        result = sandbox.run_stdio(daemon_program(body, token, str(marker)), [""], LIMITS, allow_unsafe=True)
        assert result.error is None and result.report["cases"][0]["stdout"] == "up\n"
        assert time.monotonic() - start < 3.0
        assert processes_with(token) == []
        time.sleep(2.0)  # past the moment the daemon would have written
        assert not marker.exists()
    finally:
        for pid in processes_with(token, settle_s=0):
            os.kill(pid, 9)
        marker.unlink(missing_ok=True)


def test_a_daemon_of_one_case_is_gone_before_the_next_case(backend):
    token = f"rlvr-case-daemon-{uuid.uuid4().hex}"
    # case "a" leaves a daemon that keeps writing a file in the working directory; case "b" looks
    body = "import time\nwhile True:\n    open('leak', 'w').write('x')\n    time.sleep(0.05)"
    code = "x = input()\n" + daemon_program(body, token, when="x == 'a'")
    code += (
        "if x == 'b':\n    import time\n    if os.path.exists('leak'):\n        os.remove('leak')\n"
        "    time.sleep(0.5)\n    print(os.path.exists('leak'))\n"
    )
    try:
        result = sandbox.run_stdio(code, ["a", "b"], LIMITS, allow_unsafe=True)
        assert result.error is None
        first, second = result.report["cases"]
        assert first["stdout"] == "up\n", result.report
        assert second["stdout"] == "False\n", result.report  # the daemon was killed when "a" ended
        assert processes_with(token) == []
    finally:
        for pid in processes_with(token, settle_s=0):
            os.kill(pid, 9)


def test_a_cancelled_run_stops_at_once_and_leaves_nothing(backend):
    token = f"rlvr-cancelled-{uuid.uuid4().hex}"
    code = sleeper(token)
    cancel = threading.Event()
    threading.Timer(0.5, cancel.set).start()
    start = time.monotonic()
    try:
        result = sandbox.run_stdio(
            code, [""], sandbox.Limits(case_s=30, total_s=30), allow_unsafe=True, cancel=cancel
        )
        assert result.cancelled and result.error == "cancelled" and not result.report
        assert time.monotonic() - start < 2.5
        assert processes_with(token) == []
    finally:
        for pid in processes_with(token, settle_s=0):
            os.kill(pid, 9)


@pytest.mark.skipif(not ROOT, reason="per-run uids need root (without it the program runs as the trainer)")
@pytest.mark.parametrize("name", ["unshare", "rlimits"])
def test_runs_on_a_weak_backend_have_a_uid_of_their_own(name, monkeypatch):
    weak = _use(name, monkeypatch)
    code = "import os\nprint(os.getuid(), os.getgid(), os.getgroups(), oct(os.stat('.').st_mode & 0o777))"
    seen = set()
    for _ in range(2):
        result = sandbox.run_stdio(code, [""], LIMITS, allow_unsafe=True)
        uid, gid, groups, mode = result.report["cases"][0]["stdout"].split(" ", 3)
        if weak == "rlimits":  # under unshare the uid shows as the namespace's overflow id
            assert uid == gid and int(uid) not in (0, 65534) and groups == "[]"
            seen.add(uid)
        assert mode.strip() == "0o700"  # the working directory: no other run can look in
    assert weak != "rlimits" or len(seen) == 2


KILLED_TRAINER = """
import sys
from rlvr.rewards import sandbox
name, shared, program = sys.argv[1], sys.argv[2] == "1", sys.stdin.read()  # not in our argv
real = sandbox._backend()
backend = sandbox._Backend(name, real.python, real.python_prefix, real.drop_to_nobody and not shared)
sandbox._backend = lambda: backend
sandbox.run_stdio(program, [""], sandbox.Limits(case_s=30, total_s=30), allow_unsafe=True)
"""


@pytest.mark.parametrize("name", ["bwrap", *WEAK])
def test_a_killed_trainer_takes_its_sandbox_with_it(name, monkeypatch):
    """A reward worker killed on its timeout (or a trainer killed outright) leaves no program
    running: bubblewrap dies with its parent, so do unshare (a parent-death signal) and the rlimits
    supervisor (which sweeps the run first)."""
    _use(name, monkeypatch)  # skips when the backend is not available here
    token = f"rlvr-orphaned-{uuid.uuid4().hex}"
    shared = "1" if name == "rlimits-shared" else "0"
    backend = "rlimits" if name == "rlimits-shared" else name
    # the run's working directory goes here (a trainer killed mid-run cannot remove it)
    tmp = Path(tempfile.mkdtemp(prefix="rlvr-test-killed-"))
    tmp.chmod(0o711)  # the run's uid must reach its directory inside
    env = {**os.environ, "TMPDIR": str(tmp)}
    command = [sys.executable, "-c", KILLED_TRAINER, backend, shared]
    trainer = subprocess.Popen(command, stdin=subprocess.PIPE, env=env)
    assert trainer.stdin is not None
    trainer.stdin.write(sleeper(token).encode())
    trainer.stdin.close()
    try:
        deadline = time.monotonic() + 60
        while not processes_with(token, settle_s=0):
            assert trainer.poll() is None and time.monotonic() < deadline, "the program never started"
            time.sleep(0.05)
        trainer.kill()
        trainer.wait()
        assert processes_with(token, settle_s=3.0) == []
        if backend == "rlimits":  # and its supervisor removed the run's working directory
            deadline = time.monotonic() + 3.0
            while any(tmp.iterdir()) and time.monotonic() < deadline:
                time.sleep(0.05)
            assert not any(tmp.iterdir())
    finally:
        trainer.kill()
        for pid in processes_with(token, settle_s=0):
            os.kill(pid, 9)
        shutil.rmtree(tmp)
