"""KL(policy ‖ reference): per-token estimators (Schulman's k1, k2, k3), KL folded into rewards,
and the adaptive KL coefficient of Ziegler et al. (2019).

The trainer adds ``algo.kl_coef · KL`` to the loss ("KL as loss", GRPO's choice); classic PPO-RLHF
subtracts it from the reward instead ("KL in reward", :func:`kl_penalized_rewards`), which makes it
part of the return that the advantages are computed from.
"""

from __future__ import annotations

import torch

from rlvr.registry import Registry

KL_ESTIMATORS: Registry = Registry("KL estimator")


@KL_ESTIMATORS.register("k1")
def kl_k1(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """log π − log π_ref: unbiased, high variance, can be negative per token."""
    return logprobs - ref_logprobs


@KL_ESTIMATORS.register("k2")
def kl_k2(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """½ (log π − log π_ref)²: biased, low variance, non-negative."""
    return 0.5 * (logprobs - ref_logprobs) ** 2


@KL_ESTIMATORS.register("k3")
def kl_k3(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """exp(r) − 1 − r with r = log π_ref − log π: unbiased and non-negative (GRPO's choice)."""
    log_ratio = (ref_logprobs - logprobs).clamp(-20.0, 20.0)
    return log_ratio.exp() - 1.0 - log_ratio


def kl_penalized_rewards(
    rewards: torch.Tensor, kl: torch.Tensor, mask: torch.Tensor, coef: float
) -> torch.Tensor:
    """Token rewards [N, T]: ``−coef · kl`` on every valid token, plus the sequence reward on the last.

    ``kl`` [N, T] is a per-token estimate (e.g. :func:`kl_k1` of the sampling policy against the
    reference, detached); ``mask`` must be a prefix mask. Feed the result to a token-level estimator
    (``gae``'s ``token_rewards``, or a return-to-go) so each token is charged for the divergence of
    everything after it. Padded positions are 0 even if ``kl`` is not finite there.
    """
    valid = mask > 0
    out = torch.where(valid, -coef * kl, torch.zeros_like(kl))
    lengths = valid.sum(dim=1)
    rows = (lengths > 0).nonzero().flatten()
    out[rows, lengths[rows] - 1] += rewards[rows].to(out.dtype)
    return out


def adaptive_kl_coef(
    coef: float, observed_kl: float, target: float, horizon: int = 10000, n_steps: int = 1
) -> float:
    """Next KL coefficient (Ziegler et al., 2019): proportional control of the observed KL to ``target``.

    ``coef · (1 + clip(KL/target − 1, −0.2, 0.2) · n_steps / horizon)``: grows while the policy drifts
    further than wanted, shrinks while it stays closer. ``n_steps`` is how many samples (or steps)
    the observation covers; the state is just the coefficient, kept and checkpointed by the trainer.
    """
    if target <= 0 or horizon <= 0:
        raise ValueError("adaptive_kl_coef: target and horizon must be > 0")
    error = min(max(observed_kl / target - 1.0, -0.2), 0.2)
    return coef * (1.0 + error * n_steps / horizon)
