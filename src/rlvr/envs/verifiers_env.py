"""verifiers environments as rlvr environments (``env.name: verifiers``).

verifiers (``pip install 'rlvr[verifiers]'``, version 0.4.0, its ``v1`` stack) is a standard for
RL environments written once and trained by any framework: a *taskset* (a module exporting a
``Taskset`` whose tasks carry a prompt and the data its ``@vf.reward`` functions score) and, for
multi-turn play, an ``Env`` whose async ``run()`` talks to the model turn by turn
(``chat.turn(message)``). A verifiers environment is never stepped from outside: it calls the model
itself, through a harness program and an OpenAI-style interception server that records each turn on
the episode's trace. This adapter turns that inside out so that rlvr's multi-turn loop drives it:

- one asyncio loop per process (a daemon thread) runs the environment's episodes;
- every seat plays with rlvr's harness (:mod:`rlvr.envs.verifiers_harness`), and the interception
  server's client is rlvr's: a model call is handed to the rollout thread that owns the episode;
  :meth:`VerifiersEnv.reset` returns the first call's messages, :meth:`VerifiersEnv.step` answers the
  pending call with the model's turn and returns the next call's new messages, or the verdict;
- the turn the environment records must be the model's text exactly (checked on every call), so
  rlvr's token ledger and the environment's trace agree.

Rewards are the trace's: verifiers scores a trace when its episode ends (the weighted sum of its
reward functions); rlvr puts it on the last turn. An episode that verifiers marks failed (a reward
function raised, a model call failed), a reward that is ``None``, or a taskset with no reward at
all is an error the rollout counts, never a 0 (verifiers itself reads a failed trace's reward as 0).
Environments with more than one seat (several roles) are refused: they need a policy per role.

Loading is by name from the trusted config only: ``env.params.taskset`` (and ``env``) name the
modules verifiers imports; a data row chooses a task by its index (``metadata.task_index``) in that
taskset, nothing else. The ``verifiers`` dataset (``data.task: verifiers``, ``data.task_config:
{taskset: ..., holdout: 0.2}``) splits the taskset's tasks once, the same for every seed. The
request's sampling settings are ignored: rlvr's ``rollout`` settings sample every turn.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import queue
import random
import sys
import threading
from typing import Any

from rlvr.data.example import Example
from rlvr.envs.base import Environment, Message, Step, register_env
from rlvr.errors import RlvrError

_LOCK = threading.Lock()
_BRIDGES: dict[str, _Bridge] = {}
_ROUTES: dict[str, queue.Queue | None] = {}  # a trace's id -> the queue of the episode that owns it
_LOOP: asyncio.AbstractEventLoop | None = None
FIRST_CALL_S = 300.0
SERVE_S = 60.0  # how long an environment may take to start serving (its interception servers)


def _verifiers() -> Any:
    try:
        import verifiers.v1 as vf
    except ImportError as err:
        raise RlvrError("env.name=verifiers needs verifiers: pip install 'rlvr[verifiers]'") from err
    return vf


def _loop() -> asyncio.AbstractEventLoop:
    """The process's one loop for verifiers (its interception servers live on it)."""
    global _LOOP
    if _LOOP is None:
        _LOOP = asyncio.new_event_loop()
        threading.Thread(target=_LOOP.run_forever, daemon=True, name="rlvr-verifiers").start()
    return _LOOP


def _install() -> None:
    """rlvr's harness under the name verifiers looks for, and rlvr's policy as the interception
    servers' client (verifiers 0.4.0 builds that client from a config only; this replaces the one
    function that does it)."""
    vf = _verifiers()
    from verifiers.v1.interception import server

    from rlvr.envs import verifiers_harness

    sys.modules.setdefault(verifiers_harness.HARNESS_ID, verifiers_harness)
    if getattr(server.resolve_client, "rlvr", False):
        return

    class PolicyClient(vf.Client):
        async def get_response(
            self,
            dialect: Any,
            body: Any,
            sampling: Any,
            session_id: Any = None,
            turn: Any = None,
            headers: Any = None,
        ) -> Any:
            route = _ROUTES.get(session_id)
            if route is None:
                raise RuntimeError("rlvr: a model call from a seat no rlvr episode plays")
            request = dialect.parse_request(body)
            answer = asyncio.get_running_loop().create_future()
            route.put(("call", request.messages, answer))
            text = await answer
            reply = {"role": "assistant", "content": text}
            raw = {
                "id": "rlvr",
                "object": "chat.completion",
                "created": 0,
                "model": body.get("model", ""),
                "choices": [{"index": 0, "finish_reason": "stop", "message": reply}],
                "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
            }
            response = dialect.parse_response(dialect.validate_response(raw))
            response.raw = raw
            return response

    client = PolicyClient()

    def resolve(config: Any) -> Any:
        return client

    resolve.rlvr = True  # type: ignore[attr-defined]
    server.resolve_client = resolve


def _env_config(taskset: str, env: str, taskset_config: dict, env_config: dict) -> dict:
    """The environment's config with every seat playing rlvr's harness in this process."""
    from verifiers.v1.configs.agent import AgentConfig
    from verifiers.v1.utils.loaders import env_config_type

    from rlvr.envs.verifiers_harness import HARNESS_ID

    try:
        config_class = env_config_type(taskset, env)
    except Exception as err:  # the module is missing or exports no Taskset / Env
        raise RlvrError(
            f"env.params: verifiers cannot load taskset {taskset!r} / env {env!r}: {err}"
        ) from err
    seats = [
        name for name, field in config_class.model_fields.items() if isinstance(field.default, AgentConfig)
    ]
    if len(seats) != 1:
        raise RlvrError(
            f"env.params: verifiers environment {env or taskset!r} has {len(seats)} seats ({seats}); "
            "rlvr plays environments with one (several roles need a policy each)"
        )
    seat = dict(env_config.get(seats[0]) or {})
    seat.update(harness={"id": HARNESS_ID}, runtime={"type": "subprocess"})
    return {**env_config, "id": env, "taskset": {**taskset_config, "id": taskset}, seats[0]: seat}


class _Bridge:
    """One loaded verifiers environment, serving on the process's loop."""

    def __init__(self, taskset: str, env: str, taskset_config: dict, env_config: dict) -> None:
        vf = _verifiers()
        _install()
        config = _env_config(taskset, env, taskset_config, env_config)
        try:
            self.env = vf.load_environment(vf.resolve_env_config(config))
        except Exception as err:
            raise RlvrError(f"env.params: verifiers cannot build {env or taskset!r}: {err}") from err
        self.tasks = list(self.env.taskset)
        self.stack = contextlib.AsyncExitStack()
        starting = asyncio.run_coroutine_threadsafe(
            self.stack.enter_async_context(self.env.serving()), _loop()
        )
        try:
            starting.result(SERVE_S)
        except concurrent.futures.TimeoutError:
            starting.cancel()
            raise RlvrError(
                f"env.params: verifiers environment {env or taskset!r} did not start in {SERVE_S:.0f} s"
            ) from None
        self.context = vf.ModelContext(
            model="rlvr-policy",
            client=vf.TrainClientConfig(base_url="http://rlvr.invalid/v1", api_key_var="RLVR"),
        )


def _bridge(
    taskset: str, env: str = "", taskset_config: dict | None = None, env_config: dict | None = None
) -> _Bridge:
    key = json.dumps([taskset, env, taskset_config or {}, env_config or {}], sort_keys=True, default=str)
    with _LOCK:
        if key not in _BRIDGES:
            _BRIDGES[key] = _Bridge(taskset, env, dict(taskset_config or {}), dict(env_config or {}))
        return _BRIDGES[key]


def _plain(message: Any) -> Message:
    from verifiers.v1.dialects.chat import message_to_wire

    wire = message_to_wire(message) if not isinstance(message, dict) else message
    content = wire.get("content")
    if isinstance(content, list):
        if any(part.get("type") != "text" for part in content):
            raise RuntimeError("verifiers: a message with non-text parts (images, files) is not supported")
        content = "".join(part.get("text", "") for part in content)
    if wire.get("tool_calls") or not isinstance(content, str):
        raise RuntimeError(
            f"verifiers: a {wire.get('role')} message rlvr cannot show (tool calls or no text)"
        )
    return {"role": str(wire.get("role")), "content": content}


def _capped(message: Message, limit: int) -> Message:
    """``message`` as the model is shown it: its text cut at ``limit`` characters, with a marker."""
    content = message["content"]
    if len(content) <= limit:
        return message
    return {**message, "content": content[:limit] + f"\n[... {len(content) - limit} characters cut]"}


@register_env("verifiers")
class VerifiersEnv(Environment):
    """One verifiers episode. ``outcome()``: ``reward`` (the trace's), ``solved`` (that reward
    reaches 1), ``turns``, and each named reward's score (``reward/<name>``)."""

    data_params: dict = {}  # a data row chooses its task by metadata.task_index only

    def __init__(
        self,
        taskset: str,
        env: str = "",
        taskset_config: dict[str, Any] | None = None,
        env_config: dict[str, Any] | None = None,
        max_message_chars: int = 8000,
    ) -> None:
        if not taskset:
            raise RlvrError("env.params.taskset: name the verifiers taskset (an installed module)")
        self.taskset, self.limit = taskset, int(max_message_chars)
        self.bridge = _bridge(taskset, env, taskset_config, env_config)
        self.inbox: queue.Queue = queue.Queue()
        self.traces: list[str] = []
        self.running: Any = None
        self.pending: Any = None
        self.sent: list[Any] = []
        self.wait_s, self.turns = FIRST_CALL_S, 0
        self.scores: dict[str, float] = {}
        self.reward = 0.0

    def _on_trace(self, trace: Any) -> None:  # on the loop, when verifiers mints a trace
        _ROUTES[trace.id] = self.inbox if not self.traces else None
        self.traces.append(trace.id)

    def reset(self, example: Example, rng: random.Random) -> list[Message]:
        index = example.metadata.get("task_index")
        if example.metadata.get("taskset", self.taskset) != self.taskset:
            raise RuntimeError(
                f"verifiers: example {example.id} is from taskset {example.metadata.get('taskset')!r}"
            )
        if not isinstance(index, int) or not 0 <= index < len(self.bridge.tasks):
            raise RuntimeError(
                f"verifiers: example {example.id} has no task_index in 0..{len(self.bridge.tasks) - 1}"
            )
        self.turns, self.scores, self.reward = 0, {}, 0.0
        coro = self.bridge.env.run_episode(
            self.bridge.tasks[index], self.bridge.context, on_trace=self._on_trace
        )
        self.running = asyncio.run_coroutine_threadsafe(coro, _loop())
        self.running.add_done_callback(lambda done: self.inbox.put(("done", done, None)))
        messages, done = self._next(FIRST_CALL_S)
        if done:
            raise RuntimeError("verifiers: the episode ended before the model's first turn")
        return messages

    def limit_step(self, seconds: float) -> None:
        self.wait_s = seconds

    def _next(self, wait: float) -> tuple[list[Message], bool]:
        try:
            kind, payload, answer = self.inbox.get(timeout=wait)
        except queue.Empty:
            raise RuntimeError(f"verifiers: no model call and no verdict within {wait:.0f} s") from None
        if kind == "call":
            conversation = [_plain(m) for m in payload]
            if conversation[: len(self.sent)] != self.sent:
                raise RuntimeError("verifiers: the environment's conversation is not what the model saw")
            self.pending = answer
            new = [_capped(m, self.limit) for m in conversation[len(self.sent) :]]
            self.sent = conversation
            return new, False
        if len(self.traces) > 1:
            raise RuntimeError("verifiers: the episode played more than one seat; rlvr plays one")
        try:
            episode = payload.result()
        except Exception as err:
            raise RuntimeError(f"verifiers: the episode failed: {err}") from err
        self._verdict(episode)
        return [], True

    def _verdict(self, episode: Any) -> None:
        if not episode.ok:
            errors = [e.message for t in episode.traces for e in t.errors] + [
                e.message for e in episode.errors
            ]
            raise RuntimeError(f"verifiers: the episode failed: {'; '.join(errors) or 'no reason given'}")
        (trace,) = episode.traces
        missing = [name for name, value in trace.rewards.items() if value is None]
        if not trace.rewards or missing:
            raise RuntimeError(
                f"verifiers: no verdict (rewards missing: {missing or 'the taskset has none'})"
            )
        self.scores = {name: float(value.score) for name, value in trace.rewards.items()}
        self.reward = float(trace.reward)

    def step(self, text: str) -> Step:
        if self.pending is None:
            raise RuntimeError("verifiers: step() with no model call waiting")
        answer, self.pending = self.pending, None
        self.sent.append({"role": "assistant", "content": text})
        self.turns += 1
        _loop().call_soon_threadsafe(lambda: answer.done() or answer.set_result(text))
        messages, done = self._next(self.wait_s)
        if done:
            return Step(reward=self.reward, done=True)
        return Step(messages)

    def outcome(self) -> dict[str, float]:
        return {
            "reward": self.reward,
            "solved": float(self.reward >= 1.0),
            "turns": float(self.turns),
            **{f"reward/{k}": v for k, v in self.scores.items()},
        }

    def close(self) -> None:
        running, self.running = self.running, None
        if running is not None and not running.done():
            running.cancel()
        for trace in self.traces:
            _ROUTES.pop(trace, None)


def verifiers_examples(
    count: int,
    seed: int,
    split: str = "train",
    taskset: str = "",
    taskset_config: dict[str, Any] | None = None,
    env: str = "",
    env_config: dict[str, Any] | None = None,
    holdout: float = 0.2,
) -> list[Example]:
    """Examples indexing the taskset's tasks. The held-out tasks (a ``holdout`` share, chosen once
    per taskset, the same for every seed) never train; training draws cycle through the rest in
    an order set by ``seed``; a held-out set is at most every held-out task once."""
    if not taskset:
        raise ValueError("verifiers: data.task_config.taskset names the taskset (as env.params.taskset does)")
    if not 0.0 < holdout < 1.0:
        raise ValueError(f"verifiers: holdout must be between 0 and 1, got {holdout}")
    tasks = _bridge(taskset, env, taskset_config, env_config).tasks
    if len(tasks) < 2:
        raise ValueError(f"verifiers: taskset {taskset!r} has {len(tasks)} task(s); a split needs two")
    order = list(range(len(tasks)))
    random.Random(f"rlvr-verifiers-split:{taskset}").shuffle(order)
    cut = max(1, round(holdout * len(tasks)))
    pool = order[:cut] if split == "eval" else order[cut:]
    random.Random(f"rlvr-verifiers:{seed}:{split}").shuffle(pool)
    chosen = pool[:count] if split == "eval" else [pool[i % len(pool)] for i in range(count)]
    return [
        Example(
            id=f"verifiers-{taskset}-{index}",
            prompt=[{"role": "user", "content": _prompt_text(tasks[index])}],
            data_source=taskset,
            verifier="environment",
            metadata={"env": "verifiers", "taskset": taskset, "task_index": index},
        )
        for index in chosen
    ]


def _prompt_text(task: Any) -> str:
    prompt = getattr(task.data, "prompt", None)
    return prompt if isinstance(prompt, str) else f"(task {getattr(task, 'idx', '?')})"
