"""Test-time scaling over a problem's N sampled completions: best-of-N and weighted majority vote.

Pure functions of per-sample facts (:class:`Sample`: the extracted answer, whether the eval reward
graded it correct, its score, its mean token log-probability, a reward model's score), so the
evaluation, the benchmark and the tests compute them the same way.

- **best-of-N** (:func:`select_best`): one of the first N samples is chosen by a selector and the
  problem counts when the chosen one is correct. ``verifier`` picks by the eval reward's own score:
  an oracle (it reads the reference answer), so for a 0/1 grader it is "any of the first N is
  correct", the same quantity pass@N estimates (``eval/pass@N`` averages it over every N-subset of
  the samples; the two agree in expectation and exactly when N = ``eval.samples``). ``reward_model``
  picks by a trained reward model's score, ``logprob`` by the policy's mean token log-probability
  (its confidence; no reference needed).
- **weighted vote** (:func:`weighted_vote`): samples with the same normalised answer
  (:func:`answer_key`) pool their weights and the heaviest answer wins: weight 1 (``none``, plain
  majority vote, maj@N, seeds/004:26 and seeds/003:105 use it as a label), ``exp(mean token
  logprob)`` (``logprob``) or ``exp(reward-model score)`` (``reward_model``: a softmax over the
  problem's samples, so a logit's offset does not matter).

Ties are broken the same way everywhere: among equal keys or equal totals, the sample (or the answer)
seen first in sampling order wins. A sample without the key (no answer, an empty completion, an
unscored sample) never outranks one with it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rlvr.errors import RlvrError
from rlvr.rewards.extract import exact_number, extract_answer

if TYPE_CHECKING:
    from rlvr.eval.self_verify import SelfVerify

CORRECT_AT = 1.0 - 1e-6  # a completion is "correct" when its eval score reaches 1

SELECTORS: tuple[str, ...] = ("verifier", "reward_model", "logprob")
VOTE_WEIGHTS: tuple[str, ...] = ("none", "logprob", "reward_model")

# \frac{3}{4}, \dfrac{-1}{2}, \tfrac{10}{3}: read as the number a/b
_LATEX_FRACTION = re.compile(r"^\\[dt]?frac\{\s*(-?\d+)\s*\}\{\s*(\d+)\s*\}$")


@dataclass(frozen=True)
class ScalingPlan:
    """What the evaluation adds beside pass@k / mean@k / maj@k (``eval.best_of`` and friends):
    best-of-N and weighted votes over the first N samples for each N of ``best_of``, the reward
    model they may use, and self-verification of the greedy answers (``verify``; None: off)."""

    best_of: tuple[int, ...] = ()
    select_by: tuple[str, ...] = ("verifier", "logprob")
    vote_weight: tuple[str, ...] = ("none", "logprob")
    reward_model: str | None = None
    verify: SelfVerify | None = None

    @property
    def needs_reward_model(self) -> bool:
        return bool(self.best_of) and ("reward_model" in self.select_by or "reward_model" in self.vote_weight)


def answer_key(answer: str | None) -> str | None:
    """The normalised form answers are grouped by: a number by its exact value (``"17"``,
    ``"17.0"``, ``"1.7e1"``, ``"34/2"`` and ``"\\frac{34}{2}"`` are all ``"17"``; read from the
    digits, never through a float, so two large integers that round to the same float stay apart),
    anything else by its whitespace-collapsed casefold. ``None`` stays ``None`` (does not vote)."""
    if answer is None:
        return None
    text = answer.strip().strip("$").strip()
    fraction = _LATEX_FRACTION.match(text)
    if fraction is not None:
        text = f"{fraction.group(1)}/{fraction.group(2)}"
    number = exact_number(text.rstrip("."))
    if number is not None:
        return str(number)
    return " ".join(answer.split()).casefold()


def vote_key(text: str) -> str | None:
    """The answer a completion votes for: its answer wherever written (as the lenient eval reads
    it, :func:`rlvr.rewards.extract.extract_answer` ``auto``), normalised by :func:`answer_key`."""
    return answer_key(extract_answer(text, "auto"))


def mean_logprob(logprobs: Sequence[float]) -> float | None:
    """Mean token log-probability of a completion; ``None`` for an empty one."""
    return sum(logprobs) / len(logprobs) if len(logprobs) else None


@dataclass(frozen=True)
class Sample:
    """What test-time scaling needs to know about one sampled completion."""

    answer: str | None  # answer_key of its answer; None: none extracted
    correct: bool  # graded correct by the eval reward
    score: float | None = None  # the eval reward's score; None: no verdict
    logprob: float | None = None  # mean token logprob; None: empty completion
    rm: float | None = None  # reward-model score; None: not scored


def _key(sample: Sample, by: str) -> float | None:
    if by == "verifier":
        return sample.score
    if by == "reward_model":
        return sample.rm
    if by == "logprob":
        return sample.logprob
    raise RlvrError(f"eval.select_by: unknown selector {by!r}; allowed: {', '.join(SELECTORS)}")


def select_best(samples: Sequence[Sample], by: str) -> int:
    """Index of the sample with the highest ``by`` key (verifier score, reward-model score or mean
    logprob). Ties go to the earliest sample; samples without the key rank below every sample with
    it (all without: the first sample)."""
    if not samples:
        raise ValueError("best-of-N of no samples is undefined")
    best, best_key = 0, _key(samples[0], by)
    for i, sample in enumerate(samples[1:], start=1):
        key = _key(sample, by)
        if key is not None and (best_key is None or key > best_key):  # strict: ties keep the earlier
            best, best_key = i, key
    return best


def vote_weights(samples: Sequence[Sample], weight: str) -> list[float]:
    """Each sample's weight in a vote: 1 (``none``), ``exp(mean logprob)`` (``logprob``) or
    ``exp(reward-model score)`` (``reward_model``); exponents are shifted by the problem's largest,
    which changes no winner and keeps them finite. A sample without the value weighs 0."""
    if weight == "none":
        return [1.0] * len(samples)
    if weight == "logprob":
        values = [s.logprob for s in samples]
    elif weight == "reward_model":
        values = [s.rm for s in samples]
    else:
        raise RlvrError(f"eval.vote_weight: unknown weight {weight!r}; allowed: {', '.join(VOTE_WEIGHTS)}")
    present = [v for v in values if v is not None]
    if not present:
        return [0.0] * len(samples)
    top = max(present)
    return [math.exp(v - top) if v is not None else 0.0 for v in values]


def weighted_vote(answers: Sequence[str | None], weights: Sequence[float]) -> int | None:
    """Index of the first sample of the answer with the largest total weight (``None`` answers do
    not vote); ``None`` when no sample has an answer. Equal totals go to the answer seen first."""
    if len(answers) != len(weights):
        raise ValueError(f"answers and weights differ in length: {len(answers)} vs {len(weights)}")
    totals: dict[str, float] = {}
    first: dict[str, int] = {}
    for i, (answer, w) in enumerate(zip(answers, weights)):
        if answer is None:
            continue
        totals[answer] = totals.get(answer, 0.0) + w
        first.setdefault(answer, i)
    if not totals:
        return None
    # dicts keep insertion (first-seen) order and max() returns the first maximum
    return first[max(totals, key=totals.__getitem__)]


def choose(
    samples: Sequence[Sample], ns: Sequence[int], select_by: Sequence[str], vote_weight: Sequence[str]
) -> dict[str, Any]:
    """One problem's choices among its first N samples for each N: ``{"best_of": {N: {selector:
    index}}, "vote": {N: {weight: index of the winning answer's first sample, or None}}}``."""
    best_of: dict[str, dict[str, int]] = {}
    votes: dict[str, dict[str, int | None]] = {}
    for n in ns:
        if n > len(samples):
            raise RlvrError(f"eval.best_of: N={n} needs eval.samples >= {n}, got {len(samples)} samples")
        first = samples[:n]
        best_of[str(n)] = {by: select_best(first, by) for by in select_by}
        answers = [s.answer for s in first]
        votes[str(n)] = {w: weighted_vote(answers, vote_weights(first, w)) for w in vote_weight}
    return {"best_of": best_of, "vote": votes}


def scaling_metrics(
    problems: Sequence[Sequence[Sample]],
    ns: Sequence[int],
    select_by: Sequence[str],
    vote_weight: Sequence[str],
) -> tuple[dict[str, float], list[dict[str, Any]]]:
    """``eval/best_of_<N>/<selector>`` and ``eval/vote_<N>/<weight>`` (fraction of problems whose
    chosen sample / winning answer is correct; a winning answer's correctness is that of its first
    sample; no answer at all counts as wrong), and each problem's :func:`choose` record."""
    if not problems:
        raise ValueError("test-time scaling needs at least one problem")
    records = [choose(samples, ns, select_by, vote_weight) for samples in problems]
    metrics: dict[str, float] = {}
    for n in ns:
        for by in select_by:
            right = sum(samples[r["best_of"][str(n)][by]].correct for samples, r in zip(problems, records))
            metrics[f"eval/best_of_{n}/{by}"] = right / len(problems)
        for w in vote_weight:
            winners = [(samples, r["vote"][str(n)][w]) for samples, r in zip(problems, records)]
            right = sum(i is not None and samples[i].correct for samples, i in winners)
            metrics[f"eval/vote_{n}/{w}"] = right / len(problems)
    return metrics, records


def reward_model_scores(path: str, examples: Sequence[Any], texts: Sequence[str]) -> list[float]:
    """A reward model's score of each completion (``eval.reward_model``), loaded and rendered as the
    ``reward_model`` reward does (:mod:`rlvr.rewards.reward_model`), on the CPU in this process
    (``threads=0``: torch's thread setting is left as the run set it)."""
    from rlvr.rewards.reward_model import load_reward_model, render, score_texts

    _, tokenizer = load_reward_model(path, "cpu", 0)
    rendered = [render(tokenizer, e, t) for e, t in zip(examples, texts, strict=True)]
    return score_texts(path, rendered, device="cpu", threads=0)
