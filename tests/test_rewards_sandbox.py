"""The code sandbox: a correct program passes, and every escape attempt is contained and unrewarded.

Each test runs real untrusted code through :mod:`rlvr.rewards.sandbox` (bubblewrap when installed,
the unshare/rlimits fallback otherwise) and checks both the verdict and that the host is untouched.
"""

from __future__ import annotations

import ctypes
import os
import socket
import time
from pathlib import Path

import pytest

from rlvr.data.example import Example
from rlvr.rewards import sandbox
from rlvr.rewards.code import code_reward

FAST = sandbox.Limits(case_s=0.5, total_s=2.0, memory_mb=256)
BWRAP = sandbox.backend_name() == "bwrap"
needs_bwrap = pytest.mark.skipif(
    not BWRAP, reason="the code sandbox refuses to run without bubblewrap (apt-get install -y bubblewrap)"
)


def stdio_example(cases: list[tuple[str, str]]) -> Example:
    return Example(
        id="io",
        prompt=[{"role": "user", "content": "q"}],
        metadata={"test_cases": [{"input": i, "output": o} for i, o in cases]},
    )


def reward(code: str, cases: list[tuple[str, str]], **params) -> float:
    params = {"case_timeout_s": 0.5, "total_timeout_s": 2.0, "memory_mb": 256, **params}
    return code_reward(f"```python\n{code}\n```", stdio_example(cases), **params)


def unsafe_reward(code: str, cases: list[tuple[str, str]], **params) -> float:
    return reward(code, cases, allow_unsafe_sandbox=True, **params)


@pytest.fixture
def subreaper():
    """Orphans of this process's children are re-parented to it (not to init) during the test, so
    that a sandbox that outlives its parent is still found among this process's descendants."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(36, 1, 0, 0, 0) != 0:  # PR_SET_CHILD_SUBREAPER
        pytest.skip(f"prctl(PR_SET_CHILD_SUBREAPER) failed: errno {ctypes.get_errno()}")
    yield
    libc.prctl(36, 0, 0, 0, 0)


def _descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])  # the name in parentheses may hold spaces
        children.setdefault(ppid, []).append(int(pid))
    found, stack = [], [root]
    while stack:
        for child in children.get(stack.pop(), []):
            found.append(child)
            stack.append(child)
    return found


def harness_processes(settle_s: float = 3.0) -> list[int]:
    """This test's own harness processes still running: there must be none shortly after a run (a
    killed sandbox's namespace is torn down by the kernel asynchronously, hence the short wait).
    Only descendants of this process count, so sandboxes of other programs on the host (another
    test run, a training run) never fail the test."""
    marker = b"The test harness that runs *inside* the sandbox"
    deadline = time.monotonic() + settle_s
    while True:
        found = []
        for pid in _descendants(os.getpid()):
            try:
                if marker in Path(f"/proc/{pid}/cmdline").read_bytes():
                    found.append(pid)
            except OSError:
                pass
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.05)


@needs_bwrap
def test_a_correct_program_passes_every_case():
    code = "import sys\nn = int(sys.stdin.readline())\nprint(sum(range(n + 1)))"
    assert reward(code, [("3\n", "6\n"), ("10\n", "55"), ("0\n", "0\n")]) == 1.0


@needs_bwrap
def test_a_wrong_answer_on_one_case_fails_or_earns_partial_credit():
    code = "n = int(input())\nprint(n * 2 if n != 3 else 0)"
    cases = [("1", "2"), ("2", "4"), ("3", "6"), ("4", "8")]
    assert reward(code, cases) == 0.0
    assert reward(code, cases, partial_credit=True) == 0.75


@needs_bwrap
@pytest.mark.parametrize(
    "code",
    [
        "raise ValueError('boom')",
        "import sys\nprint(6)\nsys.exit(3)",
        "print('\\x00\\xff garbage ' * 100)",
        "this is not python",
        "import os\nprint(6, flush=True)\nos.kill(os.getpid(), 9)",
        "print('6' * 200000)",  # more output than the cap
    ],
    ids=["raises", "exits-nonzero", "garbage", "syntax-error", "kills-itself", "huge-output"],
)
def test_failing_programs_get_nothing(code):
    assert reward(code, [("", "6")]) == 0.0


@needs_bwrap
def test_a_program_that_kills_its_harness_gets_nothing():
    assert reward("import os\nos.kill(os.getppid(), 9)", [("", "")]) == 0.0


@needs_bwrap
def test_sleeping_and_spinning_programs_time_out_promptly():
    start = time.monotonic()
    assert reward("import time\ntime.sleep(100)", [("", "")]) == 0.0
    assert reward("while True:\n    pass", [("", "")]) == 0.0
    assert time.monotonic() - start < 6.0


@needs_bwrap
def test_a_fork_bomb_is_contained_and_cleaned_up(subreaper):
    code = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass"
    start = time.monotonic()
    result = sandbox.run_stdio(code, [""], FAST)
    assert time.monotonic() - start < 5.0
    assert result.error is None and result.report["cases"][0]["status"] != "ok"
    assert harness_processes() == []
    assert reward("print(1)", [("", "1")]) == 1.0  # and the next run works


@needs_bwrap
def test_filling_memory_fails_inside_the_sandbox():
    code = "data = bytearray(1 << 30)"  # 1 GiB, over the 256 MiB address-space limit
    result = sandbox.run_stdio(code, [""], FAST)
    case = result.report["cases"][0]
    assert case["status"] != "ok" and "MemoryError" in case["stderr"]


@needs_bwrap
def test_filling_the_disk_fails_and_leaves_the_host_untouched(tmp_path):
    name = f"rlvr-sandbox-fill-{os.getpid()}"
    code = (
        f"i = 0\nwhile True:\n    with open('/tmp/{name}-%d' % i, 'wb') as f:\n"
        "        f.write(b'0' * (8 << 20))\n    i += 1"
    )
    result = sandbox.run_stdio(code, [""], FAST)
    assert result.report["cases"][0]["status"] != "ok"
    assert not list(Path("/tmp").glob(f"{name}-*"))


@needs_bwrap
def test_the_trainers_files_and_home_are_invisible():
    here = Path(__file__).resolve()
    code = f"print(open({str(here)!r}).read()[:20])"
    assert reward(code, [("", here.read_text()[:20])]) == 0.0
    listing = sandbox.run_stdio("import os\nprint(sorted(os.listdir('/')))", [""], FAST)
    seen = listing.report["cases"][0]["stdout"]
    for private in ("'work'", "'root'", "'home'", "'etc'"):
        assert private not in seen


@needs_bwrap
def test_the_root_file_system_is_read_only():
    result = sandbox.run_stdio("open('/usr/pwned', 'w').write('x')", [""], FAST)
    assert "Read-only file system" in result.report["cases"][0]["stderr"]
    assert not Path("/usr/pwned").exists()


@needs_bwrap
def test_the_environment_is_empty(monkeypatch):
    monkeypatch.setenv("RLVR_TEST_SECRET", "s3cret-token")
    code = "import os\nprint(os.environ.get('RLVR_TEST_SECRET'))\nprint(sorted(os.environ))"
    result = sandbox.run_stdio(code, [""], FAST)
    out = result.report["cases"][0]["stdout"]
    assert "s3cret" not in out and out.startswith("None")
    assert reward("import os\nprint(os.environ['RLVR_TEST_SECRET'])", [("", "s3cret-token")]) == 0.0


@needs_bwrap
def test_there_is_no_network():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        code = (
            "import socket\ns = socket.socket()\ns.settimeout(0.5)\n"
            f"s.connect(('127.0.0.1', {port}))\nprint('connected')"
        )
        assert reward(code, [("", "connected")]) == 0.0


@needs_bwrap
def test_function_tests_count_only_a_harness_that_reached_its_end():
    tests = "def check(candidate):\n    assert candidate(1) == 2\n    assert candidate(5) == 6\n"
    ok = sandbox.run_function_tests("def inc(x):\n    return x + 1\n", tests, "inc", FAST)
    assert ok.report["passed"] == 2 and ok.report["reached_end"]
    # The classic hole: a wrapper that exits 0 once something goes wrong.
    for cheat in (
        "import os\ndef inc(x):\n    os._exit(0)\n",
        "import sys\ndef inc(x):\n    sys.exit(0)\n",
        "import os, atexit\natexit.register(lambda: os._exit(0))\ndef inc(x):\n    raise ValueError\n",
    ):
        result = sandbox.run_function_tests(cheat, tests, "inc", FAST)
        assert result.report["passed"] == 0, cheat


def test_the_sandbox_backend_is_known():
    assert sandbox.backend_name() in ("bwrap", "unshare", "rlimits")


@pytest.fixture(params=["unshare", "rlimits"])
def fallback(request, monkeypatch):
    """Run with a weaker backend, as on a machine without bubblewrap."""
    real = sandbox._backend()
    backend = sandbox._Backend(request.param, real.python, real.python_prefix, real.drop_to_nobody)
    if request.param == "unshare" and not sandbox._works(backend):
        pytest.skip("unshare namespaces are not permitted here")
    monkeypatch.setattr(sandbox, "_backend", lambda: backend)
    return request.param


def test_fallback_backends_still_judge_and_contain(fallback, monkeypatch, subreaper):
    monkeypatch.setenv("RLVR_TEST_SECRET", "s3cret-token")
    assert unsafe_reward("print(int(input()) + 1)", [("1", "2"), ("41", "42")]) == 1.0
    assert unsafe_reward("raise SystemExit(0)", [("", "x")]) == 0.0
    assert (
        unsafe_reward("import os\nprint(os.environ.get('RLVR_TEST_SECRET'))", [("", "s3cret-token")]) == 0.0
    )
    start = time.monotonic()
    assert unsafe_reward("import time\ntime.sleep(100)", [("", "")]) == 0.0
    assert time.monotonic() - start < 4.0
    tests = "def check(candidate):\n    assert candidate(1) == 2\n"
    cheat = sandbox.run_function_tests(
        "import os\ndef inc(x):\n    os._exit(0)\n", tests, "inc", FAST, allow_unsafe=True
    )
    assert cheat.report["passed"] == 0 and cheat.report["status"] != "ok"
    liar = "class Yes:\n    def __eq__(self, other):\n        return True\ndef inc(x):\n    return Yes()\n"
    lied = sandbox.run_function_tests(liar, tests, "inc", FAST, allow_unsafe=True)
    assert lied.report["passed"] == 0 and lied.report["total"] == 1
    bomb = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass"
    assert unsafe_reward(bomb, [("", "")]) == 0.0
    assert harness_processes() == []


def test_missing_bubblewrap_warns_once(monkeypatch, caplog):
    monkeypatch.delenv(sandbox.BACKEND_ENV, raising=False)
    monkeypatch.setattr(sandbox.shutil, "which", lambda name: None)
    sandbox._backend.cache_clear()
    try:
        with caplog.at_level("WARNING", logger="rlvr.rewards.sandbox"):
            first = sandbox._backend()
            second = sandbox._backend()
    finally:
        sandbox._backend.cache_clear()
        monkeypatch.undo()
    assert first.name == second.name == "rlimits"
    warnings = [r for r in caplog.records if "bubblewrap" in r.getMessage()]
    assert len(warnings) == 1 and "apt-get install -y bubblewrap" in warnings[0].getMessage()


@needs_bwrap
def test_a_program_that_freezes_its_harness_gets_nothing(subreaper):
    start = time.monotonic()
    assert (
        reward("import os, signal\nos.kill(os.getppid(), signal.SIGSTOP)", [("", "")], total_timeout_s=0.5)
        == 0.0
    )
    assert time.monotonic() - start < 6.0
    assert harness_processes() == []


def test_accepting_a_weak_sandbox_warns_on_every_run(fallback, caplog):
    """Each training run builds its reward spec (and each reward worker checks it again): every
    time the weak sandbox is accepted the warning says what it exposes, not once per process."""
    from rlvr.rewards.spec import RewardSpec

    with caplog.at_level("WARNING", logger="rlvr.rewards.sandbox"):
        for _ in range(2):  # two runs in one process
            RewardSpec(name="code", params={"allow_unsafe_sandbox": True})
    warnings = [r.getMessage() for r in caplog.records if "allow_unsafe_sandbox" in r.getMessage()]
    assert len(warnings) == 2
    text = warnings[0]
    for exposed in ("READ", "WRITE to the host's /tmp", "symlinks", "/proc", "killed when the run ends"):
        assert exposed in text
    if fallback == "rlimits":
        assert "NETWORK" in text and "loopback" in text
    else:
        assert "no network" in text
