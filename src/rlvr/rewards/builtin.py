"""The reward functions that ship with rlvr.

Each one is a plain function registered by name. Heavy verifiers (reasoning-gym, math-verify) are
imported lazily so that ``import rlvr.rewards`` stays cheap in the trainer; the ``preload`` given
to :func:`register_reward` makes worker processes import them before they accept work.

Parameter annotations are part of the contract: :class:`~rlvr.rewards.pool.RewardSpec` validates
user params against them when a config is loaded, so a typo'd mode fails at start-up, not as a
reward error on every call.

A reward that cannot judge (no reference, an unparsable reference, missing token counts) raises:
the pool reports that as a reward error instead of a silent 0.0.
"""

from __future__ import annotations

import functools
import inspect
import math
from collections.abc import Callable
from fractions import Fraction
from typing import Annotated, Any, Literal

from annotated_types import Ge, Gt

from rlvr.data.example import Example
from rlvr.rewards.extract import ExtractMode, choice_letter, exact_number, extract_answer, normalize_answer
from rlvr.rewards.math_equiv import ReferenceUnparsable, math_equivalent
from rlvr.rewards.registry import register_reward
from rlvr.rewards.routing import check_routes, config_listed, routed_reward
from rlvr.rewards.spec import POOL_KWARGS


@register_reward("reasoning_gym", preload=("reasoning_gym",))
def reasoning_gym_reward(completion: str, example: Example, *, extract: ExtractMode = "answer_tag") -> float:
    """Score with reasoning-gym's own ``score_answer`` for the task the entry came from.

    ``example.metadata["rg_entry"]`` must hold the full reasoning-gym entry (question, answer,
    metadata with ``source_dataset``). No extractable answer scores 0.0: the model failed to answer.
    """
    entry = example.metadata.get("rg_entry")
    if not isinstance(entry, dict):
        raise ValueError(f"example {example.id!r} has no metadata['rg_entry'] (a reasoning-gym entry dict)")
    task = entry.get("metadata", {}).get("source_dataset")
    if not task:
        raise ValueError(f"example {example.id!r}: rg_entry['metadata'] has no 'source_dataset'")
    answer = extract_answer(completion, mode=extract)
    if answer is None:
        return 0.0
    return float(_rg_score_fn(task)(answer, entry))


@functools.cache
def _rg_score_fn(task: str) -> Callable[[str | None, dict[str, Any]], float]:
    # Building the score fn instantiates the task's dataset class: do it once per task per worker.
    import reasoning_gym

    return reasoning_gym.get_score_answer_fn(task)


@register_reward("math", preload=("math_verify",))
def math_reward(
    completion: str,
    example: Example,
    *,
    extract: ExtractMode = "auto",
    max_answer_chars: Annotated[int, Gt(0)] = 2000,
    tolerance: Annotated[float, Ge(0)] | None = None,
) -> float:
    """1.0 if the extracted answer is mathematically equivalent to ``example.reference`` (math-verify).

    Equivalence covers integers, decimals, fractions, percentages ("50%" = 0.5), scientific
    notation, units in ``\\text{}``, intervals (and solved inequalities for them), sets, tuples,
    matrices, LaTeX or plain text, and symbolic expressions; :mod:`rlvr.rewards.math_equiv` says
    where rlvr corrects math-verify.

    Numbers are compared exactly when the reference states them exactly ("0.5" = "1/2" = ".50",
    but "0.5000001" scores 0 for "0.5"); a reference no decimal can state ("1/3", "\\sqrt{2}")
    accepts a decimal to 6 significant figures. ``tolerance`` (off by default) also accepts a
    number within ``tolerance × |reference|`` of a single-number reference.

    math-verify's own timeouts use ``signal.alarm``, which fails outside the main thread and
    silently returned 0 in other frameworks; they are switched off here because the pool enforces
    a hard wall-clock limit on every call. An answer of more than ``max_answer_chars`` characters
    is an error at once rather than a parse that would run into that limit.
    """
    if example.reference is None:
        raise ValueError(f"example {example.id!r} has no reference answer for the math reward")
    answer = extract_answer(completion, mode=extract)
    if answer is None:
        return 0.0
    if len(answer) > max_answer_chars:
        raise ValueError(f"answer of {len(answer)} characters exceeds max_answer_chars={max_answer_chars}")
    try:
        return 1.0 if math_equivalent(example.reference, answer, tolerance) else 0.0
    except ReferenceUnparsable as error:
        raise ValueError(f"{error} of {example.id!r}") from None


@register_reward("exact_match")
def exact_match_reward(
    completion: str,
    example: Example,
    *,
    extract: ExtractMode = "auto",
    case_sensitive: bool = True,
    normalize: Literal["strip", "squad"] = "strip",
) -> float:
    """1.0 if the extracted answer equals ``example.reference`` after stripping whitespace.

    ``normalize="squad"`` compares both after SQuAD / Search-R1 normalization instead (lower case,
    punctuation and articles removed, whitespace collapsed: :func:`normalize_answer`), which makes
    ``case_sensitive`` moot; an answer that normalizes to nothing scores 0.0.
    """
    if example.reference is None:
        raise ValueError(f"example {example.id!r} has no reference answer for exact_match")
    answer = extract_answer(completion, mode=extract)
    if answer is None:
        return 0.0
    if normalize == "squad":
        normalized = normalize_answer(answer)
        return 1.0 if normalized and normalized == normalize_answer(example.reference) else 0.0
    reference = example.reference.strip()
    if not case_sensitive:
        answer, reference = answer.casefold(), reference.casefold()
    return 1.0 if answer == reference else 0.0


def _reference_number(example: Example) -> Fraction:
    reference = exact_number(example.reference) if example.reference is not None else None
    if reference is None:
        raise ValueError(
            f"needs numeric reference answers, but example {example.id!r} has {example.reference!r}; "
            "remove this component for a task whose answers are not numbers"
        )
    return reference


def _numeric_references(params: dict[str, Any], examples: list[Example]) -> None:
    for example in examples:
        _reference_number(example)


@register_reward("numeric_closeness", check_examples=_numeric_references)
def numeric_closeness_reward(
    completion: str,
    example: Example,
    *,
    extract: ExtractMode = "answer_tag",
    tolerance: Annotated[float, Gt(0)] = 1.0,
) -> float:
    """Partial credit for a number by its distance to the reference, relative to the reference's size:
    ``max(0, 1 - |answer - reference| / (tolerance * max(|reference|, 1)))``.

    1.0 only when exact; a wrong sign, no answer or a non-number scores 0.0. Within an all-wrong
    group it still ranks "-10" above "-1" for a reference of -12, a signal that exact-match rewards
    lack. Numbers are read exactly from their digits (:func:`~rlvr.rewards.extract.exact_number`):
    "1/2" and ".50" are exactly 0.5, and "0.5000000000000000001" is not (through a float it was).
    """
    reference = _reference_number(example)
    answer = extract_answer(completion, mode=extract)
    value = exact_number(answer) if answer is not None else None
    if value is None:
        return 0.0
    if value == reference:
        return 1.0
    score = 1 - abs(value - reference) / (Fraction(tolerance) * max(abs(reference), 1))
    return 0.0 if score <= 0 else min(float(score), _BELOW_ONE)


_BELOW_ONE = math.nextafter(1.0, 0.0)  # a score that is not exact stays below 1.0 as a float too


@register_reward("choice")
def choice_reward(completion: str, example: Example) -> float:
    """1.0 if the multiple-choice letter in the completion is the reference's ("B", "(B)", "B) 42").

    The letter is read as :func:`extract_answer` mode ``choice`` reads it ("(B)", "Answer: C",
    ``\\boxed{D}``); no letter scores 0.0.
    """
    if example.reference is None:
        raise ValueError(f"example {example.id!r} has no reference letter for the choice reward")
    gold = choice_letter(example.reference)
    if gold is None:
        raise ValueError(f"reference {example.reference!r} of {example.id!r} is not an option letter")
    return 1.0 if extract_answer(completion, mode="choice") == gold else 0.0


@register_reward("format")
def format_reward(completion: str, example: Example, *, require_think: bool = False) -> float:
    """1.0 if the completion has exactly one non-empty ``<answer>...</answer>``.

    With ``require_think`` a ``<think>...</think>`` must also close before the answer opens.
    Tags are matched case-sensitively: the prompt asks for these exact tags.
    """
    if completion.count("<answer>") != 1 or completion.count("</answer>") != 1:
        return 0.0
    open_at = completion.index("<answer>")
    close_at = completion.index("</answer>")
    if close_at < open_at or not completion[open_at + len("<answer>") : close_at].strip():
        return 0.0
    if require_think:
        think_open = completion.find("<think>")
        think_close = completion.find("</think>", think_open + 1) if think_open >= 0 else -1
        if think_open < 0 or think_close < 0 or think_close > open_at:
            return 0.0
    return 1.0


@register_reward("length_penalty", follows={"max_tokens": "rollout.max_new_tokens"})
def length_penalty_reward(
    completion: str,
    example: Example,
    *,
    max_tokens: Annotated[int, Gt(0)],
    coef: float = 1.0,
    completion_tokens: int | None = None,
) -> float:
    """``-coef * completion_tokens / max_tokens``: a linear push towards shorter answers."""
    return -coef * _require_tokens("length_penalty", completion_tokens) / max_tokens


def _buffer_fits(params: dict[str, Any]) -> None:
    buffer, max_tokens = params.get("buffer"), params.get("max_tokens")
    if isinstance(buffer, int) and isinstance(max_tokens, int) and buffer > max_tokens:
        raise ValueError(f"buffer={buffer} must not exceed max_tokens={max_tokens}")


@register_reward("overlong", check=_buffer_fits, follows={"max_tokens": "rollout.max_new_tokens"})
def overlong_reward(
    completion: str,
    example: Example,
    *,
    max_tokens: Annotated[int, Gt(0)],
    buffer: Annotated[int, Ge(0)],
    completion_tokens: int | None = None,
    finish_reason: str | None = None,
) -> float:
    """DAPO's soft overlong punishment.

    0 up to ``max_tokens - buffer`` tokens, then linearly down to -1 at ``max_tokens``; -1 beyond
    it, and -1 whenever generation was cut off (``finish_reason == "length"``), because a truncated
    answer is overlong however few tokens were counted.
    """
    if buffer > max_tokens:
        raise ValueError(f"overlong: buffer ({buffer}) must not exceed max_tokens ({max_tokens})")
    if finish_reason == "length":
        return -1.0
    tokens = _require_tokens("overlong", completion_tokens)
    soft_start = max_tokens - buffer
    if tokens <= soft_start:
        return 0.0
    if tokens >= max_tokens:
        return -1.0
    return (soft_start - tokens) / buffer


def _require_tokens(reward: str, completion_tokens: int | None) -> int:
    if completion_tokens is None:
        raise ValueError(f"{reward} needs token counts: pass completion_tokens= to RewardPool.score")
    return completion_tokens


@register_reward("verifier", check_examples=check_routes)
def verifier_reward(
    completion: str,
    example: Example,
    *,
    default: str | None = None,
    reward_params: dict[str, dict[str, Any]] | None = None,
    completion_tokens: int | None = None,
    finish_reason: str | None = None,
    token_logprobs: list[float] | None = None,
    top_logprobs: list[list[float]] | None = None,
    token_self_certainty: list[float] | None = None,
) -> float | dict[str, float]:
    """Route each example to the reward its ``example.verifier`` names (``default`` if it names none).

    For datasets that mix sources (reasoning-gym tasks next to math problems): one spec scores them
    all. ``reward_params`` maps a reward name to the keyword arguments it gets, e.g.
    ``{"math": {"extract": "boxed"}}``. A data row names a registered reward; an import path only
    when this spec lists it (``default`` or a ``reward_params`` key): the column is untrusted.
    """
    listed = config_listed({"default": default, "reward_params": reward_params})
    name, fn = routed_reward(example, default, listed)  # a row's import path is refused (routing.py)
    kwargs = dict((reward_params or {}).get(name, {}))
    supplied = {
        "completion_tokens": completion_tokens,
        "finish_reason": finish_reason,
        "token_logprobs": token_logprobs,
        "top_logprobs": top_logprobs,
        "token_self_certainty": token_self_certainty,
    }
    kwargs.update({key: supplied[key] for key in _pool_kwargs_accepted(fn)})
    return fn(completion, example, **kwargs)


@register_reward("environment")
def environment_reward(completion: str, example: Example) -> float:
    """0.0 for an example its environment scores alone (a game: its turn rewards are the reward).

    For a dataset that mixes episodes with single-turn problems, where the run's rewards must
    score both: the ``verifier`` reward routes each single-turn problem to its verifier and each
    game example (``verifier="environment"``, as the game generators write it) here, so the episode's
    total is its environment's turn rewards. An example that plays out in no environment
    (``metadata.env``) is an error, not a silent 0.
    """
    if not example.metadata.get("env"):
        raise ValueError(
            f"example {example.id!r} is scored by 'environment' but names no environment (metadata.env)"
        )
    return 0.0


@functools.lru_cache(maxsize=256)
def _pool_kwargs_accepted(fn: Callable[..., Any]) -> frozenset[str]:
    parameters = inspect.signature(fn).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        return frozenset(POOL_KWARGS)
    return frozenset(parameters) & set(POOL_KWARGS)
