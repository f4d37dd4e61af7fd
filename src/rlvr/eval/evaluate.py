"""Held-out evaluation: greedy accuracy, answer-format use, and sampled pass@k / mean@k / maj@k."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from rlvr.data.example import Example
from rlvr.eval.groups import group_of, grouped_accuracy
from rlvr.eval.metrics import aggregate_pass_at_k, maj_at_k, mean_at_k
from rlvr.rewards.extract import as_number, extract_answer
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


def vote(text: str) -> str | None:
    """The answer a completion votes for in maj@k: its answer wherever written (as the lenient eval
    reads it), numbers compared by value ("17", "17.0"), text by its whitespace-collapsed casefold."""
    answer = extract_answer(text, "auto")
    if answer is None:
        return None
    number = as_number(answer)
    return repr(number) if number is not None else " ".join(answer.split()).casefold()


def evaluate(
    engine: RolloutEngine,
    prompts: list[list[int]],
    examples: list[Example],
    score: Callable[[list[Completion], list[Example], list[int]], list],
    max_new_tokens: int,
    samples: int = 0,
    pass_k: list[int] | tuple[int, ...] = (1,),
    temperature: float = 1.0,
    chunk: int = 64,
    on_progress: Callable[[int], None] | None = None,
    group_by: Sequence[str] = (),
    records: list[dict] | None = None,
    self_certainty: bool = False,
) -> dict[str, float]:
    """Metrics on held-out ``examples`` (``prompts`` are their encoded prompts).

    ``score(completions, examples, group_sizes)`` returns one :class:`RewardResult` per completion
    (``group_sizes``: consecutive completions of one problem, for group rewards: 1 for the greedy
    pass, ``samples`` for the sampled one). A reward error counts as incorrect and is reported in
    ``eval/reward_errors``, never hidden. ``group_by`` adds accuracy per group
    (:mod:`rlvr.eval.groups`). When ``records`` is a list, one dict per problem (question,
    reference, greedy completion, score, group, errors) is appended to it. ``self_certainty`` asks
    the engine for per-token self-certainty (a reward that takes it).

    With ``samples`` > 1 it also reports ``eval/maj@<samples>``: how often the most common answer
    of a problem's samples (:func:`vote`) is a correct one (self-consistency).
    """
    group_keys = [group_of(e, group_by) for e in examples] if group_by else []
    greedy = _generate(
        engine,
        prompts,
        SamplingParams(n=1, temperature=0.0, max_new_tokens=max_new_tokens, self_certainty=self_certainty),
        chunk,
        on_progress,
    )
    completions = [group[0] for group in greedy]
    results = score(completions, examples, [1] * len(completions))
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
        params = SamplingParams(
            n=samples, temperature=temperature, max_new_tokens=max_new_tokens, self_certainty=self_certainty
        )
        groups = _generate(engine, prompts, params, max(1, chunk // samples), None)
        flat = [c for group in groups for c in group]
        # groups come back in prompt order; Completion.prompt_index is relative to one generate call
        flat_examples = [examples[i] for i, group in enumerate(groups) for _ in group]
        sampled = score(flat, flat_examples, [len(group) for group in groups])
        correct = [r.total is not None and r.total >= CORRECT_AT for r in sampled]
        per_problem = [(samples, sum(correct[i * samples : (i + 1) * samples])) for i in range(len(groups))]
        metrics.update({f"eval/{k}": v for k, v in aggregate_pass_at_k(per_problem, pass_k).items()})
        metrics[f"eval/mean@{samples}"] = mean_at_k([r.total or 0.0 for r in sampled])
        if samples > 1:
            votes = [vote(c.text) for c in flat]
            majority = [
                maj_at_k(votes[i * samples : (i + 1) * samples], correct[i * samples : (i + 1) * samples])
                for i in range(len(groups))
            ]
            metrics[f"eval/maj@{samples}"] = sum(majority) / len(majority)
        metrics["eval/reward_errors"] += float(sum(bool(r.errors) for r in sampled))
    return metrics
