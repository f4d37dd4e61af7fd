"""Held-out evaluation: greedy accuracy, answer-format use, sampled pass@k / mean@k / maj@k, and
test-time scaling (best-of-N, weighted votes, self-verification: :mod:`rlvr.eval.scaling`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from rlvr.data.example import Example
from rlvr.errors import RlvrError
from rlvr.eval.groups import group_of, grouped_accuracy
from rlvr.eval.metrics import aggregate_pass_at_k, maj_at_k, mean_at_k
from rlvr.eval.scaling import (
    CORRECT_AT,
    Sample,
    ScalingPlan,
    mean_logprob,
    reward_model_scores,
    scaling_metrics,
    vote_key,
)
from rlvr.eval.self_verify import DEFAULT_VERIFY_PROMPT, SelfVerify, self_verify
from rlvr.models.chat import encode_prompt
from rlvr.rewards.extract import extract_answer
from rlvr.rollout import Completion, RolloutEngine, SamplingParams

__all__ = ["CORRECT_AT", "evaluate", "scaling_plan", "vote"]


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
    reads it), numbers compared by exact value ("17", "17.0", "34/2"), text by its whitespace-collapsed
    casefold (:func:`rlvr.eval.scaling.answer_key`)."""
    return vote_key(text)


def scaling_plan(settings: Any, tokenizer: Any, context: int | None) -> ScalingPlan | None:
    """The :class:`ScalingPlan` of an ``eval`` config section (``best_of``, ``select_by``,
    ``vote_weight``, ``reward_model``, ``self_verify``, ``verify_prompt``), or None when it asks for
    none of it; ``tokenizer`` encodes the self-verification turn, ``context`` bounds it."""
    if not settings.best_of and not settings.self_verify:
        return None
    verify = None
    if settings.self_verify:
        verify = SelfVerify(
            encode=lambda messages: encode_prompt(tokenizer, messages),
            prompt=settings.verify_prompt or DEFAULT_VERIFY_PROMPT,
            context=context,
        )
    return ScalingPlan(
        best_of=tuple(settings.best_of),
        select_by=tuple(settings.select_by),
        vote_weight=tuple(settings.vote_weight),
        reward_model=settings.reward_model,
        verify=verify,
    )


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
    scaling: ScalingPlan | None = None,
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

    ``scaling`` (:func:`scaling_plan`) adds test-time scaling: ``eval/best_of_<N>/<selector>`` and
    ``eval/vote_<N>/<weight>`` over the first N samples (:mod:`rlvr.eval.scaling`) and
    ``eval/self_verify/*`` (:mod:`rlvr.eval.self_verify`); each record then carries the samples'
    answers, grades and mean logprobs, the choices made among them and the verification reply.
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
    base = len(records) if records is not None else 0  # this call's first record
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
    if scaling is not None and scaling.verify is not None:
        verified, replies, errors = self_verify(
            engine, examples, completions, greedy_correct, score, scaling.verify, max_new_tokens, chunk
        )
        metrics.update(verified)
        metrics["eval/reward_errors"] += float(errors)
        if records is not None:
            for i, reply in enumerate(replies):
                records[base + i]["self_verify"] = reply
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
        votes = [vote(c.text) for c in flat]
        if samples > 1:
            majority = [
                maj_at_k(votes[i * samples : (i + 1) * samples], correct[i * samples : (i + 1) * samples])
                for i in range(len(groups))
            ]
            metrics[f"eval/maj@{samples}"] = sum(majority) / len(majority)
        metrics["eval/reward_errors"] += float(sum(bool(r.errors) for r in sampled))
        if scaling is not None and scaling.best_of:
            scaled, choices = _best_of(scaling, flat, flat_examples, sampled, votes, correct, samples)
            metrics.update(scaled)
            if records is not None:
                for i, choice in enumerate(choices):
                    records[base + i].update(choice)
    return metrics


def _best_of(
    plan: ScalingPlan,
    flat: list[Completion],
    flat_examples: list[Example],
    sampled: list,
    votes: list[str | None],
    correct: list[bool],
    samples: int,
) -> tuple[dict[str, float], list[dict[str, Any]]]:
    """Best-of-N and weighted-vote metrics over the sampled completions (``samples`` per problem,
    consecutive), and per problem a record of its samples and the choices made among them."""
    rm: list[float | None] = [None] * len(flat)
    if plan.needs_reward_model:
        if not plan.reward_model:
            raise RlvrError("eval.select_by / eval.vote_weight reward_model needs eval.reward_model")
        rm = list(reward_model_scores(plan.reward_model, flat_examples, [c.text for c in flat]))
    logprobs = [mean_logprob(c.logprobs) for c in flat]
    every = [Sample(votes[j], correct[j], sampled[j].total, logprobs[j], rm[j]) for j in range(len(flat))]
    problems = [every[i : i + samples] for i in range(0, len(every), samples)]
    metrics, choices = scaling_metrics(problems, plan.best_of, plan.select_by, plan.vote_weight)
    records = []
    for group, choice in zip(problems, choices, strict=True):
        sampled_record: dict[str, Any] = {
            "answers": [s.answer for s in group],
            "correct": [s.correct for s in group],
            "mean_logprob": [s.logprob for s in group],
        }
        if plan.needs_reward_model:
            sampled_record["rm_score"] = [s.rm for s in group]
        records.append({"sampled": sampled_record, **choice})
    return metrics, records
