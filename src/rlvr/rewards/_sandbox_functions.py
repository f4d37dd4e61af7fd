"""Function tests whose verdict the candidate's code cannot reach (stdlib only; runs in the sandbox).

Two processes, both inside the sandbox:

- the **candidate** process, forked from the harness *before* the harness has read the tests,
  runs the model's code and then serves calls: it reads ``[id, name, args, kwargs]`` on one pipe,
  calls the function of that name and writes the result (or the exception's type name and
  message) back on another;
- the **harness** process, which never executes a line of the candidate's code, reads the tests
  and runs them. There ``candidate`` (and every name the tests expect the program to define) is a
  :class:`RemoteFunction` that calls across those pipes, and values cross only as plain data
  (:mod:`rlvr.rewards._sandbox_codec`). So the asserts and their comparisons run with the
  harness's own built-ins, on ``int``/``str``/``list``/… values the harness built itself: an
  object whose ``__eq__`` always holds, a ``float`` subclass or ``mock.ANY`` cannot even be
  returned, and patched built-ins, rewritten frames or module globals only change the candidate's
  own process. A call that returns something else, raises, times out or finds the candidate dead
  fails the test statement it is in.
"""

import ast
import builtins
import os
import time

from rlvr.rewards._sandbox_codec import WireError, decode, encode, receive, send  # sandbox: inlined
from rlvr.rewards._sandbox_process import kill_all, read_capped, spawn, wait  # sandbox: inlined

_MESSAGE_CHARS = 500  # of an exception message sent back by the candidate


class CandidateFailure(BaseException):
    """A call that did not return plain data: a dead or hung candidate, a value that is not plain
    data, a broken reply. A ``BaseException``, so ``except Exception`` in a test does not take it for
    the candidate deliberately raising."""


class RemoteError(Exception):
    """The candidate raised an exception that is not one of Python's built-in exception types."""


def run_function(config: dict, budget_end: float) -> dict:
    """Fork the candidate, then read the tests (so the candidate's process never holds them) and
    run them here. ``config`` has ``code`` and the limits; the tests arrive as a second message."""
    request_r, request_w = os.pipe()
    reply_r, reply_w = os.pipe()
    code = config["code"]
    open("empty.in", "w").close()
    pid = spawn(
        config, "empty.in", "function", lambda: _serve(code, request_r, reply_w), (request_r, reply_w)
    )
    os.close(request_r)
    os.close(reply_w)
    start = time.monotonic()
    deadline = min(start + config["limits"]["case_s"], budget_end)
    channel = _Channel(request_w, reply_r, deadline)
    try:
        tests = decode(receive(0))
        outcome = _run_tests(tests, channel, config.get("entry_point"))
    finally:
        channel.close()
    if channel.timed_out:
        kill_all(pid, config)
        status, exit_code, _ = wait(pid, 0, config)
        status = "timeout"
    else:
        status, exit_code, _ = wait(pid, max(0.05, deadline - time.monotonic()), config)
        if status == "ok" and channel.broken is not None:
            status = "broken"  # it stopped answering (exited, closed or garbled its pipe) mid-tests
    stderr, _ = read_capped("function.err", 2000)
    return {
        **outcome,
        "status": status,
        "exit_code": exit_code,
        "stderr": stderr,
        "seconds": round(time.monotonic() - start, 4),
    }


def _run_tests(tests: dict, channel: "_Channel", entry_point: str | None) -> dict:
    """Run the test statements one by one in a namespace of the harness's own."""
    namespace = {"__name__": "__rlvr_tests__", "__builtins__": builtins}
    prelude = tests.get("prelude") or ""
    if prelude:
        try:  # the task's own helpers (HumanEval's prompt), for tests that call them
            exec(compile(prelude, "<prelude>", "exec"), namespace)
        except Exception:  # noqa: BLE001 - a prompt that is not runnable code: tests run without it
            pass
    for name, remote_name in tests["candidate_names"].items():
        if name not in namespace or name == entry_point:
            namespace[name] = RemoteFunction(channel, remote_name, name)
    statements = tests["statements"]
    total = sum(1 for s in statements if s["counts"])
    passed = 0
    reached_end = True
    for statement in statements:
        if time.monotonic() >= channel.deadline:
            reached_end = False
            break
        try:
            exec(compile(statement["source"], "<test>", "exec"), namespace)
        except BaseException:  # noqa: BLE001 - a failed assert, or a call that failed
            if not statement["counts"]:
                reached_end = False  # the tests' own set-up failed: what follows is meaningless
                break
            continue
        passed += bool(statement["counts"])
    return {"total": total, "passed": passed, "reached_end": reached_end}


class _Channel:
    """The harness's end of the call pipes, with one deadline for the whole test run."""

    def __init__(self, request_fd: int, reply_fd: int, deadline: float) -> None:
        self.request_fd, self.reply_fd, self.deadline = request_fd, reply_fd, deadline
        self.next_id = 0
        self.broken: str | None = None
        self.timed_out = False
        self.ready = False

    def call(self, name: str, args: tuple, kwargs: dict) -> object:
        if not self.ready:
            self.ready = True
            self._expect(["ready"])
        if self.broken is not None:
            raise CandidateFailure(self.broken)
        try:
            request = encode([self.next_id, name, list(args), kwargs])
        except WireError as exc:
            raise CandidateFailure(f"the test passed a value that cannot cross: {exc}") from None
        self.next_id += 1
        try:
            send(self.request_fd, request)
        except OSError:
            self._break("the candidate stopped reading")
        reply = self._receive()
        if type(reply) is not list or len(reply) != 3 or reply[0] != self.next_id - 1:
            self._break("a reply that does not answer the call")
        _, kind, payload = reply
        if kind == "ok":
            return payload
        if kind == "raise" and type(payload) is list and len(payload) == 2:
            raise _exception(*payload)
        if kind == "unplain" and type(payload) is str:
            raise CandidateFailure(f"returned a value that is not plain data ({payload[:200]})")
        self._break("a reply of an unknown kind")

    def _expect(self, expected: list) -> None:
        reply = self._receive()
        if reply != expected:
            detail = reply[1] if type(reply) is list and len(reply) == 2 else "no greeting"
            self._break(f"the program did not load: {str(detail)[:300]}")

    def _receive(self) -> object:
        try:
            return decode(receive(self.reply_fd, self.deadline))
        except (WireError, OSError) as exc:
            self.timed_out = str(exc) == "timeout"
            self._break(f"no reply from the candidate ({exc})")

    def _break(self, reason: str) -> None:
        self.broken = reason
        raise CandidateFailure(reason)

    def close(self) -> None:
        for fd in (self.request_fd, self.reply_fd):
            try:
                os.close(fd)
            except OSError:
                pass


class RemoteFunction:
    """Stands for a function of the candidate's program in the tests' namespace."""

    def __init__(self, channel: _Channel, remote_name: str, local_name: str) -> None:
        self._channel, self._remote_name, self.__name__ = channel, remote_name, local_name

    def __call__(self, *args: object, **kwargs: object) -> object:
        return self._channel.call(self._remote_name, args, kwargs)

    def __repr__(self) -> str:
        return f"<candidate function {self._remote_name}>"


def _exception(type_name: object, message: object) -> BaseException:
    """The harness's own exception for what the candidate raised: the built-in type of that name
    when there is one (so ``except ValueError`` in a test works), else :class:`RemoteError`."""
    text = f"{message}"[:_MESSAGE_CHARS] if type(message) is str else ""
    kind = getattr(builtins, type_name, None) if type(type_name) is str else None
    if isinstance(kind, type) and issubclass(kind, Exception):
        try:
            return kind(text)
        except Exception:  # noqa: BLE001 - a built-in type with a different constructor
            pass
    return RemoteError(f"{str(type_name)[:60]}: {text}")


def _serve(code: str, request_fd: int, reply_fd: int) -> None:
    """The candidate process: run the program, then answer calls until the harness hangs up."""
    namespace = {"__name__": "__main__", "__builtins__": builtins}
    try:
        exec(compile(code, "<solution>", "exec"), namespace)
    except SystemExit as exc:  # exit() / quit() / sys.exit(0) at the end of a correct program
        if exc.code not in (None, 0):
            send(reply_fd, encode(["failed", f"exit({str(exc.code)[:60]})"]))
            raise
    except BaseException as exc:
        send(reply_fd, encode(["failed", _describe(exc)]))
        raise
    send(reply_fd, encode(["ready"]))
    while True:
        try:
            request = decode(receive(request_fd))
        except (WireError, OSError):
            return  # the harness hung up: the tests are over
        call_id, name, args, kwargs = request
        try:
            value = namespace[name](*args, **kwargs)
        except BaseException as exc:  # noqa: BLE001 - the candidate's own error, reported
            message = encode([call_id, "raise", _describe_pair(exc)])
        else:
            try:
                message = encode([call_id, "ok", value])
            except WireError as exc:
                message = encode([call_id, "unplain", str(exc)])
        send(reply_fd, message)


def _describe_pair(exc: BaseException) -> list:
    try:
        text = str(exc)[:_MESSAGE_CHARS]
    except BaseException:  # noqa: BLE001 - an exception whose __str__ fails
        text = ""
    return [type(exc).__name__ if type(type(exc).__name__) is str else "?", f"{text}"]


def _describe(exc: BaseException) -> str:
    name, text = _describe_pair(exc)
    return f"{name}: {text}"[:300]


def split_tests(test_code: str, entry_point: str | None, prelude: str = "") -> dict:
    """The tests as statements to run one by one, and the names that stand for the candidate's
    functions (each mapped to the name it has in the candidate's program).

    With a ``def check(candidate)`` (HumanEval), its body is split and ``candidate`` is bound to
    the entry point; the rest of the file (imports, helpers, but not a ``check(...)`` call) runs
    first. Without one, the file's top-level statements are split, and every name the tests use
    without defining it (and that is not a built-in) is looked up in the candidate's program.

    A statement *counts* as a test when it contains an ``assert`` and depends on the candidate
    (uses one of its names, or a name assigned from one earlier): ``assert True`` does not, so an
    empty body earns no partial credit for it.
    """
    module = ast.parse(test_code)
    check = next((n for n in module.body if isinstance(n, ast.FunctionDef) and n.name == "check"), None)
    if check is None or not entry_point:
        nodes, setup = module.body, []
        loaded, stored = _names(module)
        names = {name: name for name in sorted(loaded - stored - set(dir(builtins)))}
    else:
        nodes = check.body
        setup = [n for n in module.body if n is not check and not _calls_check(n)]
        names = {check.args.args[0].arg if check.args.args else "candidate": entry_point}
    if entry_point and not hasattr(builtins, entry_point):
        names[entry_point] = entry_point
    depends = set(names)
    statements = [{"source": ast.unparse(node), "counts": False} for node in setup]
    for node in nodes:
        loaded, stored = _names(node)
        dependent = bool(loaded & depends)
        if dependent:
            depends |= stored
        counts = dependent and any(isinstance(sub, ast.Assert) for sub in ast.walk(node))
        statements.append({"source": ast.unparse(node), "counts": counts})
    return {"statements": statements, "candidate_names": names, "prelude": prelude}


def _names(tree: ast.AST) -> tuple[set, set]:
    """Names a piece of code reads, and names it binds (assignments, defs, imports, arguments)."""
    loaded, stored = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (loaded if isinstance(node.ctx, ast.Load) else stored).add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            stored.add(node.name)
        elif isinstance(node, ast.arg):
            stored.add(node.arg)
        elif isinstance(node, ast.alias):
            stored.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, ast.ExceptHandler) and node.name:
            stored.add(node.name)
    return loaded, stored


def _calls_check(node: ast.stmt) -> bool:
    return (
        isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Call)
        and isinstance(node.value.func, ast.Name)
        and node.value.func.id == "check"
    )
