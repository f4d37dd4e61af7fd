"""Sampling metrics over n completions per problem: pass@k, mean@k, maj@k.

Pure functions of counts and lists, so evaluation, training logs and reports compute them the
same way and tests can check them against hand-computed values.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased estimate of pass@k from ``n`` samples of which ``c`` are correct.

    Chen et al. (2021): ``1 - C(n-c, k) / C(n, k)``, the chance that k samples drawn without
    replacement from the n include a correct one. Computed as the product
    ``1 - prod_{i=n-c+1..n} (1 - k/i)``: binomials overflow floats for large n, the product does
    not. Using all n samples gives lower variance than scoring only the first k.
    """
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")
    if not 0 <= c <= n:
        raise ValueError(f"need 0 <= c <= n, got n={n}, c={c}")
    if k > n:
        raise ValueError(f"pass@{k} needs at least {k} samples per problem, got n={n}")
    if n - c < k:  # every size-k draw must contain a correct sample
        return 1.0
    miss = 1.0
    for i in range(n - c + 1, n + 1):
        miss *= 1.0 - k / i
    return 1.0 - miss


def mean_at_k(scores: Sequence[float]) -> float:
    """Mean score of the k samples of one problem (the expected score of one sample)."""
    if len(scores) == 0:
        raise ValueError("mean@k of no samples is undefined")
    return float(sum(scores)) / len(scores)


def maj_at_k(answers: Sequence[str | None], correct: Sequence[bool]) -> float:
    """1.0 if the most common answer is correct, else 0.0 (self-consistency / majority vote).

    ``answers`` are the extracted, normalized answers (``None`` where none could be extracted;
    those do not vote). The winner's correctness is that of its first sample: samples with the
    same answer text are expected to score the same. Ties go to the tied answer that appears
    first in ``answers``, so the result does not depend on hash order and is reproducible.
    Returns 0.0 when no sample has an answer.
    """
    if len(answers) != len(correct):
        raise ValueError(f"answers and correct differ in length: {len(answers)} vs {len(correct)}")
    counts: dict[str, int] = {}
    first_index: dict[str, int] = {}
    for i, answer in enumerate(answers):
        if answer is None:
            continue
        counts[answer] = counts.get(answer, 0) + 1
        first_index.setdefault(answer, i)
    if not counts:
        return 0.0
    # dicts keep insertion order and max() returns the first maximum: ties go to the earliest.
    winner = max(counts, key=counts.__getitem__)
    return 1.0 if correct[first_index[winner]] else 0.0


def aggregate_pass_at_k(per_problem: Iterable[tuple[int, int]], ks: Iterable[int]) -> dict[str, float]:
    """Mean pass@k over problems, as ``{"pass@1": ..., "pass@8": ...}``.

    ``per_problem`` holds ``(n, c)`` per problem. A k larger than some problem's n is an error
    (not silently skipped), so a reported pass@k always covers every problem.
    """
    problems = list(per_problem)
    if not problems:
        raise ValueError("aggregate_pass_at_k needs at least one problem")
    result: dict[str, float] = {}
    for k in ks:
        result[f"pass@{k}"] = sum(pass_at_k(n, c, k) for n, c in problems) / len(problems)
    return result
