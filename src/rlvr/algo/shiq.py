"""ShiQ, Shifted-Q (seeds 003:163-164): token-level Bellman consistency with the logits as Q-values.

The abstract derives "loss functions from Bellman equations" that make "the logits ... reliable
Q-value estimates", for "off-policy, token-wise learning", and notes that naively applying a
Q-learning update to the logits fails. It gives no formula. The loss here is the soft (KL-
regularised) Bellman consistency written so that the policy is the plain softmax of the logits:

With logits ``g`` read as shifted Q-values, ``β·g(s, a) = Q(s, a) + β·log π_prior(a | s)``, the
regularised Bellman equation ``Q(s_t, a_t) = r_t + V(s_{t+1})`` with the soft value
``V(s) = β·log Σ_a π_prior(a | s)·exp(Q(s, a)/β) = β·logsumexp g(s)`` becomes, per sampled token,

    δ_t = log π(a_t | s_t) − log π_prior(a_t | s_t) + lse_t − lse_{t+1} − r_t / β = 0

(``g(s_t, a_t) = log π(a_t | s_t) + lse_t``; ``lse_{L+1} = 0`` after the last token, a terminal
state). So the policy the logits define is the optimal one, π ∝ π_prior·exp(Q/β), with no
temperature or reference at sampling time (the "shift"). ``multi_step: true`` (default) sums the
equation from t to the end, the path consistency that carries a sparse outcome reward to every
token in one update instead of one token per update:

    δ_t = lse_t + Σ_{k≥t} [log π(a_k | s_k) − log π_prior(a_k | s_k)] − Σ_{k≥t} r_k / β

The per-token loss is ``½ δ_t²``, aggregated by the trainer as any loss. Choices the abstract leaves
open:

- **The rewards** are the estimator's ``advantages``: one per sequence (placed on its last trained
  token, zero elsewhere) or per token ([B, T], token-wise rewards). A group baseline in them shifts
  every value of the prompt's states by the same amount, so ``grpo``/``rloo`` advantages are fine.
- **The prior** ``π_prior`` is the policy before this update (``old_logprobs``: a trust-region,
  mirror-descent prior, the only one a loss is offered) or, with ``prior: none``, uniform
  (entropy-regularised Q-learning).
- **The value** is the raw ``logsumexp`` of the (temperature-scaled) logits, which the trainer
  computes for a loss that names it (``logsumexp`` context, with gradient). A pretrained model's
  logits are unnormalised, so at the start ``lse`` is far from the returns and the first updates
  re-centre it; the paper's initialisation fix for this is not in the abstract and is not done here.
- Tokens the trainer does not train on (``mask`` 0) are skipped: ``lse_{t+1}`` is the next trained
  token's value. A truncated completion is treated as ended (rlvr scores it as it stands).
"""

from __future__ import annotations

import torch

from rlvr.algo.losses import POLICY_LOSSES

SHIQ_PRIORS = ("old", "none")


def reverse_cumsum(x: torch.Tensor) -> torch.Tensor:
    """Σ_{k≥t} x_k along the last dimension."""
    return x.flip(-1).cumsum(-1).flip(-1)


def token_rewards(advantages: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """[B, T] rewards: a [B] reward on each row's last trained token (none for a row with no
    trained token), or [B, T] ones as given, zero where ``mask`` is 0."""
    valid = mask > 0
    if advantages.dim() == 2:
        return torch.where(valid, advantages, torch.zeros_like(advantages))
    if advantages.dim() != 1:
        raise ValueError(f"shiq: advantages must be [B] or [B, T], got shape {tuple(advantages.shape)}")
    positions = torch.arange(mask.shape[1], device=mask.device).expand_as(mask)
    last = torch.where(valid, positions, torch.full_like(positions, -1)).max(dim=1).values  # [B]
    at_last = (positions == last[:, None]) & valid
    return torch.where(at_last, advantages[:, None].to(mask.dtype).expand_as(mask), torch.zeros_like(mask))


def next_values(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """[B, T]: the value at each position's next trained position, 0 after the last (terminal)."""
    batch, width = mask.shape
    positions = torch.arange(width, device=mask.device).expand(batch, width)
    index = torch.where(mask > 0, positions, torch.full_like(positions, width))
    later = torch.cat([index[:, 1:], torch.full_like(index[:, :1], width)], dim=1)
    nearest = later.flip(-1).cummin(dim=-1).values.flip(-1)  # min over k > t of the trained k
    padded = torch.cat([values, torch.zeros_like(values[:, :1])], dim=1)
    return padded.gather(1, nearest)


def bellman_residuals(
    logprobs: torch.Tensor,
    prior_logprobs: torch.Tensor,
    logsumexp: torch.Tensor,
    rewards: torch.Tensor,
    mask: torch.Tensor,
    beta: float,
    multi_step: bool,
) -> torch.Tensor:
    """δ_t [B, T] of the one-step or multi-step consistency (module docstring); 0 where ``mask`` is 0."""
    valid = mask > 0
    zero = torch.zeros_like(logprobs)
    log_ratio = torch.where(valid, logprobs - prior_logprobs, zero)
    lse = torch.where(valid, logsumexp, zero)
    if multi_step:
        delta = lse + reverse_cumsum(log_ratio) - reverse_cumsum(rewards) / beta
    else:
        delta = log_ratio + lse - next_values(lse, mask) - rewards / beta
    return torch.where(valid, delta, zero)


@POLICY_LOSSES.register("shiq")
def shiq_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    logsumexp: torch.Tensor,
    beta: float = 1.0,
    multi_step: bool = True,
    prior: str = "old",
) -> tuple[torch.Tensor, dict[str, float]]:
    """ShiQ (seeds 003:163-164): per-token ``½ δ_t²`` of the soft Bellman consistency of the logits
    (:func:`bellman_residuals`), ``logsumexp`` [B, T] the value of each state (with gradient).

    ``beta`` > 0 is the KL (entropy) coefficient the rewards are divided by; ``multi_step`` the
    path form; ``prior`` ``old`` (the policy before the update) or ``none`` (uniform).
    """
    if not beta > 0.0:
        raise ValueError(f"shiq: beta must be > 0, got {beta}")
    if prior not in SHIQ_PRIORS:
        raise ValueError(f"shiq: prior must be one of {', '.join(SHIQ_PRIORS)}, got {prior!r}")
    rewards = token_rewards(advantages, mask)
    prior_logprobs = old_logprobs if prior == "old" else torch.zeros_like(logprobs)
    delta = bellman_residuals(logprobs, prior_logprobs, logsumexp, rewards, mask, beta, multi_step)
    valid = mask > 0
    n = valid.sum().clamp(min=1)
    stats = {
        "shiq_residual": float(delta.detach().abs().sum() / n),
        "shiq_value": float(torch.where(valid, logsumexp.detach(), torch.zeros_like(delta)).sum() / n),
    }
    return 0.5 * delta.square(), stats
