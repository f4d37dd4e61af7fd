"""Label-free rewards: the group's majority answer as a pseudo-label, and the policy's own confidence.

- ``majority_vote`` (TTRL, Zuo et al. 2025): the most common answer among the G completions of a
  prompt stands in for the reference; completions that agree with it score 1. It needs the whole
  group, so it is a *group reward*: the pool calls it once per group (``group_sizes=``).
- ``self_certainty`` (Intuitor, Zhao et al. 2025) and ``confidence``: rewards from the policy's
  own token distributions. The collector passes them to :meth:`RewardPool.score` as
  ``token_self_certainty`` (per completion, each token's exact KL(uniform ‖ p), which the HF
  engine computes from the logits it samples from when a reward asks for it), ``top_logprobs``
  (per token, the log-probabilities of the top-k tokens, for engines that return only those) or
  ``token_logprobs`` (the sampled tokens' log-probabilities, which every rollout engine returns).
  The formulas are pure functions here so that a trainer holding full logits can compute them
  directly (:func:`self_certainty_from_logits`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Annotated, Any, Literal

from annotated_types import Ge, Le

from rlvr.data.example import Example
from rlvr.rewards.extract import ExtractMode, extract_answer
from rlvr.rewards.registry import register_group_reward, register_reward


def majority_answer(answers: Sequence[str | None], same: Any = None) -> tuple[str | None, list[bool]]:
    """The most common answer (ties: the first to reach the top count) and who agrees with it.

    ``same(a, b)`` decides equivalence (default: equal after stripping and case-folding); answers
    are clustered against each cluster's first member, so equivalence needs only O(G × clusters)
    comparisons. ``None`` (no answer) never wins and never agrees.
    """
    same = same or (lambda a, b: a.strip().casefold() == b.strip().casefold())
    clusters: list[list[int]] = []
    for index, answer in enumerate(answers):
        if answer is None:
            continue
        for cluster in clusters:
            if same(answers[cluster[0]], answer):
                cluster.append(index)
                break
        else:
            clusters.append([index])
    if not clusters:
        return None, [False] * len(answers)
    best = max(clusters, key=len)  # max keeps the first of equal-sized clusters
    members = set(best)
    return answers[best[0]], [i in members for i in range(len(answers))]


@register_group_reward("majority_vote", preload=("math_verify",))
def majority_vote_reward(
    completions: list[str],
    example: Example,
    *,
    extract: ExtractMode = "auto",
    equivalence: Literal["text", "math"] = "math",
    min_agreement: Annotated[float, Ge(0), Le(1)] = 0.0,
) -> list[float]:
    """1.0 for each completion whose answer agrees with the group's majority answer, else 0.0.

    ``equivalence="math"`` compares answers with math-verify (so "0.5" and "1/2" vote together);
    ``"text"`` compares stripped, case-folded text. When the majority holds less than
    ``min_agreement`` of the group, the pseudo-label is too weak to trust and every completion
    scores 0.0.
    """
    answers = [extract_answer(c, mode=extract) for c in completions]
    same = _math_same if equivalence == "math" else None
    winner, agrees = majority_answer(answers, same)
    if winner is None or sum(agrees) < min_agreement * len(completions):
        return [0.0] * len(completions)
    return [1.0 if a else 0.0 for a in agrees]


def _math_same(a: str, b: str) -> bool:
    if a.strip() == b.strip():
        return True
    from rlvr.rewards.math_equiv import ReferenceUnparsable, math_equivalent

    try:
        return math_equivalent(a, b)
    except ReferenceUnparsable:  # neither is a reference here: answers math-verify cannot read
        return a.strip().casefold() == b.strip().casefold()


def self_certainty(top_logprobs: Sequence[Sequence[float]], vocab_size: int | None = None) -> float:
    """Mean over tokens of KL(uniform ‖ p): how far each next-token distribution is from uniform.

    For one token with log-probabilities ``l_1..l_V`` over the vocabulary this is
    ``-log V - mean_j l_j`` (0 for a uniform distribution, larger when peaked). Given only the
    top-k log-probabilities, the missing probability mass is spread evenly over the other
    ``vocab_size - k`` tokens (or, without ``vocab_size``, the k tokens are treated as the whole
    distribution after renormalising) — an approximation the docs state.
    """
    if not top_logprobs:
        raise ValueError("self_certainty needs at least one token's log-probabilities")
    total = 0.0
    for row in top_logprobs:
        if not row:
            raise ValueError("self_certainty: a token has no log-probabilities")
        k = len(row)
        if vocab_size is None or vocab_size <= k:
            norm = math.log(sum(math.exp(x) for x in row))
            logs = [x - norm for x in row]
            total += -math.log(k) - sum(logs) / k
            continue
        rest = max(1.0 - sum(math.exp(x) for x in row), 1e-12)
        rest_log = math.log(rest / (vocab_size - k))
        mean_log = (sum(row) + (vocab_size - k) * rest_log) / vocab_size
        total += -math.log(vocab_size) - mean_log
    return total / len(top_logprobs)


def self_certainty_from_logits(logits: Any, mask: Any = None) -> Any:
    """Per-sequence self-certainty from full logits ``[B, T, V]`` (torch), averaged over ``mask``.

    For a trainer that already holds the logits of its completions: exact, no top-k approximation.
    """
    import torch

    logprobs = torch.log_softmax(logits.float(), dim=-1)
    per_token = -math.log(logits.shape[-1]) - logprobs.mean(dim=-1)
    if mask is None:
        return per_token.mean(dim=-1)
    mask = mask.to(per_token.dtype)
    return (per_token * mask).sum(dim=-1) / mask.sum(dim=-1).clamp(min=1)


@register_reward("self_certainty")
def self_certainty_reward(
    completion: str,
    example: Example,
    *,
    vocab_size: int | None = None,
    token_self_certainty: list[float] | None = None,
    top_logprobs: list[list[float]] | None = None,
) -> float:
    """The policy's self-certainty on this completion: the mean over its tokens of KL(uniform ‖ p).

    In training and evaluation the engine computes each token's exact value from the full next-token
    distribution while it samples (``token_self_certainty``; rlvr asks for it whenever a reward takes
    it). Given only ``top_logprobs`` (an engine that returns top-k), :func:`self_certainty`
    approximates it. Use it with a group-normalising advantage (GRPO), as Intuitor does, since its
    scale depends on the vocabulary. Multi-turn episodes carry no per-token values: an error there.
    """
    if token_self_certainty is not None:
        if not token_self_certainty:
            raise ValueError("self_certainty: the completion has no tokens")
        return sum(token_self_certainty) / len(token_self_certainty)
    if top_logprobs is None:
        raise ValueError(
            "self_certainty needs token_self_certainty= (per-token values from the engine, single-turn "
            "completions) or top_logprobs= (per-token top-k logprobs)"
        )
    return self_certainty(top_logprobs, vocab_size)


@register_reward("confidence")
def confidence_reward(
    completion: str,
    example: Example,
    *,
    kind: Literal["mean_logprob", "mean_prob"] = "mean_prob",
    token_logprobs: list[float] | None = None,
) -> float:
    """Confidence from the sampled tokens' log-probabilities: their mean, or its exponential.

    ``mean_prob`` (the geometric-mean token probability, in (0, 1]) is bounded and comparable
    across lengths; ``mean_logprob`` is its log.
    """
    if token_logprobs is None:
        raise ValueError("confidence needs token_logprobs= (sampled-token logprobs) from the trainer")
    if not token_logprobs:
        raise ValueError("confidence: the completion has no tokens")
    mean = sum(token_logprobs) / len(token_logprobs)
    return math.exp(mean) if kind == "mean_prob" else mean
