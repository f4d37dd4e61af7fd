"""What a step reports about its sampled groups: reward metrics and samples.jsonl rows."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

from rlvr.data import Example
from rlvr.eval.evaluate import CORRECT_AT
from rlvr.eval.groups import group_of
from rlvr.trajectory import TRAINED, Trajectory, TrajectoryGroup


def reward_metrics(groups: list[TrajectoryGroup], correctness: str) -> dict[str, float]:
    """Mean reward (over trajectories scored without error), reward errors, accuracy (the
    ``correctness`` component), lengths, and the mean of every reward component."""
    trajectories = [t for g in groups for t in g.trajectories]
    n = max(len(trajectories), 1)
    totals = [t.reward for t in trajectories if not t.errors and t.reward is not None]
    metrics = {
        "reward/mean": sum(totals) / max(len(totals), 1),
        "reward/errors": float(sum(bool(t.errors) for t in trajectories)),
        "train/accuracy": sum(t.rewards.get(correctness, 0.0) >= CORRECT_AT for t in trajectories) / n,
        "completion/mean_length": sum(len(t) for t in trajectories) / n,
        "completion/truncated_rate": sum(t.finish_reason == "length" for t in trajectories) / n,
    }
    for name in dict.fromkeys(k for t in trajectories for k in t.rewards):  # first-seen order
        values = [t.rewards[name] for t in trajectories if name in t.rewards]
        metrics[f"reward/{name}"] = sum(values) / max(len(values), 1)
    return metrics


def conversation(t: Trajectory, decode: Callable[[list[int]], str]) -> list[dict[str, Any]]:
    """A multi-turn trajectory's response as it was played: each segment's text, token count and
    whether it was trained on (the model's turns) or only attended to (the environment's)."""
    return [
        {"trained": s.kind in TRAINED, "tokens": len(s.token_ids), "text": decode(s.token_ids)}
        for s in t.segments
    ]


def token_text(ids: Sequence[int], decode: Callable[[list[int]], str], window: int = 4) -> list[str]:
    """The text each token adds to the decoded response (their concatenation is the decoded text).
    A token is decoded after the few before it, so tokenizers that drop or merge a leading space
    agree with the whole decode; a character split over several tokens (an emoji's bytes) is given
    to the token that completes it, the others getting ""."""
    pieces: list[str] = []
    start = 0  # first token whose text is not yet emitted
    for i in range(len(ids)):
        lo = max(0, start - window)
        before = decode(list(ids[lo:start]))
        text = decode(list(ids[lo : i + 1]))
        piece = text[len(before) :] if text.startswith(before) else text
        if piece.endswith("\ufffd") and i + 1 < len(ids) and i - start < 3:
            pieces.append("")  # an incomplete character: wait for the token that completes it
            continue
        pieces.append(piece)
        start = i + 1
    return pieces


def token_fields(t: Trajectory, decode: Callable[[list[int]], str]) -> dict[str, Any]:
    """A samples.jsonl row's token view: each response token's text and sampling logprob (None on
    context tokens), and its advantage where the learner's advantages differ between tokens."""
    ids, mask = t.response_ids, t.loss_mask
    fields: dict[str, Any] = {
        "token_text": token_text(ids, decode),
        "token_logprobs": [
            round(lp, 4) if m else None for lp, m in zip(t.sampling_logprobs, mask, strict=True)
        ],
    }
    adv = t.token_advantages
    trained = [a for a, m in zip(adv or [], mask) if m]
    if trained and max(trained) - min(trained) > 1e-6:  # token-level (e.g. GAE), not one per sequence
        fields["token_advantages"] = [round(a, 4) if m else None for a, m in zip(adv, mask, strict=True)]
    return fields


def sample_records(
    groups: list[TrajectoryGroup],
    examples: Sequence[Example],
    step: int,
    limit: int,
    decode: Callable[[list[int]], str] | None = None,
    tokens: bool = False,
    group_by: Sequence[str] = (),
    images: Callable[[Trajectory, Example], list[str]] | None = None,
) -> Iterator[dict[str, Any]]:
    """samples.jsonl rows of the first ``limit`` trajectories (all for -1); a group dropped before
    the update has advantage None, and an errored one reward None. A multi-turn trajectory's row
    also holds its ``turn_rewards`` and, with ``decode``, its ``conversation`` (segment by segment).
    With ``tokens`` (and ``decode``) each row holds its :func:`token_fields`; with ``group_by`` its
    example's eval group (``eval.group_by``) as ``group``; with ``images`` (the run's
    :class:`rlvr.vision.image_log.ImageLog` paths), the files of the images its model saw."""
    written = 0
    for g in groups:
        for t in g.trajectories:
            if 0 <= limit <= written:
                return
            example = examples[g.example_index]
            row = {
                "step": step,
                "example_id": example.id,
                **({"role": g.role} if g.role is not None else {}),
                "prompt": g.role_prompt if g.role_prompt is not None else example.question,
                "reference": example.reference,
                "completion": t.text,
                "finish_reason": t.finish_reason,
                "tokens": len(t),
                "reward": None if t.errors else t.reward,
                "rewards": t.rewards,
                "errors": t.errors,
                "advantage": t.advantage,
            }
            if group_by:
                row["group"] = group_of(example, group_by)
            if images is not None and (paths := images(t, example)):
                row["images"] = paths
            if len(t.segments) > 1:
                row["turn_rewards"] = t.turn_rewards
                if t.turn_states:
                    row["turn_states"] = t.turn_states
                if decode is not None:
                    row["conversation"] = conversation(t, decode)
            if tokens and decode is not None:
                row.update(token_fields(t, decode))
            yield row
            written += 1
