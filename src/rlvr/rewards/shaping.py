"""Shaping rewards: the structure of a reasoning trace, repetition, and correctness-aware length.

These add to a correctness reward; none of them says whether an answer is right (except
``cosine_length``, which asks a correctness reward and then shapes by length). Pair a bonus with a
``gate`` in its :class:`~rlvr.rewards.RewardSpec` when it should only pay for correct answers.
"""

from __future__ import annotations

import math
import re
from typing import Annotated, Any

from annotated_types import Ge, Gt, Le

from rlvr.data.example import Example
from rlvr.rewards.registry import get_reward, register_reward
from rlvr.rewards.results import scalar

_WORD = re.compile(r"\S+")
_THINK_ANSWER = ("<think>", "</think>", "<answer>", "</answer>")


@register_reward("think_format")
def think_format_reward(completion: str, example: Example, *, prefilled_think: bool = False) -> float:
    """1.0 for exactly ``<think>…</think>`` then ``<answer>…</answer>`` and nothing else around them.

    The strict R1-Zero structure: each tag once, in order, both parts non-empty, only whitespace
    between and around them. ``prefilled_think``: the prompt already ended with ``<think>``, so the
    completion starts inside the thinking part. (The looser ``format`` reward with
    ``require_think=True`` allows text before and after.)
    """
    text = ("<think>" + completion) if prefilled_think else completion
    if any(text.count(tag) != 1 for tag in _THINK_ANSWER):
        return 0.0
    positions = [text.index(tag) for tag in _THINK_ANSWER]
    if positions != sorted(positions):
        return 0.0
    open_think, close_think, open_answer, close_answer = positions
    between = text[close_think + len("</think>") : open_answer]
    outside = text[:open_think] + between + text[close_answer + len("</answer>") :]
    think = text[open_think + len("<think>") : close_think]
    answer = text[open_answer + len("<answer>") : close_answer]
    return 1.0 if not outside.strip() and think.strip() and answer.strip() else 0.0


@register_reward("repetition_penalty")
def repetition_penalty_reward(
    completion: str,
    example: Example,
    *,
    ngram: Annotated[int, Ge(1)] = 3,
    max_penalty: Annotated[float, Le(0)] = -1.0,
) -> float:
    """``max_penalty × (1 − distinct n-grams / n-grams)`` over words: 0 for no repetition.

    A run-away loop repeating one sentence approaches ``max_penalty``. Words are whitespace-separated
    tokens, lower-cased; a completion shorter than ``ngram`` words scores 0.
    """
    words = [w.lower() for w in _WORD.findall(completion)]
    total = len(words) - ngram + 1
    if total <= 0:
        return 0.0
    distinct = len({tuple(words[i : i + ngram]) for i in range(total)})
    return max_penalty * (1.0 - distinct / total)


@register_reward("cosine_length", follows={"max_tokens": "rollout.max_new_tokens"})
def cosine_length_reward(
    completion: str,
    example: Example,
    *,
    max_tokens: Annotated[int, Gt(0)],
    correct_reward: str = "math",
    correct_params: dict[str, Any] | None = None,
    correct_min: float = 1.0,
    correct_short: float = 1.0,
    correct_long: float = 0.5,
    wrong_short: float = -1.0,
    wrong_long: float = -0.5,
    exceed: float = -1.0,
    completion_tokens: int | None = None,
    finish_reason: str | None = None,
) -> float:
    """Cosine-scaled length reward (Yeo et al. 2025, "Demystifying Long Chain-of-Thought Reasoning").

    A correct answer (``correct_reward`` ≥ ``correct_min``) earns ``correct_short`` at length 0,
    falling along a half cosine to ``correct_long`` at ``max_tokens``; a wrong one goes from
    ``wrong_short`` up to ``wrong_long``. So among correct answers shorter is better and among
    wrong ones longer is better (keep thinking rather than guess). A truncated generation
    (``finish_reason == "length"``) or one past ``max_tokens`` scores ``exceed``. Use it instead of
    the plain correctness reward, not next to it.
    """
    if completion_tokens is None:
        raise ValueError("cosine_length needs token counts: pass completion_tokens= to RewardPool.score")
    if finish_reason == "length" or completion_tokens > max_tokens:
        return exceed
    value = get_reward(correct_reward)(completion, example, **(correct_params or {}))
    if isinstance(value, dict):
        value = scalar(value)
    start, end = (correct_short, correct_long) if value >= correct_min else (wrong_short, wrong_long)
    progress = completion_tokens / max_tokens
    return end + 0.5 * (start - end) * (1.0 + math.cos(progress * math.pi))
