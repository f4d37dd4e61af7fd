"""BAPO: PPO clipping whose bounds move, at every update, until positive samples carry their share.

Off-policy (stale samples: several minibatches or epochs per batch, replay, asynchronous
collection), BAPO (BAlanced Policy Optimization with adaptive clipping; seeds 003:205, 003:206)
finds two things: negative-advantage tokens dominate the policy gradient, and PPO's fixed clip
blocks exactly the entropy-raising updates (low-probability tokens of positive samples whose ratio
ran above ``1 + ε``). So instead of fixed bounds it searches, for each update, the importance-ratio
bounds ``[c_low, c_high]``: both start low and rise by a step (each within its own range) until
the positive tokens' share of the gradient reaches ``target``. Raising ``c_high`` lets more
positive tokens with a large ratio keep their gradient; raising ``c_low`` drops more negative
tokens whose ratio fell far (excessive low-probability negatives).
"""

from __future__ import annotations

import torch

from rlvr.algo.losses import POLICY_LOSSES, log_ratio, per_token, ppo_clip_loss


def positive_share(
    ratio: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor, c_low: float, c_high: float
) -> float | None:
    """The positive tokens' share of ``Σ |r · A|`` over the valid tokens that keep a gradient.

    Under PPO's clip with ratio bounds ``[c_low, c_high]`` a token with ``A > 0`` keeps its gradient
    while ``r ≤ c_high``, one with ``A < 0`` while ``r ≥ c_low``. None when no token contributes
    (an empty mask, all-zero advantages): there is nothing to balance.
    """
    adv = per_token(advantages).expand_as(ratio)
    valid = mask > 0
    pos = valid & (adv > 0) & (ratio <= c_high)
    neg = valid & (adv < 0) & (ratio >= c_low)
    size = (ratio * adv).abs()
    pos_sum, neg_sum = float(size[pos].sum()), float(size[neg].sum())
    total = pos_sum + neg_sum
    return None if total <= 0 else pos_sum / total


def balanced_bounds(
    ratio: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    target: float,
    lower: tuple[float, float],
    upper: tuple[float, float],
    step_low: float,
    step_high: float,
) -> tuple[float, float, float | None]:
    """``(c_low, c_high, share)``: the bounds BAPO trains with, and the positive share they give.

    Starting from ``(lower[0], upper[0])``, while the share is below ``target`` each bound below its
    maximum (``lower[1]``, ``upper[1]``) rises by its step, capped there; the search stops when the
    share reaches the target or both bounds are at their maxima.
    """
    c_low, c_high = lower[0], upper[0]
    share = positive_share(ratio, advantages, mask, c_low, c_high)

    def movable() -> bool:
        return (step_low > 0 and c_low < lower[1]) or (step_high > 0 and c_high < upper[1])

    while share is not None and share < target and movable():
        if step_low > 0:
            c_low = min(c_low + step_low, lower[1])
        if step_high > 0:
            c_high = min(c_high + step_high, upper[1])
        share = positive_share(ratio, advantages, mask, c_low, c_high)
    return c_low, c_high, share


@POLICY_LOSSES.register("bapo")
def bapo_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    target: float = 0.5,
    lower_start: float = 0.6,
    lower_max: float = 0.9,
    upper_start: float = 1.2,
    upper_max: float = 3.0,
    step_low: float = 0.05,
    step_high: float = 0.05,
) -> tuple[torch.Tensor, dict[str, float]]:
    """BAPO (seeds 003:206): PPO's clipped surrogate with ratio bounds from :func:`balanced_bounds`.

    Bounds are *ratios* (0.6 means ``1 − 0.4``), not PPO's ε. Defaults: target share 0.5, lower
    bound in [0.6, 0.9], upper in [1.2, 3.0] (chosen here), steps of 0.05. The
    search runs on each call, i.e. per micro-batch (``algo.micro_batch_size`` at least the minibatch
    makes it per optimizer step). On-policy every ratio is 1 and nothing is clipped, so BAPO equals
    PPO there; it acts off-policy. ``algo.clip_low``/``clip_high`` do not apply.
    """
    if not 0.0 < target <= 1.0:
        raise ValueError(f"bapo: target must lie in (0, 1], got {target}")
    if not 0.0 < lower_start <= lower_max <= 1.0:
        raise ValueError(f"bapo: need 0 < lower_start <= lower_max <= 1, got {lower_start}, {lower_max}")
    if not 1.0 <= upper_start <= upper_max:
        raise ValueError(f"bapo: need 1 <= upper_start <= upper_max, got {upper_start}, {upper_max}")
    if step_low < 0 or step_high < 0:
        raise ValueError(f"bapo: step_low and step_high must be >= 0, got {step_low}, {step_high}")
    with torch.no_grad():
        ratio = torch.exp(log_ratio(logprobs, old_logprobs))
        c_low, c_high, share = balanced_bounds(
            ratio,
            advantages,
            mask,
            target,
            (lower_start, lower_max),
            (upper_start, upper_max),
            step_low,
            step_high,
        )
    loss, stats = ppo_clip_loss(logprobs, old_logprobs, advantages, mask, 1.0 - c_low, c_high - 1.0)
    stats.update(
        {
            "bapo_clip_low": c_low,
            "bapo_clip_high": c_high,
            "bapo_positive_share": 0.0 if share is None else share,
        }
    )
    return loss, stats
