"""Per-token estimators of KL(policy ‖ reference) from sampled tokens (Schulman's k1, k2, k3)."""

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
