"""FSDP2 (``fully_shard``) for the policy under torchrun: ``train.distributed=fsdp2``.

Each decoder layer (the classes a transformers model lists in ``_no_split_modules``) and then the
whole model become FSDP2 units: every rank keeps a 1/N shard of each parameter, gradient and
AdamW state, and a unit's full parameters exist only while it computes. Gradients are summed over
the ranks (divide factor 1, SUM reductions: gloo has no pre-multiplied sum), the same as
:class:`rlvr.train.shard.Shard` does for DDP, so the update equals one process's.

A sharded module cannot generate on its own rank without the others taking part in every decode
step, so the engine samples from a full copy, refreshed after each update by
:class:`FullCopySync` (an all-gather per parameter); the same copy is what a checkpoint saves.
The optimizer's state is saved whole (gathered to rank 0) and loaded back into the shards.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.distributed.tensor import DTensor


def shard_policy(policy: torch.nn.Module) -> torch.nn.Module:
    """Apply ``fully_shard`` to each decoder layer, then to the root; returns ``policy`` (sharded
    in place: its parameters become DTensors)."""
    from torch.distributed.fsdp import fully_shard

    names = set(getattr(policy, "_no_split_modules", None) or [])
    if not names:  # a PEFT wrapper: the base model knows its layer classes
        base = getattr(policy, "get_base_model", lambda: policy)()
        names = set(getattr(base, "_no_split_modules", None) or [])
    layers = [m for m in policy.modules() if type(m).__name__ in names]
    # The training forward runs the prompt once and its completions on top of its key/value cache
    # (rlvr.train.logprobs): gradient reaches a layer's prompt pass through the cache, not through
    # the layer's output where FSDP2 would gather its parameters again. So a layer keeps its full
    # parameters from its forward to its backward (freed after the backward of each micro-batch).
    for layer in layers:
        fully_shard(layer, reshard_after_forward=False)
    fully_shard(policy, reshard_after_forward=False)
    for unit in [*layers, policy]:
        unit.set_gradient_divide_factor(1.0)  # a sum over the ranks, not a mean
        unit.set_force_sum_reduction_for_comms(True)
        unit.set_reshard_after_backward(False)  # see above: Shard.reduce_grads calls reshard_all
    return policy


def reshard_all(model: torch.nn.Module) -> None:
    """Free every FSDP2 unit's full parameters (after the step's last backward)."""
    from torch.distributed.fsdp import FSDPModule

    for module in model.modules():
        if isinstance(module, FSDPModule):
            module.reshard()


def full(tensor: torch.Tensor) -> torch.Tensor:
    """The whole tensor of a DTensor shard (a collective: every rank calls it), else itself."""
    return tensor.full_tensor() if isinstance(tensor, DTensor) else tensor


class FullCopySync:
    """The engine samples from its own full copy: a push all-gathers each sharded parameter into it."""

    def __init__(self, engine: Any, version: int = 0) -> None:
        self.engine = engine
        self.engine.policy_version = version

    def push(self, model: torch.nn.Module, version: int) -> None:
        with torch.no_grad():
            for target, source in zip(self.engine.model.parameters(), model.parameters(), strict=True):
                target.copy_(full(source))
        self.engine.policy_version = version

    @property
    def version(self) -> int:
        return self.engine.policy_version


def full_optimizer_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """The optimizer's whole state keyed by parameter name (on rank 0; a collective)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    return get_optimizer_state_dict(model, optimizer, options=options)


def load_full_optimizer_state(
    model: torch.nn.Module, optimizer: torch.optim.Optimizer, state: dict[str, Any]
) -> None:
    """Load a state written by :func:`full_optimizer_state` into this rank's shards."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

    options = StateDictOptions(full_state_dict=True)
    set_optimizer_state_dict(model, optimizer, state, options=options)
