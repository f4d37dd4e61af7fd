"""Step rewards of one response: a reward returns one number per step, placed on the step's last token.

A reward function may return a dict with ``steps``: one reward for each step of the text it scored
(the final model turn), the text split at ``rewards.step_separator`` (default a blank line). The
collector checks the count (a wrong count is that reward's error, never a silent misplacement),
weights each reward's steps like its score, and records on the trajectory where every step ends:
``step_rewards`` and ``step_ends`` (token positions in the response ledger). The learner puts each
step's reward on that token (``rlvr.train.learn.turns.step_token_rewards``).

A step's last token is the first token whose decoded prefix reaches the end of the step's own text
(its separator left out: a tokenizer often merges a separator into the next word's token); it is
found by bisection, a few decodes per step. The last step ends on the turn's last token, as the
sequence reward does.
"""

from __future__ import annotations

from typing import Any

from rlvr.trajectory import SAMPLED, Trajectory


def step_texts(text: str, separator: str) -> list[str]:
    """The steps of ``text``: split at ``separator``, each but the last keeping it at its end."""
    parts = text.split(separator)
    return [p + separator for p in parts[:-1]] + [parts[-1]]


def _last_turn(t: Trajectory) -> tuple[int, list[int]]:
    """Where the final sampled segment starts in the response ledger, and its tokens."""
    at, start, ids = 0, 0, []
    for segment in t.segments:
        if segment.kind == SAMPLED:
            start, ids = at, segment.token_ids
        at += len(segment.token_ids)
    return start, ids


def step_end_positions(t: Trajectory, tokenizer: Any, separator: str) -> list[int]:
    """The response-ledger position of each step's last token (see the module docstring)."""
    start, ids = _last_turn(t)
    steps = step_texts(t.text, separator)
    if not ids:
        return []
    ends, lo = [], 1
    done = 0  # characters of the earlier steps, separators included
    for step in steps[:-1]:
        reached = done + len(step) - len(separator)  # this step's own text, without its separator
        done += len(step)
        hi = len(ids)
        while lo < hi:  # the fewest tokens whose decoded text reaches `reached` characters
            mid = (lo + hi) // 2
            if len(tokenizer.decode(ids[:mid], skip_special_tokens=True)) >= reached:
                hi = mid
            else:
                lo = mid + 1
        ends.append(start + lo - 1)
    ends.append(start + len(ids) - 1)
    return ends


def apply_step_rewards(
    t: Trajectory, steps: dict[str, list[float]], weights: dict[str, float], tokenizer: Any, separator: str
) -> None:
    """Check each reward's step count against ``t.text``, then set ``t.step_rewards`` (weighted sum)
    and ``t.step_ends``; a reward with the wrong count becomes an error of ``t`` instead."""
    count = len(step_texts(t.text, separator))
    total = [0.0] * count
    for label, values in steps.items():
        if len(values) != count:
            t.errors[label] = (
                f"ValueError: reward {label!r} returned {len(values)} step rewards for a response of "
                f"{count} steps (split at rewards.step_separator={separator!r})"
            )
            continue
        for k, value in enumerate(values):
            total[k] += weights[label] * value
    if t.errors:
        return
    t.step_rewards, t.step_ends = total, step_end_positions(t, tokenizer, separator)
