"""Multi-turn episodes: the model and its environments take turns until each episode ends.

Every example gets ``n`` episodes (a group), each with its own environment instance built from the
same seed. The episodes of a batch advance together: each round decodes all live episodes in
batched ``generate`` calls (the first round shares each group's prompt, prefilled once), then every
environment reacts to its model turn concurrently in a thread pool, with a timeout per step, and
finished episodes drop out. With ``reuse_kv`` each episode keeps its KV cache between turns, so a
round prefills only what each live episode gained since its last turn. The conversation is kept
as a :class:`~rlvr.rollout.chat_ledger.ChatLedger`, so the trajectory holds the model's tokens
exactly as sampled and the environment's as context.

An environment message longer than ``max_observation_tokens`` is cut to that many tokens, marked
and counted (``observation_truncated``). An episode ends when its environment says so, at
``max_turns`` model turns, when its response would pass ``max_tokens``, or when it has run for
``episode_timeout_s`` (counted in ``episode_timeouts``). Its ``finish_reason``
is ``"stop"`` when the environment ended it, ``"max_turns"``, or ``"length"`` when it was cut (the
token budget, a last turn cut at ``max_new_tokens``, the time limit; counted in ``truncated``),
which is what overlong filters and penalties read. An environment that raises
or times out ends its episode with an error (``errors["env"]``): the collector handles it like a
reward error, never as a silent zero.

Time limits hold while an environment works, not only between turns: each step is waited for until
``step_timeout_s`` or the episode's ``episode_timeout_s``, whichever comes first (the latter ends
the episode cut and counted, as between turns). Before a step the environment is told how long it
may take (:meth:`~rlvr.envs.base.Environment.limit_step`, so a tool can cap its own timeout), and an
environment whose step overran is closed at once (:meth:`~rlvr.envs.base.Environment.close`: the
Python tool kills its sandbox) rather than left running on its thread; every environment is closed
when its batch of episodes is over.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as StepTimeout
from dataclasses import dataclass, field, replace
from typing import Any

from rlvr.data.example import Example
from rlvr.envs.base import Environment, Step
from rlvr.rollout.base import RolloutEngine, SamplingParams
from rlvr.rollout.chat_ledger import ChatLedger
from rlvr.trajectory import Trajectory

log = logging.getLogger(__name__)
_told_no_kv_reuse: set[str] = set()  # engine types already reported as re-prefilling every turn


@dataclass(frozen=True)
class EpisodeLimits:
    max_turns: int = 4  # model turns per episode
    max_tokens: int = 512  # response tokens per episode (model and environment), beyond the prompt
    step_timeout_s: float = 10.0  # wall-clock limit of one environment step
    max_observation_tokens: int | None = None  # an environment message longer than this is cut
    episode_timeout_s: float | None = None  # wall-clock limit of an episode (model and environment)
    reuse_kv: bool = True  # keep each episode's KV cache between turns (engines that can)


@dataclass
class Episode:
    env: Environment
    ledger: ChatLedger
    example_index: int
    turns: int = 0
    done: bool = False
    finish_reason: str = "length"
    last_text: str = ""
    turn_rewards: list[float] = field(default_factory=list)
    turn_states: list[str | None] = field(default_factory=list)  # the env's state before each model turn
    info: dict[str, float] = field(default_factory=dict)
    error: str | None = None
    kv: Any = None  # the engine's cache of this episode's ids so far (KV reuse across turns)


@dataclass
class EpisodeStats:
    """Totals over a batch of episodes, for the step's metrics."""

    model_s: float = 0.0
    env_s: float = 0.0
    episodes: int = 0
    counters: dict[str, float] = field(default_factory=dict)


def _seed_of(example: Example, fallback: int) -> int:
    seed = example.metadata.get("seed", fallback)
    return seed if isinstance(seed, int) else fallback


def run_episodes(
    engine: RolloutEngine,
    tokenizer,
    examples: list[tuple[int, Example]],
    make_env: Callable[[Example], Environment],
    params: SamplingParams,
    limits: EpisodeLimits,
    threads: ThreadPoolExecutor,
    stats: EpisodeStats | None = None,
) -> list[list[Trajectory]]:
    """``params.n`` episodes for each ``(example_index, example)``; trajectories grouped per example.

    With ``limits.reuse_kv`` and an engine that can (``generate_with_states``), each episode keeps
    its KV cache between turns and a turn prefills only the tokens added since; otherwise every turn
    prefills the whole conversation again."""
    stats = stats if stats is not None else EpisodeStats()
    reuse = _reuses_kv(engine, limits)
    eos_ids = set(getattr(engine, "stop_token_ids", []) or [tokenizer.eos_token_id])
    groups: list[list[Episode]] = []
    envs: list[Environment] = []  # every environment built, closed when the batch is over
    try:
        for index, example in examples:
            group = []
            for _ in range(params.n):
                env = make_env(example)
                envs.append(env)
                messages = env.reset(example, random.Random(_seed_of(example, index)))
                group.append(
                    Episode(env, ChatLedger(tokenizer, with_example_images(messages, example)), index)
                )
            if any(e.ledger.prompt_ids != group[0].ledger.prompt_ids for e in group):
                raise ValueError(
                    f"example {example.id}: the episodes of a group must open with the same prompt"
                )
            groups.append(group)
        _play(engine, tokenizer, groups, params, limits, threads, stats, reuse, eos_ids)
        return _collect(groups, stats)
    finally:
        for env in envs:
            _close(env)


def _play(
    engine: RolloutEngine,
    tokenizer,
    groups: list[list[Episode]],
    params: SamplingParams,
    limits: EpisodeLimits,
    threads: ThreadPoolExecutor,
    stats: EpisodeStats,
    reuse: bool,
    eos_ids: set[int],
) -> None:
    """Rounds of model turns and environment steps until every episode is over."""
    first, started = True, time.monotonic()
    ends = None if limits.episode_timeout_s is None else started + limits.episode_timeout_s
    while True:
        live = [e for g in groups for e in g if not e.done]
        if ends is not None and time.monotonic() > ends:
            for e in live:  # the batch's episodes started together: each has run this long
                _time_is_up(e)
            live = []
        if not live:
            break
        began = time.perf_counter()
        if first:  # one prefill per group; the group's episodes are its n samples
            _model_turns(engine, tokenizer, groups, params, limits, eos_ids, reuse, grouped=True)
            first = False
        else:
            _model_turns(engine, tokenizer, [[e] for e in live], replace(params, n=1), limits, eos_ids, reuse)
        stats.model_s += time.perf_counter() - began
        began = time.perf_counter()
        _env_turns([e for e in live if not e.done], threads, limits, ends)
        stats.env_s += time.perf_counter() - began
        for e in live:
            if e.done:
                e.kv = None  # an ended episode's cache is not needed again


def _time_is_up(e: Episode) -> None:
    """The episode passed ``episode_timeout_s``: it ends cut (like a token overflow), counted."""
    e.done, e.finish_reason = True, "length"
    e.info["episode_timeouts"] = 1.0


def _close(env: Environment) -> None:
    """Stop what the environment may still run (see :meth:`Environment.close`); never raises."""
    close = getattr(env, "close", None)
    if not callable(close):
        return
    try:
        close()
    except Exception as err:  # an environment bug must not end the run
        log.warning("closing environment %s failed: %s: %s", type(env).__name__, type(err).__name__, err)


def _collect(groups: list[list[Episode]], stats: EpisodeStats) -> list[list[Trajectory]]:
    out = []
    for group in groups:
        out.append([_trajectory(e) for e in group])
        stats.episodes += len(group)
        for e in group:
            stats.counters["turns"] = stats.counters.get("turns", 0.0) + e.turns
            # cut by the token budget, a turn at max_new_tokens, or the episode's time limit
            stats.counters["truncated"] = stats.counters.get("truncated", 0.0) + (e.finish_reason == "length")
            stats.counters["env_errors"] = stats.counters.get("env_errors", 0.0) + (e.error is not None)
            for key, value in e.info.items():
                stats.counters[key] = stats.counters.get(key, 0.0) + value
    return out


def _reuses_kv(engine: RolloutEngine, limits: EpisodeLimits) -> bool:
    """Whether this run keeps KV caches between turns; with ``reuse_kv`` asked of an engine that
    cannot (no ``generate_with_states``, see :class:`~rlvr.rollout.base.KVReuseEngine`), says once
    per engine type that every turn prefills the whole conversation instead; an engine that caches
    prefixes by itself (``caches_prefixes``: vLLM) gets the whole conversation and says nothing."""
    if not limits.reuse_kv:
        return False
    if hasattr(engine, "generate_with_states"):
        return True
    if getattr(engine, "caches_prefixes", False):  # vLLM: its prefix cache finds the earlier turns
        return False
    name = type(engine).__name__
    if name not in _told_no_kv_reuse:
        _told_no_kv_reuse.add(name)
        log.warning(
            "env.reuse_kv: the %s engine cannot continue from a kept KV cache (no generate_with_states); "
            "every turn prefills the whole conversation",
            name,
        )
    return False


def _model_turns(
    engine: RolloutEngine,
    tokenizer,
    batches: list[list[Episode]],
    params: SamplingParams,
    limits: EpisodeLimits,
    eos_ids: set[int],
    reuse: bool,
    grouped: bool = False,
) -> None:
    """Let every live episode write one turn, batching episodes that share stop strings."""
    by_stops: dict[tuple[str, ...], list[list[Episode]]] = {}
    for batch in batches:
        live = [e for e in batch if not e.done]
        if live:
            by_stops.setdefault(tuple(live[0].env.stop_strings), []).append(live)
    for stops, lists in by_stops.items():
        room = min(
            limits.max_tokens - max(e.ledger.response_length for b in lists for e in b), params.max_new_tokens
        )
        if room <= 0:
            for e in (e for b in lists for e in b):
                e.done, e.finish_reason = True, "length"
            continue
        turn = replace(params, max_new_tokens=room, stop_strings=stops or params.stop_strings)
        prompts = [b[0].ledger.ids for b in lists]
        if reuse:
            completions, states = engine.generate_with_states(prompts, turn, [b[0].kv for b in lists])
        else:
            completions, states = engine.generate(prompts, turn), [[None] * len(g) for g in lists]
        for batch, samples, kept in zip(lists, completions, states):
            for e, c, kv in zip(batch if grouped else batch[:1], samples, kept):
                e.kv = kv
                ended_by = (
                    c.token_ids[-1] if c.finish_reason == "stop" and c.token_ids[-1] in eos_ids else None
                )
                body = c.token_ids[:-1] if ended_by is not None else c.token_ids
                text = tokenizer.decode(body, skip_special_tokens=False)
                e.turn_states.append(_state_or_error(e))  # what this turn acted in
                e.ledger.add_model_turn(c.token_ids, c.logprobs, text, ended_by)
                e.turns += 1
                e.last_text = tokenizer.decode(body, skip_special_tokens=True)
                e.finish_reason = c.finish_reason


def _env_turns(
    episodes: list[Episode], threads: ThreadPoolExecutor, limits: EpisodeLimits, ends: float | None = None
) -> None:
    """Every episode's environment reacts to its newest model turn, concurrently, each waited for
    until the step's time limit or the episode's end (``ends``), whichever comes first."""
    now = time.monotonic()
    deadline = now + limits.step_timeout_s
    episode_first = ends is not None and ends < deadline
    if episode_first:
        deadline = ends
    pending = [(e, threads.submit(_step, e.env, e.last_text, deadline)) for e in episodes if not e.done]
    for e, future in pending:
        try:
            step: Step = future.result(timeout=max(0.0, deadline - time.monotonic()))
        except StepTimeout:
            _close(e.env)  # kill what the step still runs (a tool call), not leave it on its thread
            if episode_first:
                _time_is_up(e)
            else:
                e.done, e.error = True, f"environment step timed out after {limits.step_timeout_s:g}s"
            continue
        except Exception as err:  # an environment bug ends this episode, not the run
            e.done, e.error = True, f"environment raised {type(err).__name__}: {err}"
            continue
        e.turn_rewards.append(float(step.reward))
        for key, value in step.info.items():
            e.info[key] = e.info.get(key, 0.0) + float(value)
        if step.done or e.turns >= limits.max_turns:
            e.done = True
            cut = e.finish_reason == "length"  # the last turn itself ran out of tokens
            e.finish_reason = "length" if cut else ("stop" if step.done else "max_turns")
            continue
        messages = step.messages
        if limits.max_observation_tokens is not None:
            messages, cut = truncate_observations(e.ledger.tokenizer, messages, limits.max_observation_tokens)
            if cut:
                e.info["observation_truncated"] = e.info.get("observation_truncated", 0.0) + cut
        e.ledger.add_messages(messages)
        if e.ledger.response_length >= limits.max_tokens:
            e.done, e.finish_reason = True, "length"


def env_state(env: Environment) -> str | None:
    """``env.state()`` (None for an environment without one), checked to be a string or None."""
    state = env.state() if hasattr(env, "state") else None
    if state is not None and not isinstance(state, str):
        raise TypeError(
            f"environment {type(env).__name__}: state() must return a string or None, "
            f"not {type(state).__name__}"
        )
    return state


def _state_or_error(e: Episode) -> str | None:
    """The episode's state before this turn; a broken ``state()`` ends the episode with an error
    (like a failing step), never the run."""
    try:
        return env_state(e.env)
    except Exception as err:
        e.done, e.error = True, f"environment state() failed: {type(err).__name__}: {err}"
        return None


def _step(env: Environment, text: str, deadline: float) -> Step:
    """One environment step, told first how long it may take (counted from when it starts: with
    more episodes than threads, a step may wait for one)."""
    limit = getattr(env, "limit_step", None)
    if callable(limit):
        limit(max(0.0, deadline - time.monotonic()))
    return env.step(text)


TRUNCATION_MARK = " [...]"


def truncate_observations(tokenizer, messages: list[dict[str, str]], max_tokens: int) -> tuple[list, int]:
    """``messages`` with each content cut to its first ``max_tokens`` tokens (plus a visible mark),
    and how many were cut. Environment text is not the model's, so decoding its tokens is safe."""
    out, cut = [], 0
    for message in messages:
        ids = tokenizer(message["content"], add_special_tokens=False)["input_ids"]
        if len(ids) > max_tokens:
            message = {**message, "content": tokenizer.decode(ids[:max_tokens]) + TRUNCATION_MARK}
            cut += 1
        out.append(message)
    return out, cut


def with_example_images(messages: list[dict], example: Example) -> list[dict]:
    """The opening ``messages``, the example's images (its prompt's) in the first user message unless
    the environment placed images itself."""
    if not example.images or any(m.get("images") for m in messages):
        return messages
    out = [dict(m) for m in messages]
    for message in out:
        if message.get("role") == "user":
            message["images"] = list(example.images)
            return out
    return messages


def _trajectory(e: Episode) -> Trajectory:
    outcome = {} if e.error else e.env.outcome()
    return Trajectory(
        response_vision=e.ledger.response_vision,
        prompt_ids=e.ledger.prompt_ids,
        segments=e.ledger.segments,
        finish_reason=e.finish_reason,
        text=e.last_text,
        example_index=e.example_index,
        turn_rewards=e.turn_rewards,
        turn_states=e.turn_states if any(x is not None for x in e.turn_states) else [],
        errors={"env": e.error} if e.error else {},
        rewards={f"env/{k}": float(v) for k, v in outcome.items()},
    )
