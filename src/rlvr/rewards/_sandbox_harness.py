"""The test harness that runs *inside* the sandbox (stdlib only; never imports rlvr).

:mod:`rlvr.rewards.sandbox` starts it as ``python -I -S -c <script>``, the script being this file
joined to the modules it uses (:mod:`~rlvr.rewards._sandbox_codec`,
:mod:`~rlvr.rewards._sandbox_process`, :mod:`~rlvr.rewards._sandbox_functions`), and writes the
run's config to its stdin as plain-data messages. The harness never executes the untrusted
program itself: it runs it in forked children, each under its own rlimits and timeout —

- **stdio**: one child per stdin/stdout case, its streams on files in the sandbox's private /tmp;
  the outputs are compared by the trainer's worker, outside the sandbox;
- **function**: one child that loads the program and answers calls, while the tests and their
  asserts run here, in the harness (see :mod:`~rlvr.rewards._sandbox_functions`).

It reports outcomes as one JSON document on ``report_fd``, a pipe that only the harness holds: the
children close their copy before any untrusted code runs, and the harness is non-dumpable, so they
cannot reopen it through ``/proc``. After each program run it kills every process the program left
(:func:`~rlvr.rewards._sandbox_process.kill_all`), so that nothing of one case reaches the next.
The parent only trusts a report that ends with ``"done": true``:
a program that kills or freezes the harness cannot produce one. The harness writes ``started``
first, so the parent can tell a sandbox that never came up (an infrastructure error) from a program
that killed its harness (a failed run).
"""

import json
import os
import time

from rlvr.rewards._sandbox_codec import decode, receive  # sandbox: inlined
from rlvr.rewards._sandbox_functions import run_function  # sandbox: inlined
from rlvr.rewards._sandbox_process import (  # sandbox: inlined
    become_subreaper,
    no_dumps,
    read_capped,
    spawn,
    wait,
)

STARTED = b"started\n"


def main() -> None:
    # Only the first message is read now; in function mode the tests follow, and are read after
    # the candidate's process has been forked, so that they are never in its memory.
    config = decode(receive(0))
    report_fd = config["report_fd"]
    no_dumps()
    become_subreaper()  # the program's orphans (double forks) are re-parented here, to be swept
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
        report = {"mode": "function", **run_function(config, budget_end)}
    report["done"] = True
    data = json.dumps(report).encode()
    while data:
        data = data[os.write(report_fd, data) :]
    os.close(report_fd)


def _run_stdio_case(config: dict, index: int, case_input: str, budget_end: float) -> dict:
    stdin_path = f"case{index}.in"
    # O_NOFOLLOW: an earlier case's program may have left a symlink under this name.
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW
    with os.fdopen(os.open(stdin_path, flags, 0o600), "w") as handle:
        handle.write(case_input)
    source = compile_or_none(config["code"])

    def body() -> None:
        if isinstance(source, str):
            raise SyntaxError(source)
        exec(source, {"__name__": "__main__", "__builtins__": __builtins__})

    seconds = min(config["limits"]["case_s"], max(0.0, budget_end - time.monotonic()))
    pid = spawn(config, stdin_path, f"case{index}", body)
    status, code, elapsed = wait(pid, seconds, config)
    limit = config["limits"]["output_bytes"]
    stdout, stdout_cut = read_capped(f"case{index}.out", limit)
    stderr, _ = read_capped(f"case{index}.err", 2000)
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


if __name__ == "__main__":
    main()
