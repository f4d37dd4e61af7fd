"""The KL reference model's moves during a run: a periodic reset to the policy (ProRL) or an
exponential moving average of the policy (a slowly-evolving reference, as in GRPO-CARE).

ProRL (seeds 003:126) names "periodic reference policy resets" among the components that let
prolonged RL keep improving: the KL term holds the policy near the reference, and once the policy
has moved far enough that the KL dominates the loss, the reference is replaced by the current
policy (and, in ProRL, the optimizer state is restarted) so training can go on. GRPO-CARE
(seeds 001:183) compares likelihoods under "a slowly-evolving reference model"; ``update: ema``
is that reference: after every update ``ref ← decay·ref + (1 − decay)·policy``.

The moved reference is part of the run's state: :meth:`ReferenceMover.state_dict` carries its
weights into the checkpoint so ``--resume`` continues with the same reference, bit for bit.
"""

from __future__ import annotations

from typing import Any

import torch

from rlvr.config.reference import ReferenceConfig


class ReferenceMover:
    """Applies ``algo.reference`` after each policy update (``after_update``)."""

    def __init__(self, cfg: ReferenceConfig) -> None:
        self.cfg = cfg
        self.resets = 0  # resets so far (update=reset)
        self.since_reset = 0  # updates since the last reset (or the start)

    @property
    def moves(self) -> bool:
        return self.cfg.update != "fixed"

    @torch.no_grad()
    def after_update(
        self, policy: torch.nn.Module, reference: torch.nn.Module, optimizer: torch.optim.Optimizer
    ) -> dict[str, float]:
        """Move ``reference`` after one update of ``policy``; returns this step's metrics."""
        if not self.moves:
            return {}
        self.since_reset += 1
        if self.cfg.update == "ema":
            ema_step(reference, policy, self.cfg.decay)
            return {"reference/ema_updates": float(self.since_reset)}
        reset = self.since_reset >= self.cfg.every
        if reset:
            copy_weights(reference, policy)
            if self.cfg.reset_optimizer:
                optimizer.state.clear()  # AdamW's moments restart (and its step counts with them)
            self.resets += 1
            self.since_reset = 0
        return {"reference/resets": float(self.resets), "reference/reset": float(reset)}

    def state_dict(self, reference: torch.nn.Module | None) -> dict[str, Any]:
        if not self.moves or reference is None:
            return {}
        weights = {k: v.detach().clone() for k, v in reference.state_dict().items()}
        return {"resets": self.resets, "since_reset": self.since_reset, "weights": weights}

    def load_state_dict(self, state: dict[str, Any], reference: torch.nn.Module | None) -> None:
        if not self.moves or reference is None or not state:
            return
        self.resets, self.since_reset = int(state["resets"]), int(state["since_reset"])
        reference.load_state_dict(state["weights"])


def _pairs(reference: torch.nn.Module, policy: torch.nn.Module) -> list[tuple[torch.Tensor, torch.Tensor]]:
    ref, pol = reference.state_dict(), policy.state_dict()
    # under FSDP2 the policy's weights are shards (DTensors): every rank gathers the full weight
    pol = {k: v.full_tensor() if hasattr(v, "full_tensor") else v for k, v in pol.items()}
    if ref.keys() != pol.keys():
        missing = sorted(set(ref) ^ set(pol))[:3]
        raise ValueError(
            "algo.reference.update: the reference and the policy have different weights "
            f"(e.g. {missing}); a moving reference needs model.reference unset or the same architecture"
        )
    return [(ref[k], pol[k]) for k in ref]


def copy_weights(reference: torch.nn.Module, policy: torch.nn.Module) -> None:
    """``reference ← policy``, weight by weight (tied weights are copied once per name: harmless)."""
    for r, p in _pairs(reference, policy):
        r.copy_(p.to(r.dtype))


def ema_step(reference: torch.nn.Module, policy: torch.nn.Module, decay: float) -> None:
    """``reference ← decay·reference + (1 − decay)·policy`` for every floating-point weight."""
    done: set[int] = set()
    for r, p in _pairs(reference, policy):
        if r.data_ptr() in done or not r.is_floating_point():
            continue
        done.add(r.data_ptr())  # a tied weight appears under two names: average it once
        r.mul_(decay).add_(p.to(r.dtype), alpha=1.0 - decay)
