"""CoPG: contrastive policy gradient — pairs of completions of one prompt, no importance sampling.

Contrastive Policy Gradient (Flet-Berliac et al., 2024; seeds 003:152) is "an off-policy policy
gradient approach that does not rely on important sampling techniques and highlights the importance
of using (the right) state baseline"; it "generalize[s] the direct alignment method IPO ... and
classic policy gradient". For two completions y, y' of the same prompt, with the regularised reward
``u(y) = R(y) − β·ℓ(y)``, ``ℓ(y) = log π(y)/π_anchor(y)`` summed over the completion's tokens, the
pair's loss is the squared contrast

    L(y, y') = (u(y) − u(y'))² / (4β)        (a sum of such terms, with R(y) − R(y') = ±τ: IPO)

whose gradient is ``−½ (u(y) − u(y')) (∇ log π(y) − ∇ log π(y'))``: a policy gradient in which each
completion's baseline is the *other* completion's regularised reward, correct whatever policy
sampled the pair. Over a group of n completions every pair is used and each completion's loss is the
mean over its n − 1 partners, ``L_i = Σ_{j≠i} (u_i − u_j)² / (4β (n − 1))``, so the batch sum has
gradient ``−g_i`` on each of completion i's token log-probs, with

    g_i = u_i − mean_{j≠i} u_j = (A_i − mean_{j≠i} A_j) − β (ℓ_i − mean_{j≠i} ℓ_j).

On-policy (ℓ = 0) that is RLOO's leave-one-out policy gradient; off-policy the log-ratio terms pull
each completion's log-probability back towards the anchor by what its reward does not justify.

Choices where the abstract is silent or the trainer decides:

- The anchor is π_old, the policy that sampled the batch (a loss is offered no reference
  log-probs): each batch's update is then the KL-regularised improvement of π_old, a trust region,
  rather than a fixed regularisation towards the initial model (``algo.kl_coef`` adds that).
- The reward is the advantage: ``R_i − R_j = A_i − A_j`` for any estimator that shifts a group's
  rewards by a constant (``dr_grpo``, ``rloo`` up to the factor n/(n − 1), ``grpo`` up to the
  group's std). Per-token advantages are reduced to their mean over the row's valid tokens.
- The pairs are the completions of one prompt within the call (``group_index`` says which rows
  share a prompt); a row with no valid token takes no part, and a completion without a partner
  gets no loss.
- The per-token form: every valid token of completion i holds ``L_i`` and has gradient ``−g_i``
  times its aggregation weight (the coefficient detached), so ``loss_agg: seq-mean-token-sum``
  gives exactly the gradient of the batch's mean ``L_i``.

The loss names ``group_index`` [B] (which prompt each row continues), which the trainer does not
offer a loss yet: until it does, ``algo.loss: copg`` fails on its first update (a TypeError naming
the argument), and ``recipes/copg.yaml`` waits for that wiring.
"""

from __future__ import annotations

import torch

from rlvr.algo.losses import POLICY_LOSSES
from rlvr.algo.supervised import sequence_advantage, sequence_log_ratio, with_token_gradient


def contrastive_terms(
    rewards: torch.Tensor, log_ratio: torch.Tensor, group_index: torch.Tensor, rows: torch.Tensor, beta: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(L, g, partners)``, each [B]: CoPG's per-completion loss, its gradient coefficient and the
    number of partners, for completions ``rows`` paired within ``group_index`` (see module docs)."""
    u = rewards - beta * log_ratio
    pair = (group_index[:, None] == group_index[None, :]) & rows[:, None] & rows[None, :]
    pair.fill_diagonal_(False)
    partners = pair.sum(dim=1)
    diff = torch.where(pair, u[:, None] - u[None, :], torch.zeros_like(pair, dtype=u.dtype))
    denom = partners.clamp(min=1).to(u.dtype)
    loss = (diff**2).sum(dim=1) / (4.0 * beta * denom)
    coef = diff.sum(dim=1) / denom  # u_i − mean of its partners' u (0 without partners)
    return loss, coef, partners


@POLICY_LOSSES.register("copg")
def copg_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    group_index: torch.Tensor,
    beta: float = 0.1,
) -> tuple[torch.Tensor, dict[str, float]]:
    """CoPG (seeds 003:152): the squared contrast of regularised rewards over the pairs of completions
    of a prompt; see the module docstring. ``beta`` (> 0) weighs the log-ratio to π_old against the
    advantage. ``algo.clip_low``/``clip_high`` do not apply.
    """
    if not beta > 0:
        raise ValueError(f"copg: beta must be > 0, got {beta}")
    if group_index.shape != logprobs.shape[:1]:
        raise ValueError(
            f"copg: group_index must have shape [{logprobs.shape[0]}], got {list(group_index.shape)}"
        )
    rows = (mask > 0).any(dim=1)
    with torch.no_grad():
        adv = sequence_advantage(advantages, mask)
        ratio = sequence_log_ratio(logprobs, old_logprobs, mask)
        value, coef, partners = contrastive_terms(adv, ratio, group_index, rows, beta)
    loss = with_token_gradient(value, -coef, logprobs, mask)
    with torch.no_grad():
        paired = partners > 0
        n = paired.sum().clamp(min=1)
        stats = {
            "copg_loss": float(value[paired].sum() / n),
            "copg_paired_frac": float(paired.float().mean()) if len(paired) else 0.0,
        }
    return loss, stats
