"""Self-verification at evaluation time: the policy judges its own greedy answer and may revise it.

For each held-out problem the policy gets a second turn in the same chat: the problem's prompt, its
greedy completion as the assistant's turn, then a user turn asking whether the answer is correct and,
if not, for the corrected final answer in ``<answer>`` tags (``eval.verify_prompt``). The answer is
*revised* when the reply's last ``<answer>`` tag holds a different answer (compared as
:func:`rlvr.eval.scaling.answer_key` normalises them); a reply without a tag, or with the same
answer, keeps the original (revise only when the check finds an error, as PAG does, seeds/002:12;
generate → verify → revise, seeds/002:6, seeds/000:28). A revised answer is graded by the eval
reward on the reply; the rest keep their greedy grade.

Bounded: one extra generation per problem, greedy, at most ``eval.max_new_tokens`` tokens. A problem
whose second-turn prompt plus ``max_new_tokens`` would not fit the model's context is not verified
(it keeps its answer) and is counted in ``eval/self_verify/skipped``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from rlvr.data.example import Example
from rlvr.eval.scaling import CORRECT_AT, answer_key, vote_key
from rlvr.rewards.extract import extract_answer
from rlvr.rollout import Completion, RolloutEngine, SamplingParams

DEFAULT_VERIFY_PROMPT = (
    "Is this answer correct? Check it step by step. If it is correct, repeat the same final answer in "
    "<answer></answer> tags. If it is not, give the corrected final answer in <answer></answer> tags."
)


@dataclass(frozen=True)
class SelfVerify:
    """How the second turn is built: ``encode`` turns chat messages into prompt ids (the chat
    template, ending with the assistant's turn), ``prompt`` is the user's question in it
    (``{question}`` and ``{answer}`` are replaced by the problem's question and the extracted
    answer), ``context`` the longest prompt + completion the engine takes (None: unknown)."""

    encode: Callable[[list[dict[str, str]]], list[int]]
    prompt: str = DEFAULT_VERIFY_PROMPT
    context: int | None = None


@dataclass(frozen=True)
class Outcome:
    """One problem's self-verification: graded before and after, and what the reply did."""

    before: bool  # the greedy answer was correct
    after: bool  # the final answer (revised or kept) is correct
    revised: bool  # the reply gave a different answer, which replaced the greedy one
    answered: bool = False  # the reply had an <answer> tag (the same answer or a new one)
    skipped: bool = False  # not verified: the second turn would not fit the context


def verify_messages(example: Example, completion: str, prompt: str) -> list[dict[str, str]]:
    """The second turn's chat: the problem's prompt, its completion, the verification question."""
    answer = extract_answer(completion, "auto")
    question = prompt.replace("{question}", example.question).replace("{answer}", answer or "(none)")
    return [
        *example.prompt,
        {"role": "assistant", "content": completion},
        {"role": "user", "content": question},
    ]


def revision(original: str, reply: str) -> tuple[str | None, bool]:
    """``(the reply's answer key or None, whether it revises the original's answer)``: a revision
    is a last ``<answer>`` tag in the reply whose answer differs from the original completion's."""
    new = answer_key(extract_answer(reply, "answer_tag"))
    return new, new is not None and new != vote_key(original)


def verify_metrics(outcomes: Sequence[Outcome]) -> dict[str, float]:
    """``eval/self_verify/{accuracy,revised,fixed,broken,answered,skipped}``, each a fraction of all
    problems; ``accuracy`` = greedy accuracy + ``fixed`` − ``broken``."""
    total = max(len(outcomes), 1)
    return {
        "eval/self_verify/accuracy": sum(o.after for o in outcomes) / total,
        "eval/self_verify/revised": sum(o.revised for o in outcomes) / total,
        "eval/self_verify/fixed": sum(o.revised and o.after and not o.before for o in outcomes) / total,
        "eval/self_verify/broken": sum(o.revised and o.before and not o.after for o in outcomes) / total,
        "eval/self_verify/answered": sum(o.answered for o in outcomes) / total,
        "eval/self_verify/skipped": sum(o.skipped for o in outcomes) / total,
    }


def self_verify(
    engine: RolloutEngine,
    examples: Sequence[Example],
    completions: Sequence[Completion],
    correct: Sequence[bool],
    score: Callable[[list[Completion], list[Example], list[int]], list],
    plan: SelfVerify,
    max_new_tokens: int,
    chunk: int = 64,
) -> tuple[dict[str, float], list[dict[str, Any]], int]:
    """Verify each problem's greedy ``completions`` (graded ``correct``) with one more greedy turn.

    Returns the metrics (:func:`verify_metrics`), one record per problem (the reply, its answer,
    whether it revised, the final grade) and the number of reward errors when grading revisions
    (a revision whose grading errors counts as wrong).
    """
    prompts = [plan.encode(verify_messages(e, c.text, plan.prompt)) for e, c in zip(examples, completions)]
    fits = [plan.context is None or len(p) + max_new_tokens <= plan.context for p in prompts]
    todo = [i for i, ok in enumerate(fits) if ok]
    params = SamplingParams(n=1, temperature=0.0, max_new_tokens=max_new_tokens)
    replies: dict[int, Completion] = {}
    for start in range(0, len(todo), chunk):
        batch = todo[start : start + chunk]
        for i, group in zip(batch, engine.generate([prompts[i] for i in batch], params), strict=True):
            replies[i] = group[0]
    parsed = {i: revision(completions[i].text, reply.text) for i, reply in replies.items()}
    revised = [i for i in todo if parsed[i][1]]
    results = (
        score([replies[i] for i in revised], [examples[i] for i in revised], [1] * len(revised))
        if revised
        else []
    )
    graded = {i: r.total is not None and r.total >= CORRECT_AT for i, r in zip(revised, results, strict=True)}
    outcomes, records = [], []
    for i, before in enumerate(correct):
        reply = replies.get(i)
        answer, did_revise = parsed.get(i, (None, False))
        outcome = Outcome(
            before=bool(before),
            after=graded[i] if did_revise else bool(before),
            revised=did_revise,
            answered=answer is not None,
            skipped=not fits[i],
        )
        outcomes.append(outcome)
        records.append(
            {
                "reply": reply.text if reply is not None else None,
                "answer": answer,
                "revised": outcome.revised,
                "correct": outcome.after,
                **({"skipped": "the second turn does not fit the context"} if outcome.skipped else {}),
            }
        )
    return verify_metrics(outcomes), records, sum(bool(r.errors) for r in results)
