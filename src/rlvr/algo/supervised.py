"""PACS: RLVR as supervised learning — the outcome as a label, a policy-parameterised score, BCE.

PACS (imPlicit Actor Critic coupling via a Supervised learning framework; seeds 001:379) treats the
verifiable outcome as a label to predict and trains "a score function parameterized by the policy
model ... using cross-entropy loss"; its gradient "recovers the classical policy gradient update
while implicitly coupling actor and critic roles". The abstract does not give the score, so here it
is the sequence's scaled log-ratio to the policy that sampled it (the trainer offers no reference
log-probs to a loss; the old policy is the one it has)::

    ψ_i = β · Σ_t (log π(y_t) − log π_old(y_t))          (the valid tokens of completion i)
    L_i = BCE(σ(ψ_i), y_i) = −y_i log σ(ψ_i) − (1 − y_i) log(1 − σ(ψ_i))

and ``∂L_i/∂ log π(y_t) = β (σ(ψ_i) − y_i)`` on every token of the completion: a policy gradient whose
advantage is ``β (y − σ(ψ))``, the label minus the score's own prediction of it (the implicit
critic). On-policy ψ = 0, σ = ½, and the update is REINFORCE with advantage ``±β/2``; as the policy
moves away from π_old within the batch (several minibatches or epochs), a completion whose
probability already rose (ψ > 0) gets less push (σ → 1 for a correct one), which is what bounds the
step.

Choices where the abstract is silent:

- The label. A loss receives advantages, not rewards; the label is ``y = 1`` where the completion's
  advantage is > 0 and ``y = 0`` where it is < 0 (for binary rewards with a group baseline, exactly
  "correct" / "wrong"). A completion with advantage 0 (its group all equal) has no label and no
  loss. Per-token advantages [B, T] are reduced to their mean over the row's valid tokens first.
- The sum over tokens (log π of the whole sequence) rather than a mean; ``length_norm`` divides ψ
  by the sequence's token count instead.
- The per-token form. Every valid token of completion i holds the value ``L_i`` and has gradient
  ``β (σ(ψ_i) − y_i)`` times its aggregation weight (the coefficient is detached, as CISPO detaches
  its weight), so with ``loss_agg: seq-mean-token-sum`` the update is exactly the gradient of the
  batch's mean BCE.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from rlvr.algo.losses import POLICY_LOSSES, log_ratio


def sequence_advantage(advantages: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """[B] advantages as they are; [B, T] ones as their mean over each row's valid tokens (0 if none)."""
    if advantages.dim() == 1:
        return advantages
    valid = (mask > 0).to(advantages.dtype)
    return (advantages * valid).sum(dim=1) / valid.sum(dim=1).clamp(min=1)


def sequence_log_ratio(
    logprobs: torch.Tensor, old_logprobs: torch.Tensor, mask: torch.Tensor, length_norm: bool = False
) -> torch.Tensor:
    """[B] ``Σ_t log π/π_old`` over each row's valid tokens (their mean with ``length_norm``)."""
    valid = mask > 0
    per_token = torch.where(valid, log_ratio(logprobs, old_logprobs), torch.zeros_like(logprobs))
    total = per_token.sum(dim=1)
    return total / valid.sum(dim=1).clamp(min=1) if length_norm else total


def with_token_gradient(
    value: torch.Tensor, coef: torch.Tensor, logprobs: torch.Tensor, mask: torch.Tensor
) -> torch.Tensor:
    """[B, T] loss whose value is ``value[b]`` on row b's valid tokens (0 elsewhere) and whose gradient
    w.r.t. ``logprobs[b, t]`` is ``coef[b]`` on those tokens (both detached, so nothing else flows)."""
    valid = mask > 0
    carrier = coef.detach()[:, None] * (logprobs - logprobs.detach())  # value 0, gradient coef
    loss = value.detach()[:, None] + carrier
    return torch.where(valid, loss, torch.zeros_like(loss))


@POLICY_LOSSES.register("pacs")
def pacs_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    beta: float = 1.0,
    length_norm: bool = False,
) -> tuple[torch.Tensor, dict[str, float]]:
    """PACS (seeds 001:379): binary cross-entropy of the label ``1[A > 0]`` against ``σ(ψ)``,
    ``ψ = β · Σ_t log π/π_old``; see the module docstring.

    ``beta`` (> 0) scales the score, and with it the on-policy step (advantage ``±β/2``).
    ``length_norm`` takes the mean log-ratio over the tokens instead of the sum.
    ``algo.clip_low``/``clip_high`` do not apply.
    """
    if not beta > 0:
        raise ValueError(f"pacs: beta must be > 0, got {beta}")
    adv = sequence_advantage(advantages, mask)
    label = (adv > 0).to(logprobs.dtype)
    labelled = adv != 0
    score = beta * sequence_log_ratio(logprobs, old_logprobs, mask, length_norm)
    with torch.no_grad():
        bce = F.binary_cross_entropy_with_logits(score, label, reduction="none")
        dscore = beta / (mask > 0).sum(dim=1).clamp(min=1) if length_norm else beta  # ∂ψ/∂log π_t
        coef = (torch.sigmoid(score) - label) * dscore  # ∂BCE/∂ψ · ∂ψ/∂log π_t
        zero = torch.zeros_like(bce)
        bce, coef = torch.where(labelled, bce, zero), torch.where(labelled, coef, zero)
    loss = with_token_gradient(bce, coef, logprobs, mask)
    with torch.no_grad():
        rows = labelled & (mask > 0).any(dim=1)
        n = rows.sum().clamp(min=1)
        stats = {
            "pacs_bce": float(bce[rows].sum() / n),
            "pacs_score_prob": float(torch.sigmoid(score)[rows].sum() / n) if rows.any() else 0.5,
            "pacs_labelled_frac": float(rows.float().mean()) if len(rows) else 0.0,
        }
    return loss, stats
