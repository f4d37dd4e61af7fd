"""GRPO-CARE's consistency bonus (seeds 001:183): correct answers that follow from their reasoning.

The abstract: outcome-only GRPO raises accuracy but lowers the coherence between a response's
reasoning and its answer. GRPO-CARE adds "an adaptive consistency bonus, computed by comparing the
model's reasoning-to-answer likelihood (via a slowly-evolving reference model) against group peers",
given to answers that are correct, and replaces the KL penalty with it.

Here:

- **Answer span.** The tokens after the last ``marker`` (default ``<answer>``) of the completion's
  text, which is rebuilt from the sampled ``token_ids`` with a table of each vocabulary id's text
  (:func:`rlvr.algo.hicra.vocabulary_pieces`, built once per tokenizer and process).
- **Consistency** ``c_i``: the mean log-probability of the answer span under the reference model,
  given the prompt and the completion's own reasoning before it (``reference_logprobs``, which the
  trainer computes only for an estimator that names it). With ``algo.reference.update: ema`` the
  reference is the slowly-evolving one the abstract names.
- **Bonus.** A correct completion (reward ≥ ``success_threshold``) whose consistency exceeds the
  mean consistency of its group's peers (every other completion of the prompt with an answer span)
  earns ``coef``; the bonus is "adaptive" in that it is relative to the group, not a fixed
  likelihood level. A completion without an answer span has no consistency and earns nothing.
- **Advantage.** GRPO's group normalisation of ``reward + bonus``.

The abstract gives no formula for the bonus; comparing with the peers' mean and paying a fixed
``coef`` is rlvr's reading.
"""

from __future__ import annotations

import bisect
import functools
from collections.abc import Sequence

import torch

from rlvr.algo.advantages import ADVANTAGE_ESTIMATORS, grpo_advantages


class AnswerSpans:
    """Finds the tokens after the last ``marker`` in token-id rows, from a table of each id's text."""

    def __init__(self, pieces: Sequence[str], marker: str = "<answer>") -> None:
        if not isinstance(marker, str) or not marker:
            raise ValueError(f"grpo_care: marker must be a non-empty string, got {marker!r}")
        self.pieces, self.marker = list(pieces), marker

    def row(self, ids: Sequence[int]) -> list[bool]:
        """Whether each token of one row lies wholly after the last marker (all False without one)."""
        texts = [self.pieces[i] if 0 <= i < len(self.pieces) else "" for i in ids]
        starts, total = [], 0
        for text in texts:
            starts.append(total)
            total += len(text)
        at = "".join(texts).rfind(self.marker)
        if at < 0:
            return [False] * len(texts)
        first = bisect.bisect_left(starts, at + len(self.marker))
        return [j >= first and texts[j] != "" for j in range(len(texts))]

    def mask(self, token_ids: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """[N, T] bool: each row's answer tokens among its first ``lengths[i]`` tokens."""
        rows = [
            self.row(ids[:n]) + [False] * (len(ids) - n)
            for ids, n in zip(token_ids.tolist(), (int(x) for x in lengths.tolist()))
        ]
        return torch.tensor(rows, dtype=torch.bool).reshape(token_ids.shape)


@functools.lru_cache(maxsize=4)
def answer_spans(tokenizer: str, marker: str) -> AnswerSpans:
    """The span finder for a tokenizer (its vocabulary table built once per process and name)."""
    from rlvr.algo.hicra import vocabulary_pieces
    from rlvr.models.loading import load_tokenizer

    AnswerSpans([], marker)  # a bad marker fails before the tokenizer loads
    return AnswerSpans(vocabulary_pieces(load_tokenizer(tokenizer)), marker)


def consistency(reference_logprobs: torch.Tensor, answer: torch.Tensor) -> torch.Tensor:
    """[N] mean reference log-prob over each row's answer tokens; NaN for a row without any."""
    count = answer.sum(dim=1)
    total = torch.where(answer, reference_logprobs, torch.zeros_like(reference_logprobs)).sum(dim=1)
    return torch.where(count > 0, total / count.clamp(min=1), torch.full_like(total, float("nan")))


def consistency_bonus(
    rewards: torch.Tensor,
    group_index: torch.Tensor,
    scores: torch.Tensor,
    coef: float,
    success_threshold: float,
) -> torch.Tensor:
    """[N] ``coef`` for each correct row whose consistency beats the mean of its group's other rows
    that have one; 0 otherwise (no consistency, no peers, or not correct)."""
    bonus = torch.zeros_like(rewards)
    for g in group_index.unique().tolist():
        rows = (group_index == g).nonzero().flatten().tolist()
        for i in rows:
            peers = [scores[j] for j in rows if j != i and not torch.isnan(scores[j])]
            if rewards[i] >= success_threshold and not torch.isnan(scores[i]) and peers:
                bonus[i] = coef if scores[i] > torch.stack(peers).mean() else 0.0
    return bonus


@ADVANTAGE_ESTIMATORS.register("grpo_care")
def grpo_care_advantages(
    rewards: torch.Tensor,
    group_index: torch.Tensor,
    token_ids: torch.Tensor,
    lengths: torch.Tensor,
    reference_logprobs: torch.Tensor,
    tokenizer: str,
    marker: str = "<answer>",
    coef: float = 0.5,
    success_threshold: float = 0.5,
    normalize_std: bool = True,
    eps: float = 1e-6,
) -> torch.Tensor:
    """GRPO-CARE (seeds 001:183): GRPO of ``reward + consistency bonus`` (module docstring)."""
    if coef < 0:
        raise ValueError(f"grpo_care: coef must be >= 0, got {coef}")
    answer = answer_spans(tokenizer, marker).mask(token_ids, lengths)
    scores = consistency(reference_logprobs.to(rewards.dtype), answer)
    bonus = consistency_bonus(rewards, group_index, scores, coef, success_threshold)
    return grpo_advantages(rewards + bonus, group_index, normalize_std, eps)
