"""Monte-Carlo step values (VinePPO, seeds 003:181-182): the engine continues each response from its
step boundaries, and the continuations' mean reward is the value of the state at that boundary.

For a kept response split into steps at ``rewards.step_separator`` (:mod:`rlvr.collect.steps`), the
collector takes up to ``max_steps - 1`` boundaries (evenly spread when the response has more
steps), asks the engine for ``samples`` continuations of the prompt followed by the response up to
each boundary, scores every continuation as a whole response (the prefix's text plus the new text)
with the run's rewards, and stores each boundary's mean on the trajectory: ``mc_values`` and
``mc_ends`` (the boundary's last token in the response). The ``vine`` estimator
(:mod:`rlvr.algo.vine`) turns them into step advantages. A boundary none of whose continuations
could be scored (or that leaves no room to continue) gets NaN and is counted
(``vine/unvalued_boundaries``): the estimator merges its two steps, never reads it as a value of 0.

With ``split: uncertain`` the boundaries are instead placed just before the ``max_steps - 1``
sampled tokens of lowest sampling probability (where tree-search rollouts such as TreeRL, seeds
002:1, branch: at the policy's uncertain choices), so the continuations re-decide those tokens.

No value network and no extra model: the cost is ``samples`` continuations per boundary, each at
most ``rollout.max_new_tokens`` minus the prefix. Single-turn responses only (an episode's state
lives in its environment, which cannot be copied mid-episode: use ``gigpo`` there).
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from rlvr.collect.steps import step_end_positions
from rlvr.data.example import Example
from rlvr.errors import RlvrError
from rlvr.rewards.scoring import score_completions
from rlvr.rollout.base import Completion, SamplingParams
from rlvr.trajectory import SAMPLED, Trajectory, TrajectoryGroup


def boundaries(ends: list[int], max_steps: int) -> list[int]:
    """Up to ``max_steps - 1`` of the inner step ends (all but the last), evenly spread."""
    inner = ends[:-1]
    room = max(max_steps - 1, 0)
    if len(inner) <= room:
        return inner
    if room == 0:
        return []
    picks = [round((k + 1) * (len(inner) + 1) / (room + 1)) - 1 for k in range(room)]
    return sorted({inner[min(max(p, 0), len(inner) - 1)] for p in picks})


def uncertain_boundaries(logprobs: list[float], max_steps: int) -> list[int]:
    """Branch points at the ``max_steps - 1`` sampled tokens the policy was least sure of (lowest
    sampling logprob; never the first token): the boundary is just before each of them, so the
    continuations re-decide it. In token order."""
    candidates = sorted(range(1, len(logprobs)), key=lambda j: (logprobs[j], j))[: max(max_steps - 1, 0)]
    return sorted(j - 1 for j in candidates)


def single_turn(t: Trajectory, what: str) -> tuple[list[int], list[float]]:
    """The sampled tokens and logprobs of a single-turn response; anything else is refused."""
    sampled = [s for s in t.segments if s.kind == SAMPLED]
    if len(t.segments) != 1 or len(sampled) != 1:
        raise RlvrError(
            f"algo.advantage: 'vine'{what} continues single-turn responses from their steps; this run "
            "has multi-turn episodes or given tokens (use gigpo for an environment's episodes)"
        )
    return list(sampled[0].token_ids), list(sampled[0].logprobs or [])


def branch_points(
    t: Trajectory,
    logprobs: list[float],
    tokenizer: Any,
    separator: str,
    max_steps: int,
    split: str,
    start: int = 0,
) -> list[int]:
    """Where ``t`` (its sampling ``logprobs``) is continued from, among its tokens from ``start`` on:
    its step ends (``separator``) or just before its least likely sampled tokens (``uncertain``)."""
    if split == "uncertain":
        return [start + p for p in uncertain_boundaries(logprobs[start:], max_steps)]
    ends = [e for e in step_end_positions(t, tokenizer, separator) if e >= start]
    return boundaries(ends, max_steps)


def joined(
    c: Completion, prefix: list[int], prefix_logprobs: list[float], head: str, limit: int, tokenizer: Any
) -> tuple[list[int], list[float], str, str]:
    """A continuation of ``prefix`` (decoded: ``head``) cut at ``limit`` new tokens, joined to it:
    its token ids, sampling logprobs, finish reason and text."""
    ids, logprobs = list(c.token_ids[:limit]), list(c.logprobs[:limit])
    finish = c.finish_reason if len(c.token_ids) <= limit else "length"
    text = head + tokenizer.decode(ids, skip_special_tokens=True)
    return prefix + ids, prefix_logprobs + logprobs, finish, text


def mc_step_values(
    engine: Any,
    pool: Any,
    tokenizer: Any,
    groups: list[TrajectoryGroup],
    examples: list[Example],
    params: SamplingParams,
    separator: str,
    samples: int,
    max_steps: int,
    split: str = "separator",
) -> dict[str, float]:
    """Fill ``mc_values`` and ``mc_ends`` of every trajectory of ``groups`` (``examples``: each
    group's example); returns ``vine/*`` metrics. ``split``: ``separator`` (steps of the text) or
    ``uncertain`` (before the least likely sampled tokens, as tree rollouts branch)."""
    if pool is None:
        raise RlvrError("algo.advantage: 'vine' scores continuations with rewards.functions; none are set")
    prompts, owners, completions_of = [], [], []
    for group, example in zip(groups, examples, strict=True):
        for t in group.trajectories:
            ids, logprobs = single_turn(t, "")
            t.mc_ends = branch_points(t, logprobs, tokenizer, separator, max_steps, split)
            t.mc_values = []
            for end in t.mc_ends:
                prefix = ids[: end + 1]
                room = params.max_new_tokens - len(prefix)
                if room <= 0:
                    continue
                prompts.append(list(t.prompt_ids) + prefix)
                owners.append((t, end, example, prefix, logprobs[: end + 1]))
                completions_of.append(room)
    if not prompts:
        return {"vine/continuations": 0.0, "vine/unvalued_boundaries": 0.0}
    room = max(completions_of)
    outs = engine.generate(prompts, replace(params, n=samples, max_new_tokens=room))
    flat, flat_examples, spans = [], [], []
    for (t, end, example, prefix, prefix_lps), continuations, limit in zip(
        owners, outs, completions_of, strict=True
    ):
        start = len(flat)
        head = tokenizer.decode(prefix, skip_special_tokens=True)
        for c in continuations:
            ids, lps, finish, text = joined(c, prefix, prefix_lps, head, limit, tokenizer)
            flat.append(Completion(c.prompt_index, t.prompt_ids, ids, lps, finish, text))
            flat_examples.append(example)
        spans.append((t, end, start, len(flat)))
    results = score_completions(pool, flat, flat_examples)
    values: dict[tuple[int, int], float] = {}
    unscored = 0
    for t, end, start, stop in spans:
        scored = [r.total for r in results[start:stop] if r.total is not None]
        values[(id(t), end)] = sum(scored) / len(scored) if scored else math.nan
        unscored += not scored
    for group in groups:
        for t in group.trajectories:
            t.mc_values = [values.get((id(t), end), math.nan) for end in t.mc_ends]
            unscored += sum(1 for end in t.mc_ends if (id(t), end) not in values)  # no room to continue
    return {"vine/continuations": float(len(flat)), "vine/unvalued_boundaries": float(unscored)}


def add_mc_values(collector: Any, groups: list[TrajectoryGroup]) -> dict[str, float]:
    """The collector's pass: values measured once per group, spread over the ranks like the sampling
    (``collector.spread``), and set on every rank's trajectories; returns the summed metrics."""
    measured = collector.spread(groups, lambda part: _measure(collector, part))
    metrics = {"vine/continuations": 0.0, "vine/unvalued_boundaries": 0.0}
    for group, (rows, counts) in zip(groups, measured, strict=True):
        for t, (values, ends) in zip(group.trajectories, rows, strict=True):
            t.mc_values, t.mc_ends = list(values), list(ends)
        for key, value in counts.items():
            metrics[key] += value
    return metrics


def _measure(collector: Any, groups: list[TrajectoryGroup]) -> list[tuple[list, dict[str, float]]]:
    """Each group's ``(values and ends per trajectory, counts)``: plain data a rank can send back."""
    cfg, out = collector.cfg, []
    params = cfg.algo.advantage_params
    for group in groups:
        counts = mc_step_values(
            collector.engine, collector.pool, collector.tokenizer, [group],
            [collector.train_examples[group.example_index]], replace(collector._params(), n=1),
            cfg.rewards.step_separator, int(params.get("samples", 4)), int(params.get("max_steps", 8)),
            str(params.get("split", "separator")),
        )  # fmt: skip
        out.append(([(t.mc_values, t.mc_ends) for t in group.trajectories], counts))
    return out
