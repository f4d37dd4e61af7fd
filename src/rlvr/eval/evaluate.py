"""Held-out evaluation: greedy accuracy, answer-format use, and sampled pass@k / mean@k."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from rlvr.data.example import Example
from rlvr.eval.groups import group_of, grouped_accuracy
from rlvr.eval.metrics import aggregate_pass_at_k, mean_at_k
from rlvr.rewards.extract import extract_answer
from rlvr.rollout import Completion, RolloutEngine, SamplingParams

CORRECT_AT = 1.0 - 1e-6  # a completion is "correct" when its eval score reaches 1


def _generate(
    engine: RolloutEngine,
    prompts: list[list[int]],
    params: SamplingParams,
    chunk: int,
    on_progress: Callable[[int], None] | None,
) -> list[list[Completion]]:
    groups: list[list[Completion]] = []
    for start in range(0, len(prompts), chunk):
        groups.extend(engine.generate(prompts[start : start + chunk], params))
        if on_progress:
            on_progress(min(chunk, len(prompts) - start))
    return groups


def evaluate(
    engine: RolloutEngine,
    prompts: list[list[int]],
    examples: list[Example],
    score: Callable[[list[Completion], list[Example]], list],
    max_new_tokens: int,
    samples: int = 0,
    pass_k: list[int] | tuple[int, ...] = (1,),
    temperature: float = 1.0,
    chunk: int = 64,
    on_progress: Callable[[int], None] | None = None,
    group_by: Sequence[str] = (),
    records: list[dict] | None = None,
) -> dict[str, float]:
    """Metrics on held-out ``examples`` (``prompts`` are their encoded prompts).

    ``score(completions, examples)`` returns one :class:`RewardResult` per completion. A reward
    error counts as incorrect and is reported in ``eval/reward_errors``, never hidden.
    ``group_by`` adds accuracy per group (:mod:`rlvr.eval.groups`). When ``records`` is a list,
    one dict per problem (question, reference, greedy completion, score, group, errors) is
    appended to it.
    """
    group_keys = [group_of(e, group_by) for e in examples] if group_by else []
    greedy = _generate(
        engine,
        prompts,
        SamplingParams(n=1, temperature=0.0, max_new_tokens=max_new_tokens),
        chunk,
        on_progress,
    )
    completions = [group[0] for group in greedy]
    results = score(completions, examples)
    scores = [r.total if r.total is not None else 0.0 for r in results]
    greedy_correct = [s >= CORRECT_AT for s in scores]
    metrics = {
        "eval/accuracy": sum(greedy_correct) / max(len(scores), 1),
        "eval/mean_score": sum(scores) / max(len(scores), 1),
        "eval/answer_tag_rate": sum(extract_answer(c.text, "answer_tag") is not None for c in completions)
        / max(len(completions), 1),
        "eval/mean_length": sum(len(c) for c in completions) / max(len(completions), 1),
        "eval/truncated_rate": sum(c.finish_reason == "length" for c in completions)
        / max(len(completions), 1),
        "eval/reward_errors": float(sum(bool(r.errors) for r in results)),
        "eval/size": float(len(examples)),
    }
    if group_by:
        metrics.update(grouped_accuracy(group_keys, greedy_correct))
    if records is not None:
        for i, (example, completion, result) in enumerate(zip(examples, completions, results, strict=True)):
            records.append(
                {
                    "id": example.id,
                    "question": example.question,
                    "reference": example.reference,
                    "completion": completion.text,
                    "score": result.total,
                    "correct": greedy_correct[i],
                    **({"group": group_keys[i]} if group_by else {}),
                    **({"errors": result.errors} if result.errors else {}),
                }
            )
    if samples:
        params = SamplingParams(n=samples, temperature=temperature, max_new_tokens=max_new_tokens)
        groups = _generate(engine, prompts, params, max(1, chunk // samples), None)
        flat = [c for group in groups for c in group]
        # groups come back in prompt order; Completion.prompt_index is relative to one generate call
        flat_examples = [examples[i] for i, group in enumerate(groups) for _ in group]
        sampled = score(flat, flat_examples)
        correct = [r.total is not None and r.total >= CORRECT_AT for r in sampled]
        per_problem = [(samples, sum(correct[i * samples : (i + 1) * samples])) for i in range(len(groups))]
        metrics.update({f"eval/{k}": v for k, v in aggregate_pass_at_k(per_problem, pass_k).items()})
        metrics[f"eval/mean@{samples}"] = mean_at_k([r.total or 0.0 for r in sampled])
        metrics["eval/reward_errors"] += float(sum(bool(r.errors) for r in sampled))
    return metrics
