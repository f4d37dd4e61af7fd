"""PPO's critic in the trainer: values of the sampled completions, and how the critic is trained.

``algo.critic.kind`` picks where V(s_t) comes from:

- ``head``: a :class:`~rlvr.models.ValueHead` on the policy's final hidden states. The backbone
  is shared, so the value loss (weighted by ``vf_coef``) also trains the policy's body; the head's
  weights are a parameter group of the policy's optimizer with their own learning rate.
- ``separate``: a :class:`~rlvr.models.ValueModel` (its own copy of a backbone plus a head) with
  its own AdamW and schedule; it never touches the policy's weights.

Values are per token *state*: ``values[:, t]`` is V of the prefix that token t is sampled from,
read at the same positions whose logits predict token t. The trainer computes them without
gradient before the advantages (the estimator's ``values`` context, and the ``old_values`` that
the clipped value loss keeps the critic near); :func:`rlvr.train.learn.update.policy_update` recomputes
them with gradient for the value loss.
"""

from __future__ import annotations

from typing import Any

import torch

from rlvr.config import RunConfig
from rlvr.models import ValueHead, load_value_model
from rlvr.train.learn.batch import TrainBatch
from rlvr.train.learn.logprobs import completion_logprobs
from rlvr.train.learn.optim import build_optimizer, build_scheduler


class Critic:
    """A value head on the policy, or a separate value model with its own optimizer."""

    def __init__(
        self,
        head: ValueHead | None = None,
        model: torch.nn.Module | None = None,
        optimizer: torch.optim.Optimizer | None = None,
        scheduler: Any = None,
    ) -> None:
        if (head is None) == (model is None):
            raise ValueError("a critic is either a head on the policy or a separate model")
        self.head, self.model, self.optimizer, self.scheduler = head, model, optimizer, scheduler

    @property
    def shares_policy(self) -> bool:
        """True for a head on the policy's hidden states (pass them to :meth:`values`)."""
        return self.head is not None

    def module(self) -> torch.nn.Module:
        return self.head if self.head is not None else self.model

    def values(self, batch: TrainBatch, policy_hidden: torch.Tensor | None = None) -> torch.Tensor:
        """V [B, T] of every completion token's state, with gradient (0 on padding)."""
        if self.head is not None:
            if policy_hidden is None:
                raise ValueError("a value head needs the policy's hidden states")
            values = self.head(policy_hidden)
        else:
            prompt_ids = batch.prompt_ids[batch.group_index]
            prompt_mask = batch.prompt_mask[batch.group_index]
            mask = torch.cat([prompt_mask, batch.completion_attention], dim=1)
            positions = (mask.cumsum(-1) - 1).clamp(min=0)
            all_values = self.model(torch.cat([prompt_ids, batch.completion_ids], dim=1), mask, positions)
            start = prompt_ids.shape[1] - 1  # the last prompt position predicts completion token 0
            values = all_values[:, start : start + batch.completion_width]
        return values * batch.completion_mask

    @torch.no_grad()
    def batch_values(
        self, policy: torch.nn.Module, batch: TrainBatch, micro: int, temperature: float
    ) -> torch.Tensor:
        """V [B, T] of the whole batch without gradient, ``micro`` sequences per forward pass."""
        out = torch.zeros_like(batch.sampling_logprobs)
        for start in range(0, len(batch), micro):
            rows = slice(start, min(start + micro, len(batch)))
            sub = batch.select(rows)
            hidden = None
            if self.shares_policy:
                hidden = completion_logprobs(policy, sub, temperature, with_hidden=True)[2]
            out[rows, : sub.completion_width] = self.values(sub, hidden)
        return out

    def policy_param_groups(self, lr: float) -> list[dict]:
        """Parameter groups for the policy's optimizer: the head's weights at the critic's ``lr``."""
        return [{"params": list(self.head.parameters()), "lr": lr}] if self.head is not None else []

    def zero_grad(self) -> None:
        if self.optimizer is not None:
            self.optimizer.zero_grad(set_to_none=True)

    def step(self, grad_clip: float) -> dict[str, float]:
        """One optimizer step of a separate critic (a head steps with the policy's optimizer)."""
        if self.optimizer is None:
            return {}
        norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), grad_clip)
        self.optimizer.step()
        self.scheduler.step()
        return {"critic_grad_norm": float(norm)}

    def state_dict(self) -> dict[str, Any]:
        state: dict[str, Any] = {"weights": self.module().state_dict()}
        if self.optimizer is not None:
            state["optimizer"] = self.optimizer.state_dict()
            state["scheduler"] = self.scheduler.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.module().load_state_dict(state["weights"])
        if self.optimizer is not None:
            self.optimizer.load_state_dict(state["optimizer"])
            self.scheduler.load_state_dict(state["scheduler"])


def build_critic(cfg: RunConfig, policy: torch.nn.Module, total_updates: int) -> Critic | None:
    """The critic ``cfg.algo.critic`` asks for (None for kind ``none``)."""
    c = cfg.algo.critic
    if c.kind == "none":
        return None
    if c.kind == "head":
        head = ValueHead(policy.config.hidden_size).to(next(policy.parameters()).device)
        return Critic(head=head)
    model = load_value_model(c.model or cfg.model.name, cfg.model.dtype, cfg.model.device)
    optim_cfg = cfg.optim.model_copy(update={"lr": c.lr})
    optimizer = build_optimizer(model, optim_cfg)
    return Critic(
        model=model, optimizer=optimizer, scheduler=build_scheduler(optimizer, total_updates, optim_cfg)
    )


def value_metrics(values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor) -> dict[str, float]:
    """How well the rollout's values predicted their targets, over the valid tokens.

    ``explained_variance`` = 1 − Var(returns − values) / Var(returns): 1 for a perfect critic, 0 for
    one no better than a constant, negative for a worse one (0 when the returns do not vary).
    """
    valid = mask > 0
    v, r = values[valid].float(), returns[valid].float()
    if r.numel() == 0:
        return {}
    var = r.var(unbiased=False)
    explained = float(1 - (r - v).var(unbiased=False) / var) if var > 0 else 0.0
    return {
        "critic/explained_variance": explained,
        "critic/value_mean": float(v.mean()),
        "critic/return_mean": float(r.mean()),
    }
