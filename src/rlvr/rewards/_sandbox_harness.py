"""The test harness that runs *inside* the sandbox (stdlib only; never imports rlvr).

:mod:`rlvr.rewards.sandbox` starts it as ``python -I -S -c <this file's source>`` and writes one
JSON config to its stdin. The harness runs the untrusted program in forked children — one per
stdin/stdout case, or one for all the asserts of a function test — each under its own rlimits and
timeout, with its stdin/stdout/stderr on files in the sandbox's private /tmp. It reports outcomes
as one JSON document on ``report_fd``, a pipe that only the harness holds: the children close their
copy before any untrusted code runs, and the harness marks itself non-dumpable so that they cannot
reopen it through ``/proc``. The parent therefore only trusts a report that ends with
``"done": true`` — a program that exits early, exits 0 after catching an exception, or kills its
interpreter cannot produce one. The harness writes ``started`` first, so the parent can tell a
sandbox that never came up (an infrastructure error) from a program that killed its harness (a
failed run).

Why fork instead of exec'ing a fresh interpreter per case: a fork costs about a millisecond, an
interpreter start about 20; the untrusted code only ever runs after the fork.
"""

import ast
import json
import os
import resource
import select
import signal
import sys
import time

_MARK_PASS, _MARK_FAIL, _MARK_ABORT, _MARK_DONE = b".", b"F", b"E", b"D"
STARTED = b"started\n"


def main() -> None:
    config = json.loads(sys.stdin.read())
    report_fd = config["report_fd"]
    _no_dumps()
    os.write(report_fd, STARTED)  # from here on, a missing report is the program's doing
    os.chdir(config["workdir"])
    budget_end = time.monotonic() + config["budget_s"]
    if config["mode"] == "stdio":
        cases = []
        for index, case_input in enumerate(config["inputs"]):
            if time.monotonic() >= budget_end:
                cases.append({"status": "not_run"})
                continue
            cases.append(_run_stdio_case(config, index, case_input, budget_end))
        report = {"mode": "stdio", "cases": cases}
    else:
        report = {"mode": "function", **_run_function(config, budget_end)}
    report["done"] = True
    data = json.dumps(report).encode()
    while data:
        data = data[os.write(report_fd, data) :]
    os.close(report_fd)


def _no_dumps() -> None:
    """Make /proc/<harness>/{fd,mem} inaccessible to the children (same uid, no capabilities)."""
    try:
        import ctypes

        ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 4
    except Exception:  # noqa: BLE001 - without ctypes the report pipe is merely less protected
        pass


def _limit_child(config: dict, keep_fd: int = -1) -> None:
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
        if fd != keep_fd:
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


def _spawn(config: dict, stdin_path: str, tag: str, body, keep_fd: int = -1) -> int:
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
            opened = os.open(path, flags, 0o600)
            os.dup2(opened, fd)
            os.close(opened)
        signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
        _limit_child(config, keep_fd)
        # Fresh stream objects: the harness's stdin was read to its end before the fork.
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


def _wait(pid: int, seconds: float, config: dict) -> tuple[str, int | None, float]:
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
    _kill_all(pid, config)
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


def _kill_all(pid: int, config: dict) -> None:
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


def _read(path: str, limit: int) -> tuple[str, bool]:
    try:
        with open(path, "rb") as handle:
            data = handle.read(limit + 1)
    except OSError:
        return "", False
    return data[:limit].decode("utf-8", "replace"), len(data) > limit


def _run_stdio_case(config: dict, index: int, case_input: str, budget_end: float) -> dict:
    stdin_path = f"case{index}.in"
    with open(stdin_path, "w") as handle:
        handle.write(case_input)
    source = compile_or_none(config["code"])

    def body() -> None:
        if isinstance(source, str):
            raise SyntaxError(source)
        exec(source, {"__name__": "__main__", "__builtins__": __builtins__})

    seconds = min(config["limits"]["case_s"], max(0.0, budget_end - time.monotonic()))
    pid = _spawn(config, stdin_path, f"case{index}", body)
    status, code, elapsed = _wait(pid, seconds, config)
    limit = config["limits"]["output_bytes"]
    stdout, stdout_cut = _read(f"case{index}.out", limit)
    stderr, _ = _read(f"case{index}.err", 2000)
    return {
        "status": "output_limit" if stdout_cut else status,
        "exit_code": code,
        "stdout": stdout,
        "stderr": stderr,
        "seconds": round(elapsed, 4),
    }


def compile_or_none(code: str):
    """Compile in the harness (trusted), so a syntax error is reported, not executed."""
    try:
        return compile(code, "<solution>", "exec")
    except (SyntaxError, ValueError) as exc:
        return f"{type(exc).__name__}: {exc}"


def _run_function(config: dict, budget_end: float) -> dict:
    tests = config["tests"]  # [{"source": str, "counts": bool}], setup first
    source = compile_or_none(config["code"])
    total = sum(1 for t in tests if t["counts"])
    read_fd, write_fd = os.pipe()

    def body() -> None:
        if isinstance(source, str):
            raise SyntaxError(source)
        namespace = {"__name__": "__main__", "__builtins__": __builtins__}
        exec(source, namespace)
        if config.get("entry_point"):
            namespace[config["candidate_name"]] = namespace[config["entry_point"]]
        for test in tests:
            try:
                exec(compile(test["source"], "<test>", "exec"), namespace)
            except BaseException:  # noqa: BLE001 - a failing assert, or the program's own error
                os.write(write_fd, _MARK_FAIL if test["counts"] else _MARK_ABORT)
                if not test["counts"]:
                    return
                continue
            if test["counts"]:
                os.write(write_fd, _MARK_PASS)
        os.write(write_fd, _MARK_DONE)

    seconds = min(config["limits"]["case_s"], max(0.0, budget_end - time.monotonic()))
    open("empty.in", "w").close()
    pid = _spawn(config, "empty.in", "function", body, keep_fd=write_fd)
    os.close(write_fd)
    status, code, elapsed = _wait(pid, seconds, config)
    marks = b""
    while True:
        chunk = os.read(read_fd, 65536)
        if not chunk:
            break
        marks += chunk[: 2 * total + 2]
    os.close(read_fd)
    stderr, _ = _read("function.err", 2000)
    return {
        "status": status,
        "exit_code": code,
        "total": total,
        "passed": marks.count(_MARK_PASS),
        "reached_end": marks.endswith(_MARK_DONE),
        "stderr": stderr,
        "seconds": round(elapsed, 4),
    }


def split_tests(test_code: str, entry_point: str | None) -> tuple[list[dict], str]:
    """Statements to run one by one (``counts``: contains an assert) and the name of the candidate.

    With a ``def check(candidate)`` (HumanEval), its body is split and ``candidate`` is bound to
    the entry point; the rest of the file (imports, helpers, but not a ``check(...)`` call) runs
    first. Without one, the file's top-level statements are split the same way.
    """
    module = ast.parse(test_code)
    check = next((n for n in module.body if isinstance(n, ast.FunctionDef) and n.name == "check"), None)
    if check is None or not entry_point:
        return [_statement(node) for node in module.body], "candidate"
    setup = [
        {"source": ast.unparse(node), "counts": False}
        for node in module.body
        if node is not check and not _calls_check(node)
    ]
    name = check.args.args[0].arg if check.args.args else "candidate"
    return setup + [_statement(node) for node in check.body], name


def _statement(node: ast.stmt) -> dict:
    counts = any(isinstance(sub, ast.Assert) for sub in ast.walk(node))
    return {"source": ast.unparse(node), "counts": counts}


def _calls_check(node: ast.stmt) -> bool:
    return (
        isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Call)
        and isinstance(node.value.func, ast.Name)
        and node.value.func.id == "check"
    )


if __name__ == "__main__":
    main()
