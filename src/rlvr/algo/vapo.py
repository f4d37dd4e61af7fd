"""VAPO's advantages: decoupled and length-adaptive GAE (seeds 000:5 names VAPO and its Decoupled GAE).

VAPO ("Value-model-based Augmented PPO", Yue et al. 2025) keeps PPO's critic and changes how GAE
uses it, because one λ cannot serve both of GAE's consumers on long chains of thought:

- **Decoupled GAE.** The critic's regression targets are computed with ``lam_critic`` (1.0 by
  default: the Monte-Carlo return, so a sparse final reward reaches the first token undecayed and the
  targets do not inherit the critic's own bias), the policy's advantages with a smaller λ
  (lower variance, faster credit).
- **Length-adaptive λ_policy.** With a fixed λ the weight ``Σ_l λ^l = 1/(1 − λ)`` that GAE gives the
  TD errors is the same for a 50-token and a 5,000-token answer, so long answers are dominated by the
  bootstrapped value and short ones by the reward. VAPO ties it to the length ``l``:
  ``λ_policy = 1 − 1/(α·l)``, so the TD-error mass ``1/(1 − λ) = α·l`` grows in proportion to the
  answer; the paper uses ``α = 0.05``.

The third piece, pre-training the critic before PPO uses it, is the trainer's
``algo.critic.warmup_steps`` (:mod:`rlvr.train.learn.learner`).
"""

from __future__ import annotations

import torch

from rlvr.algo.advantages import ADVANTAGE_ESTIMATORS
from rlvr.algo.gae import gae_advantages_and_returns, terminal_rewards, whiten


def length_adaptive_lambda(lengths: torch.Tensor, alpha: float) -> torch.Tensor:
    """``λ = 1 − 1/(α·l)`` per sequence, clamped to [0, 1].

    The formula is negative for ``l < 1/α`` (20 tokens at the paper's α = 0.05) and undefined at
    ``l = 0``; the abstract is silent there, so a short sequence gets λ = 0 (one-step TD: the
    shortest horizon there is), and an empty one 0 as well (it has no tokens to credit).
    """
    if not alpha > 0:
        raise ValueError(f"alpha must be > 0 (λ_policy = 1 − 1/(alpha·length)), got {alpha}")
    n = lengths.to(torch.float64)
    lam = torch.where(n > 0, 1.0 - 1.0 / (alpha * n.clamp(min=1)), torch.zeros_like(n))
    return lam.clamp(0.0, 1.0)


@ADVANTAGE_ESTIMATORS.register("vapo")
def vapo_advantages(
    rewards: torch.Tensor,
    group_index: torch.Tensor,
    values: torch.Tensor,
    lengths: torch.Tensor,
    gamma: float = 1.0,
    lam_critic: float = 1.0,
    lam_policy: float | None = None,
    alpha: float = 0.05,
    token_rewards: torch.Tensor | None = None,
    normalize: bool = True,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Token advantages [N, T] with λ_policy and the critic's targets with ``lam_critic``:
    ``(advantages, {"returns": returns [N, T]})``, both 0 past each sequence's length.

    ``lam_policy`` None (the default) is VAPO's length-adaptive ``1 − 1/(alpha·length)`` per
    sequence; a number fixes it for every sequence (decoupled GAE alone). As in ``gae``, the sequence
    reward sits on the last token, ``token_rewards`` (the in-reward KL) is added, and ``normalize``
    whitens the advantages over the batch's tokens; the returns are never whitened.
    """
    if not 0 <= gamma <= 1:
        raise ValueError(f"gamma must be in [0, 1], got {gamma}")
    if not 0 <= lam_critic <= 1:
        raise ValueError(f"lam_critic must be in [0, 1], got {lam_critic}")
    if lam_policy is not None and not 0 <= lam_policy <= 1:
        raise ValueError(f"lam_policy must be in [0, 1] or None (length-adaptive), got {lam_policy}")
    if lam_policy is None:
        lam = length_adaptive_lambda(lengths, alpha).to(values.dtype)  # [N]: one λ per row
    else:
        lam = lam_policy
    width = values.shape[1]
    mask = (torch.arange(width, device=values.device)[None, :] < lengths[:, None]).to(values.dtype)
    per_token = terminal_rewards(rewards.to(values.dtype), lengths, width)
    if token_rewards is not None:
        per_token = per_token + torch.where(mask > 0, token_rewards, torch.zeros_like(per_token))
    # gae_advantages_and_returns multiplies gamma·lam·running elementwise over rows, so a [N] λ works
    advantages, _ = gae_advantages_and_returns(per_token, values, mask, gamma, lam)  # type: ignore[arg-type]
    _, returns = gae_advantages_and_returns(per_token, values, mask, gamma, lam_critic)
    return (whiten(advantages, mask) if normalize else advantages), {"returns": returns}
