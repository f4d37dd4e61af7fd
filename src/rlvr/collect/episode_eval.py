"""Held-out evaluation of multi-turn episodes: one greedy episode per problem, scored as in training.

A problem is solved when its episode's score (the first reward, read leniently as in single-turn
evaluation, plus the environment's turn rewards) reaches 1. Besides accuracy it reports what an
agent's run is judged by: turns per episode, tool calls and tool errors per episode, episodes cut
by the token budget, environment errors, and the means of the environment's outcome numbers
(``eval/env/<name>``). Each record keeps the whole conversation after the prompt.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from rlvr.data.example import Example
from rlvr.envs.base import Environment
from rlvr.eval.evaluate import CORRECT_AT
from rlvr.eval.groups import group_of, grouped_accuracy
from rlvr.rollout import RolloutEngine, SamplingParams
from rlvr.rollout.episodes import EpisodeLimits, EpisodeStats, run_episodes
from rlvr.trajectory import Trajectory


def evaluate_episodes(
    engine: RolloutEngine,
    tokenizer,
    examples: list[Example],
    make_env: Callable[[Example], Environment],
    score: Callable[[list[Trajectory], list[Example], list[int]], list] | None,
    params: SamplingParams,
    limits: EpisodeLimits,
    threads: ThreadPoolExecutor,
    chunk: int = 64,
    on_progress: Callable[[int], None] | None = None,
    group_by: tuple[str, ...] | list[str] = (),
) -> tuple[dict[str, float], list[dict[str, Any]]]:
    """Metrics and one record per problem; ``score`` gives one RewardResult per final answer (None:
    the environment's turn rewards alone score the episode)."""
    trajectories: list[Trajectory] = []
    counters: dict[str, float] = {}
    for start in range(0, len(examples), chunk):
        part = list(enumerate(examples[start : start + chunk], start))
        stats = EpisodeStats()
        groups = run_episodes(engine, tokenizer, part, make_env, params, limits, threads, stats)
        trajectories.extend(g[0] for g in groups)
        for key, value in stats.counters.items():
            counters[key] = counters.get(key, 0.0) + value
        if on_progress:
            on_progress(len(part))
    one_each = [1] * len(trajectories)  # one episode per problem: groups of one (group rewards)
    results = score(trajectories, examples, one_each) if score is not None else [None] * len(trajectories)
    scores, records = [], []
    for t, example, result in zip(trajectories, examples, results, strict=True):
        errors = {**t.errors, **(result.errors if result is not None else {})}
        total = None if errors else (result.total if result is not None else 0.0) + sum(t.turn_rewards)
        scores.append(total if total is not None else 0.0)
        records.append(
            {
                "id": example.id,
                "question": example.question,
                "reference": example.reference,
                "completion": t.text,
                "conversation": tokenizer.decode(t.response_ids, skip_special_tokens=False),
                "score": total,
                "correct": total is not None and total >= CORRECT_AT,
                "turns": sum(s.kind == "sampled" for s in t.segments),
                "finish_reason": t.finish_reason,
                **({"errors": errors} if errors else {}),
            }
        )
    n = max(len(examples), 1)
    correct = [r["correct"] for r in records]
    metrics = {
        "eval/accuracy": sum(correct) / n,
        "eval/mean_score": sum(scores) / n,
        "eval/turns": counters.get("turns", 0.0) / n,
        "eval/tool_calls": counters.get("tool_calls", 0.0) / n,
        "eval/tool_errors": counters.get("tool_errors", 0.0) / n,
        "eval/truncated_rate": counters.get("truncated", 0.0) / n,
        "eval/reward_errors": float(sum("errors" in r for r in records)),
        "eval/size": float(len(examples)),
    }
    outcome_keys = dict.fromkeys(k for t in trajectories for k in t.rewards if k.startswith("env/"))
    for key in outcome_keys:
        metrics[f"eval/{key}"] = sum(t.rewards.get(key, 0.0) for t in trajectories) / n
    if group_by:
        keys = [group_of(e, group_by) for e in examples]
        metrics.update(grouped_accuracy(keys, correct))
        for record, key in zip(records, keys):
            record["group"] = key
    return metrics, records
