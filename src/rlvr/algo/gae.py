"""Generalised advantage estimation and the clipped value loss: the critic half of PPO.

Critic-free estimators (GRPO, RLOO, ...) give every token of a completion the same advantage;
GAE (Schulman et al., 2016) gives each token its own, from a learned value V(s_t) per token:
``δ_t = r_t + γ V(s_{t+1}) − V(s_t)`` and ``A_t = Σ_l (γλ)^l δ_{t+l}``. λ trades bias (λ→0: trust
the critic) for variance (λ→1: Monte-Carlo return). VAPO-style critics are discussed in seeds 000:5.
"""

from __future__ import annotations

import torch

from rlvr.algo.advantages import ADVANTAGE_ESTIMATORS


def gae_advantages_and_returns(
    token_rewards: torch.Tensor,
    values: torch.Tensor,
    mask: torch.Tensor,
    gamma: float = 1.0,
    lam: float = 0.95,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(advantages [B, T], returns [B, T]) by GAE; both 0 outside ``mask``.

    ``mask`` must be a prefix mask (right padding): the step after a sequence's last token is
    terminal (V = 0), and padded values/rewards never leak into valid positions, even if non-finite.
    ``returns = advantages + values`` are the value head's regression targets.
    """
    valid = mask > 0
    zeros = torch.zeros_like(token_rewards[:, 0])
    rewards = torch.where(valid, token_rewards, torch.zeros_like(token_rewards))
    vals = torch.where(valid, values, torch.zeros_like(values)).detach()
    advantages = torch.zeros_like(rewards)
    running = zeros
    width = rewards.shape[1]
    for t in reversed(range(width)):
        next_valid = valid[:, t + 1] if t + 1 < width else torch.zeros_like(valid[:, t])
        next_value = torch.where(next_valid, vals[:, t + 1], zeros) if t + 1 < width else zeros
        delta = rewards[:, t] + gamma * next_value - vals[:, t]
        running = delta + torch.where(next_valid, gamma * lam * running, zeros)
        advantages[:, t] = torch.where(valid[:, t], running, zeros)
    returns = torch.where(valid, advantages + vals, torch.zeros_like(vals))
    return advantages, returns


def whiten(values: torch.Tensor, mask: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """Zero-mean, unit-variance over the valid tokens of the batch (0 elsewhere)."""
    valid = mask > 0
    picked = values[valid]
    if picked.numel() == 0:
        return torch.zeros_like(values)
    scale = picked.std() + eps if picked.numel() > 1 else 1.0
    return torch.where(valid, (values - picked.mean()) / scale, torch.zeros_like(values))


def terminal_rewards(rewards: torch.Tensor, lengths: torch.Tensor, width: int) -> torch.Tensor:
    """[N, width] token rewards holding each sequence reward on its last token (0 for empty ones)."""
    out = torch.zeros(rewards.shape[0], width, dtype=rewards.dtype, device=rewards.device)
    last = (lengths.long() - 1).clamp(min=0, max=max(width - 1, 0))
    has_tokens = lengths > 0
    out[has_tokens, last[has_tokens]] = rewards[has_tokens]
    return out


@ADVANTAGE_ESTIMATORS.register("gae")
def gae_advantages(
    rewards: torch.Tensor,
    group_index: torch.Tensor,
    values: torch.Tensor,
    lengths: torch.Tensor,
    gamma: float = 1.0,
    lam: float = 0.95,
    token_rewards: torch.Tensor | None = None,
    normalize: bool = True,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Token-level PPO advantages [N, T] from the critic's ``values`` [N, T] (T = longest completion),
    and the critic's regression targets: ``(advantages, {"returns": returns [N, T]})``.

    The sequence reward is placed on each completion's last token; ``token_rewards`` [N, T], if
    given, is added (e.g. a per-token KL penalty from :func:`rlvr.algo.kl.kl_penalized_rewards`).
    ``normalize`` whitens advantages over the batch's tokens, as PPO implementations do; the returns
    are always the unwhitened advantages plus ``values``.
    """
    width = values.shape[1]
    mask = (torch.arange(width, device=values.device)[None, :] < lengths[:, None]).to(values.dtype)
    per_token = terminal_rewards(rewards.to(values.dtype), lengths, width)
    if token_rewards is not None:
        per_token = per_token + torch.where(mask > 0, token_rewards, torch.zeros_like(per_token))
    advantages, returns = gae_advantages_and_returns(per_token, values, mask, gamma, lam)
    return (whiten(advantages, mask) if normalize else advantages), {"returns": returns}


def value_loss(
    values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    mask: torch.Tensor,
    clip_range: float = 0.2,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Per-token clipped value loss [B, T]: ``½ max((V − R)², (clip(V, V_old ± ε) − R)²)``.

    Clipping keeps the critic from moving further than ε from the values the advantages were
    computed with, the critic's analogue of PPO's ratio clip. Aggregate it with the same
    :func:`rlvr.algo.aggregate.token_weights` as the policy loss.
    """
    clipped = old_values + (values - old_values).clamp(-clip_range, clip_range)
    unclipped_err = (values - returns) ** 2
    clipped_err = (clipped - returns) ** 2
    loss = 0.5 * torch.maximum(unclipped_err, clipped_err)
    loss = torch.where(mask > 0, loss, torch.zeros_like(loss))
    with torch.no_grad():
        m = mask > 0
        n = m.sum().clamp(min=1)
        stats = {"value_clip_frac": float(((clipped_err > unclipped_err) & m).sum() / n)}
    return loss, stats
