"""Value models for PPO's critic: V(s_t), one number per token state.

- :class:`ValueHead` is a linear layer on hidden states someone else computes (the policy's own,
  for a critic that shares the policy's backbone).
- :class:`ValueModel` is a separate critic: a transformer body (the causal LM without its LM head)
  plus a :class:`ValueHead`.

The head starts at zero, so the first values are 0 and the first advantages are the plain
(discounted) returns; a random head would start the critic with noise as large as the rewards.
"""

from __future__ import annotations

import torch

from rlvr.models.loading import load_backbone


class ValueHead(torch.nn.Module):
    """Hidden states [..., H] → values [...], computed in float32 whatever the backbone's dtype."""

    def __init__(self, hidden_size: int) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(hidden_size, 1)
        torch.nn.init.zeros_(self.linear.weight)
        torch.nn.init.zeros_(self.linear.bias)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.linear(hidden.float()).squeeze(-1)


class ValueModel(torch.nn.Module):
    """A critic with its own backbone: values of every position of a sequence."""

    def __init__(self, body: torch.nn.Module) -> None:
        super().__init__()
        self.body = body
        self.head = ValueHead(body.config.hidden_size).to(next(body.parameters()).device)

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor
    ) -> torch.Tensor:
        """Values [B, L]: position t holds V of the state after tokens 0..t."""
        out = self.body(
            input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=False
        )
        return self.head(out.last_hidden_state)


def load_value_model(name_or_path: str, dtype: str = "float32", device: str = "cpu") -> ValueModel:
    """A :class:`ValueModel` on the body of the causal LM ``name_or_path``, with a fresh head."""
    return ValueModel(load_backbone(name_or_path, dtype, device))
