"""Group-relative returns-to-go: REINFORCE over per-token rewards with GRPO's group baseline.

GRPO gives every token of a response the same advantage. When rewards arrive inside the response
(a reward's per-step rewards on each step's last token, an environment's turn rewards, an in-reward
KL penalty), each token can instead be credited with what comes *after* it::

    G_t = Σ_{k ≥ t} discount^(k − t) · r_k          (r: token rewards, the sequence reward on the last token)
    A_t = (G_t − mean_g G_0) / std_g G_0             (the group's episode returns, as GRPO)

A step's reward then reaches the tokens of that step and of the steps before it, never those after.
With no token rewards and ``discount`` 1, ``G_t = G_0`` is the sequence reward and the advantages
are GRPO's, token for token. ``normalize_std`` false leaves out the division (Dr. GRPO's baseline).
"""

from __future__ import annotations

import torch

from rlvr.algo.advantages import ADVANTAGE_ESTIMATORS, _scale, group_mean, group_std
from rlvr.algo.gae import terminal_rewards


def returns_to_go(per_token: torch.Tensor, mask: torch.Tensor, discount: float) -> torch.Tensor:
    """[N, T] discounted sums of ``per_token`` from each position to the end (0 off ``mask``)."""
    per_token = per_token * mask
    out = torch.zeros_like(per_token)
    running = torch.zeros(per_token.shape[0], dtype=per_token.dtype, device=per_token.device)
    for t in reversed(range(per_token.shape[1])):
        running = per_token[:, t] + discount * running
        out[:, t] = running
    return out * mask


def token_returns(
    rewards: torch.Tensor, lengths: torch.Tensor, token_rewards: torch.Tensor | None, discount: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Each token's discounted return-to-go [N, T] (the sequence reward on the last token, plus
    ``token_rewards`` where given) and the valid-token mask [N, T] (T = the longest completion)."""
    width = int(lengths.max()) if lengths.numel() else 0
    if token_rewards is not None:
        width = max(width, token_rewards.shape[1])
    mask = (torch.arange(width)[None, :] < lengths[:, None]).to(torch.float32)
    per_token = terminal_rewards(rewards.float(), lengths, width)
    if token_rewards is not None:
        per_token[:, : token_rewards.shape[1]] += token_rewards.float() * mask[:, : token_rewards.shape[1]]
    returns = returns_to_go(per_token, mask, discount)
    return returns, mask


@ADVANTAGE_ESTIMATORS.register("step_returns")
def step_returns_advantages(
    rewards: torch.Tensor,
    group_index: torch.Tensor,
    lengths: torch.Tensor,
    token_rewards: torch.Tensor | None = None,
    discount: float = 1.0,
    normalize_std: bool = True,
    eps: float = 1e-6,
) -> torch.Tensor:
    """Advantages [N, T] (T = longest completion): each token's return-to-go minus the group's mean
    episode return, over the group's std of episode returns (module docstring)."""
    returns, mask = token_returns(rewards, lengths, token_rewards, discount)
    width = mask.shape[1]
    first = returns[:, 0] if width else torch.zeros(len(lengths))
    centered = returns - group_mean(first, group_index)[:, None]
    if normalize_std:
        centered = _scale(centered, group_std(first, group_index)[:, None].expand_as(centered), eps)
    return centered * mask
