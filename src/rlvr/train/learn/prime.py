"""PRIME's implicit process reward model (seeds 003:36): dense rewards from outcome labels alone.

A copy of the starting policy, π_prm, is trained online as an *outcome* reward model whose score of a
response is the summed log-ratio to the frozen reference::

    q(y) = Σ_t β · (log π_prm(y_t | y_<t) − log π_ref(y_t | y_<t))
    loss = BCE(sigmoid(q(y)), correct(y))               over the batch's scored responses

and each token's term ``r_t = β · (log π_prm − log π_ref)`` is then a *process* reward: how much the
PRM, having learned which responses succeed, prefers that token to the reference. No step labels
and no separate reward-model training phase are needed. The learner adds ``r_t`` to the estimator's
``token_rewards`` (so the estimator must take them: ``step_returns``, or ``gae``), beside the outcome
reward on the last token.

``granularity: step`` sums each step's token rewards onto the step's last token (steps split at
``rewards.step_separator``; the collector records their ends in ``Trajectory.step_ends``): the
process reward of a step rather than of a token, as PRIME's step-level variant reads it. In a
multi-turn episode the steps are the final turn's, and the earlier turns' rewards count in its first.

``update: before`` (the paper's order) fits the PRM to the batch's outcomes and then reads the
rewards; ``after`` reads them first. ``correct(y)`` is the run's correctness component reaching 1
(the first reward function's, or ``env/solved``), as in the prompt history. The PRM and its AdamW
state are saved in resumable checkpoints (``trainer_state.pt``, ``prime``).
"""

from __future__ import annotations

from typing import Any

import torch

from rlvr.config import RunConfig
from rlvr.data.history import CORRECT_AT, correctness_key
from rlvr.models import load_model
from rlvr.train.learn.batch import TrainBatch
from rlvr.train.learn.logprobs import completion_logprobs
from rlvr.train.learn.update import _micro_slices, batch_logprobs
from rlvr.trajectory import Trajectory


def outcome_labels(trajectories: list[Trajectory], key: str) -> torch.Tensor:
    """1.0 for each trajectory whose correctness component reaches 1, else 0.0."""
    from rlvr.train.learn.estimate import component_score

    scores = [component_score(t.rewards, key) for t in trajectories]
    return torch.tensor([1.0 if s == s and s >= CORRECT_AT else 0.0 for s in scores])


def step_sums(rewards: torch.Tensor, ends: list[list[int]]) -> torch.Tensor:
    """Each step's summed token rewards on its last token ``ends[i]`` (positions in row i); the
    tokens after a row's last end, or a whole row without ends, go on the row's last nonzero token."""
    out = torch.zeros_like(rewards)
    for i, row_ends in enumerate(ends):
        start = 0
        for end in row_ends:
            end = min(max(end, start), rewards.shape[1] - 1)
            out[i, end] += rewards[i, start : end + 1].sum()
            start = end + 1
        rest = rewards[i, start:]
        if start < rewards.shape[1] and rest.any():
            last = start + int(rest.nonzero()[-1])
            out[i, last] += rest.sum()
    return out


class ImplicitPRM:
    """π_prm (trained), π_ref (frozen) and the PRM's optimizer; see the module docstring."""

    def __init__(self, cfg: RunConfig, reference: torch.nn.Module) -> None:
        self.cfg, self.p = cfg, cfg.algo.prime
        self.model = load_model(cfg.model.name, cfg.model.dtype, cfg.model.device).train()
        self.reference = reference
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=self.p.lr, weight_decay=0.0)
        self.key = correctness_key(cfg)

    def reference_logprobs(self, batch: TrainBatch) -> torch.Tensor:
        """log π_ref [B, T] of the batch (frozen: computed once a step, shared by both uses)."""
        return batch_logprobs(
            self.reference, batch, self.cfg.algo.micro_batch_size, self.cfg.rollout.temperature
        )

    def token_rewards(self, batch: TrainBatch, ref: torch.Tensor | None = None) -> torch.Tensor:
        """The implicit process reward β · (log π_prm − log π_ref) of every trained token [B, T]
        (0 elsewhere), without gradient; ``ref``: the batch's reference logprobs, if known."""
        ref = self.reference_logprobs(batch) if ref is None else ref
        prm = batch_logprobs(self.model, batch, self.cfg.algo.micro_batch_size, self.cfg.rollout.temperature)
        return self.p.coef * (prm - ref) * batch.completion_mask

    def update(
        self, batch: TrainBatch, labels: torch.Tensor, ref: torch.Tensor | None = None
    ) -> dict[str, float]:
        """One AdamW step on the BCE of ``sigmoid(q)`` against ``labels`` [B] (mean over the batch)."""
        a, t = self.cfg.algo, self.cfg.rollout.temperature
        ref = self.reference_logprobs(batch) if ref is None else ref
        labels = labels.to(ref.device)
        self.optimizer.zero_grad(set_to_none=True)
        total, right = 0.0, 0.0
        for rows in _micro_slices(len(batch), a.micro_batch_size):
            sub = batch.select(rows)
            logprobs = completion_logprobs(self.model, sub, t)[0]
            width = logprobs.shape[1]
            q = (self.p.coef * (logprobs - ref[rows, :width]) * sub.completion_mask).sum(dim=1)
            loss = torch.nn.functional.binary_cross_entropy_with_logits(q, labels[rows], reduction="sum")
            (loss / len(batch)).backward()
            total += float(loss.detach())
            right += float(((q > 0).float() == labels[rows]).sum())
        norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.p.grad_clip)
        self.optimizer.step()
        return {
            "prime/loss": total / max(len(batch), 1),
            "prime/accuracy": right / max(len(batch), 1),  # before this step: q > 0 iff correct
            "prime/grad_norm": float(norm),
            "prime/correct": float(labels.mean()) if len(labels) else 0.0,
        }

    def process(
        self, batch: TrainBatch, trajectories: list[Trajectory]
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """The batch's implicit token rewards [B, T] and the PRM's metrics, its update placed as
        ``algo.prime.update`` says."""
        labels = outcome_labels(trajectories, self.key)
        ref = self.reference_logprobs(batch)
        metrics: dict[str, float] = {}
        if self.p.update == "before":
            metrics.update(self.update(batch, labels, ref))
        rewards = self.token_rewards(batch, ref)
        if self.p.granularity == "step":
            rewards = step_sums(rewards, [t.step_ends for t in trajectories])
        if self.p.update == "after":
            metrics.update(self.update(batch, labels, ref))
        mask = batch.completion_mask
        sums = rewards.sum(dim=1)
        metrics["prime/token_reward"] = float(rewards.sum() / mask.sum().clamp(min=1))
        right, wrong = labels.to(sums.device) > 0, labels.to(sums.device) == 0
        if right.any() and wrong.any():  # mean q of the correct responses minus the incorrect ones'
            metrics["prime/sequence_reward_gap"] = float(sums[right].mean() - sums[wrong].mean())
        return rewards, metrics

    def state_dict(self) -> dict[str, Any]:
        return {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
