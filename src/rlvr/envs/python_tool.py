"""A Python interpreter tool (tool-integrated reasoning): the model runs code, reads what it printed.

The model writes ``<python>print(418 + 97 - 260)</python>`` (the turn ends where ``</python>``
completes) and gets back ``<output>255</output>`` as a ``tool`` message; a turn without code is the
answer, which the run's rewards score. The code runs in the same sandbox as the code reward
(:mod:`rlvr.rewards.sandbox`: bubblewrap, no network, a private /tmp, CPU, memory, process and
output limits), one fresh process per call, so nothing carries over between calls. Without
bubblewrap the environment refuses to start unless ``allow_unsafe_sandbox`` is set, exactly like
the code reward (and says what that exposes: a warning at construction, at least once a minute
while such environments are being built). A program that fails (an exception, a timeout, too much
output) comes back as its status and the end of its stderr, and is counted (``tool_errors``); a
sandbox that never comes up is an environment error (the episode ends with ``errors["env"]``),
never a silent empty output.

A call never outlives its step: its timeout is capped by the time the rollout gives the step
(:meth:`PythonTool.limit_step`), so a slow program ends as a ``timeout`` the model reads, and
:meth:`PythonTool.close` (the rollout's step timeout, or the episode's end) kills a call still
running, with every process it started.
"""

from __future__ import annotations

import logging
import re
import threading
import time

from rlvr.envs.base import Environment, Message, Step, register_env
from rlvr.envs.data_params import DataParam
from rlvr.rewards import sandbox

_CODE = re.compile(r"<python>(.*?)</python>", re.DOTALL)
log = logging.getLogger(__name__)
UNSAFE_WARNING_EVERY_S = 60.0  # environments are built per episode: repeat the warning this often
_last_unsafe_warning: list[float] = []  # when this process last gave it
_unsafe_warning_lock = threading.Lock()

INSTRUCTIONS = (
    "You can run Python code. Write it inside <python></python> and stop; what it prints comes back "
    "inside <output></output>. Then give the final answer inside <answer></answer>."
)
DEMONSTRATION: tuple[Message, ...] = (
    {
        "role": "user",
        "content": "State the final answer to the following arithmetic problem: 418 + 97 - 260 =",
    },
    {"role": "assistant", "content": "<python>print(418 + 97 - 260)</python>"},
    {"role": "tool", "content": "<output>255</output>"},
    {"role": "assistant", "content": "<answer>255</answer>"},
)


def parse_code(text: str) -> str | None:
    """The code of the last ``<python>`` call in ``text``; None when the turn has none."""
    calls = _CODE.findall(text)
    return calls[-1] if calls else None


@register_env("python")
class PythonTool(Environment):
    """Code execution as a tool; the episode's answer is the first turn without a call.

    ``timeout_s`` / ``memory_mb``: limits of one call (``timeout_s`` capped by the time the rollout
    gives the step, see :meth:`call_limits`); ``max_output_chars``: what is shown of its
    output; ``demonstrate``: open with the instructions and one worked exchange (question → code →
    output → answer) as chat turns; ``tool_error_penalty``: a turn reward of minus this for a call
    that fails."""

    stop_strings = ("</python>",)
    # what a data row's env_params may set (rlvr.envs.data_params): never the sandbox opt-in, the
    # timeout or the memory limit, which come from the config only
    data_params = {
        "max_output_chars": DataParam(int, 1, 20000),
        "demonstrate": DataParam(bool),
        "tool_error_penalty": DataParam(float, 0.0, 1.0),
    }

    def __init__(
        self,
        timeout_s: float = 2.0,
        memory_mb: int = 512,
        max_output_chars: int = 400,
        demonstrate: bool = True,
        tool_error_penalty: float = 0.0,
        allow_unsafe_sandbox: bool = False,
    ) -> None:
        # refuse at construction, not mid-episode
        backend = sandbox.require_isolation(allow_unsafe_sandbox, warn=False)
        if backend != "bwrap":
            _warn_unsafe(backend)
        self.limits = sandbox.Limits(case_s=timeout_s, total_s=timeout_s + 2.0, memory_mb=memory_mb)
        self.max_output_chars, self.demonstrate = max_output_chars, demonstrate
        self.tool_error_penalty, self.allow_unsafe = tool_error_penalty, allow_unsafe_sandbox
        self.calls = self.errors = 0
        self.step_limit_s: float | None = None  # set by the rollout before each step
        self._closed = threading.Event()  # set by close(): kills a call in flight, refuses new ones

    def reset(self, example, rng) -> list[Message]:
        if not self.demonstrate:
            return list(example.prompt)
        question = [m for m in example.prompt if m["role"] != "system"]
        return [{"role": "system", "content": INSTRUCTIONS}, *DEMONSTRATION, *question]

    def step(self, text: str) -> Step:
        code = parse_code(text)
        if code is None:  # the answer
            return Step(done=True, info={"tool_calls": 0.0, "tool_errors": 0.0})
        if self._closed.is_set():
            raise RuntimeError("the python tool was closed (its step ran out of time)")
        self.calls += 1
        limits = self.call_limits()
        result = sandbox.run_stdio(code, [""], limits, allow_unsafe=self.allow_unsafe, cancel=self._closed)
        if result.cancelled:
            raise RuntimeError("the python tool was closed during a call (its step ran out of time)")
        if result.error is not None and not result.started:
            raise RuntimeError(f"sandbox ({result.backend}) failed: {result.error}")
        case = (result.report.get("cases") or [{}])[0]
        if result.error is None:
            status = case.get("status", "killed")
        else:  # the run as a whole overran its time, or the program killed or froze the harness
            status = "timeout" if result.timed_out else "killed"
        shown = self._cut(case.get("stdout", ""))
        failed = status != "ok"
        if failed:
            self.errors += 1
            lines = case.get("stderr", "").strip().splitlines()
            detail = lines[-1][:200] if lines else status  # e.g. "ZeroDivisionError: division by zero"
            shown = f"{shown}\nerror ({status}): {detail}".strip()
        reply = {"role": "tool", "content": f"<output>{shown}</output>"}
        reward = -self.tool_error_penalty if failed else 0.0
        return Step([reply], reward=reward, info={"tool_calls": 1.0, "tool_errors": float(failed)})

    def limit_step(self, seconds: float) -> None:
        self.step_limit_s = seconds

    def call_limits(self) -> sandbox.Limits:
        """The limits of the next call: ``timeout_s``, capped so that the call (start-up and
        teardown of the sandbox included) ends before the rollout's time for this step does."""
        case_s = self.limits.case_s
        if self.step_limit_s is not None:
            margin = min(1.0, self.step_limit_s / 4)  # starting and stopping the sandbox
            case_s = min(case_s, max(0.05, self.step_limit_s - margin))
        if case_s == self.limits.case_s:
            return self.limits
        return sandbox.Limits(case_s=case_s, total_s=case_s + 1.0, memory_mb=self.limits.memory_mb)

    def close(self) -> None:
        self._closed.set()

    def _cut(self, text: str) -> str:
        text = text.rstrip("\n")
        return text if len(text) <= self.max_output_chars else text[: self.max_output_chars] + " [...]"

    def outcome(self) -> dict[str, float]:
        return {"used_tool": float(self.calls > 0), "tool_ok": float(self.calls > self.errors)}


def _warn_unsafe(backend: str) -> None:
    """Say what the weak sandbox exposes: at the first construction, then at most once a minute."""
    with _unsafe_warning_lock:
        now = time.monotonic()
        if _last_unsafe_warning and now - _last_unsafe_warning[0] < UNSAFE_WARNING_EVERY_S:
            return
        _last_unsafe_warning[:] = [now]
    log.warning("python tool: %s", sandbox.unsafe_warning(backend))
