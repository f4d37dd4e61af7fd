"""Keep low-probability tokens from dominating the update (seeds 003:11).

"Do Not Let Low-Probability Tokens Over-Dominate in RL for LLMs" (Yang et al., 2025) observes that
the gradient of ``log π`` w.r.t. the logits has norm growing as the token's probability falls, so the
few low-probability tokens of a batch dominate each update and the (many) high-probability tokens
barely learn. Its "Advantage Reweighting" scales each token's advantage by ``α·π + (1 − α)``.
"""

from __future__ import annotations

from typing import Any

import torch

from rlvr.algo.losses import POLICY_LOSSES, inner_loss, per_token


@POLICY_LOSSES.register("lowprob_downweight")
def lowprob_downweight_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    alpha: float = 0.3,
    inner: str = "ppo_clip",
    inner_params: dict[str, Any] | None = None,
    clip_low: float | None = None,
    clip_high: float | None = None,
    entropy: torch.Tensor | None = None,
    sampling_logprobs: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Advantage reweighting: the ``inner`` loss with token advantages ``A · (α·π_old + 1 − α)``.

    π_old is the (detached) probability of the sampled token before the update, so a token at
    probability 1 keeps its full advantage and one near 0 keeps (1 − α) of it. α = 0 is the inner
    loss unchanged; the paper uses α around 0.3.
    """
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"lowprob_downweight: alpha must be in [0, 1], got {alpha}")
    prob = old_logprobs.detach().clamp(max=0.0).exp()
    weight = alpha * prob + (1.0 - alpha)
    loss, stats = inner_loss(
        inner,
        inner_params,
        logprobs,
        old_logprobs,
        per_token(advantages) * weight,
        mask,
        clip_low=clip_low,
        clip_high=clip_high,
        entropy=entropy,
        sampling_logprobs=sampling_logprobs,
    )
    m = mask > 0
    stats = {**stats, "adv_weight_mean": float(torch.where(m, weight, 0.0).sum() / m.sum().clamp(min=1))}
    return loss, stats
