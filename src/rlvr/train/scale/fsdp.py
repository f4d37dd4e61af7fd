"""FSDP2 (``fully_shard``) for the policy under torchrun: ``train.distributed=fsdp2``.

Each decoder layer (the classes a transformers model lists in ``_no_split_modules``) and then the
whole model become FSDP2 units: every rank keeps a 1/N shard of each parameter, gradient and
AdamW state, and a unit's full parameters exist only while it computes. Gradients are summed over
the ranks (divide factor 1, SUM reductions: gloo has no pre-multiplied sum), the same as
:class:`rlvr.train.scale.shard.Shard` does for DDP, so the update equals one process's.

A sharded module cannot generate on its own rank without the others taking part in every decode
step, so each rank's engine samples from whole weights of its own:

- the HF engine from a full copy in the rollout dtype (fp32, or the bf16/fp16 copy of
  ``rollout.weights_dtype``), refreshed after each update by :class:`FullCopySync`: an all-gather
  per parameter, cast into the copy as it is copied;
- the vLLM engine (its own server per rank) from the parameters the push gathers one by one from
  the shards (:class:`~rlvr.rollout.vllm_engine.VLLMWeightSync`); no full copy is kept here.

A checkpoint does not save a sampling copy (it may be bf16, or absent): :func:`gathered_model`
gathers the master weights from the shards, one parameter at a time to rank 0's CPU, into a plain
(unsharded) module of the policy's class that rank 0 saves. The optimizer's state is saved whole
(gathered to rank 0) and loaded back into the shards.
"""

from __future__ import annotations

import copy
import sys
from typing import Any

import torch
import torch.distributed as dist


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
    # (rlvr.train.learn.logprobs): gradient reaches a layer's prompt pass through the cache, not through
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
    """The whole tensor of a DTensor shard (a collective: every rank calls it), else itself.

    ``torch.distributed.tensor`` is not imported here: it costs 0.7 s at every start of rlvr, and no
    tensor is a DTensor until something (``fully_shard``) has imported it."""
    dtensors = sys.modules.get("torch.distributed.tensor")
    return tensor.full_tensor() if dtensors is not None and isinstance(tensor, dtensors.DTensor) else tensor


def unsharded_frame(policy: torch.nn.Module) -> torch.nn.Module:
    """A copy of ``policy`` (before sharding) whose parameters are on the meta device, so it holds
    no weights: the module :func:`gathered_model` assigns the gathered weights into. Buffers are
    copied as they are (small, and not sharded: rotary tables)."""
    memo: dict[int, Any] = {}
    for p in policy.parameters():  # tied parameters stay tied: one id, one meta parameter
        memo[id(p)] = torch.nn.Parameter(torch.empty_like(p, device="meta"), requires_grad=p.requires_grad)
    return copy.deepcopy(policy, memo)


def gathered_model(model: torch.nn.Module, frame: torch.nn.Module) -> torch.nn.Module | None:
    """The sharded ``model``'s whole weights, in their own (master) dtype, as a plain module: a copy
    of ``frame`` (:func:`unsharded_frame`) on rank 0, None on the others. A collective: every rank
    calls it. Parameters are gathered one at a time and moved to rank 0's CPU as they come, so no
    rank holds more than one whole parameter besides rank 0's CPU copy of the model."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    state = get_model_state_dict(model, options=options)  # empty on ranks other than 0
    if dist.get_rank() != 0:
        return None
    whole = copy.deepcopy(frame)  # meta parameters: nothing is copied
    whole.load_state_dict(state, strict=True, assign=True)
    for names in _tied(frame):  # assign gave each name its own tensor: tie them again (saved once)
        for name in names[1:]:
            parent, _, attr = name.rpartition(".")
            setattr(whole.get_submodule(parent), attr, whole.get_parameter(names[0]))
    return whole


def _tied(module: torch.nn.Module) -> list[list[str]]:
    """The names of each parameter that several names share (tied embeddings), grouped."""
    names: dict[int, list[str]] = {}
    for name, p in module.named_parameters(remove_duplicate=False):
        names.setdefault(id(p), []).append(name)
    return [group for group in names.values() if len(group) > 1]


class FullCopySync:
    """The engine samples from its own full copy (in the rollout dtype): a push all-gathers each
    sharded parameter and copies it in, cast to the copy's dtype (``copy_`` casts). Every rank
    pushes, in the same order."""

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
