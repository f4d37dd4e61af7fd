"""``rlvr serve`` under torchrun: one server, its training spread over the ranks.

``torchrun --nproc-per-node N -m rlvr.cli serve ...`` runs
the HTTP server and the request queue on rank 0 only. Every other rank builds the same service and
follows: before rank 0's worker runs a request that changes a training model (creating or loading
one, ``forward_backward`` / ``forward``, ``optim_step``, dropping a session's models), it broadcasts
the operation, and every rank runs it in the same order. A ``forward_backward`` splits its datums
into contiguous shards, one per rank (a group's datums stay together, so they keep sharing their
prompt's forward); each rank backpropagates its shard, the per-datum outputs are gathered back in
the request's order, and ``optim_step`` sums the gradients over the ranks first. Tinker's losses
are sums over tokens, so the summed gradient is the whole batch's: the step equals one process's
on the whole request. Sampling and saving stay on rank 0 (every rank holds the same weights).
Loading a checkpoint reads it on every rank (the ranks of one machine, or a shared filesystem).
An operation that fails fails on every rank alike (the same validation runs everywhere).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist

if TYPE_CHECKING:
    from rlvr.serve.service import Service

log = logging.getLogger("rlvr.serve")


def rank_and_world() -> tuple[int, int]:
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def shard(count: int) -> tuple[int, int]:
    """This rank's contiguous slice ``[lo, hi)`` of ``count`` items (ranks past the end get none)."""
    rank, world = rank_and_world()
    per = -(-count // world)
    return min(rank * per, count), min((rank + 1) * per, count)


def gather(local: Any) -> list[Any]:
    """Every rank's ``local``, in rank order (on every rank)."""
    _, world = rank_and_world()
    if world == 1:
        return [local]
    out: list[Any] = [None] * world
    dist.all_gather_object(out, local)
    return out


def sum_gradients(params: list[torch.nn.Parameter]) -> None:
    """Each parameter's gradient summed over the ranks (a rank with none adds zeros)."""
    _, world = rank_and_world()
    if world == 1:
        return
    # a parameter no rank has a gradient for keeps none (the optimizer skips it, as in one process)
    has = torch.tensor([p.grad is not None for p in params], dtype=torch.int32)
    dist.all_reduce(has, op=dist.ReduceOp.SUM)
    for p, anyone in zip(params, has.tolist(), strict=True):
        if anyone:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            dist.all_reduce(p.grad, op=dist.ReduceOp.SUM)


def announce(op: str, *args: Any) -> None:
    """Rank 0: tell the followers to run ``op`` (called from rank 0's worker, in execution order)."""
    rank, world = rank_and_world()
    if world > 1 and rank == 0:
        dist.broadcast_object_list([op, args], src=0)


def follow(service: Service) -> None:
    """Ranks > 0: run rank 0's operations until it says stop."""
    while True:
        message: list[Any] = [None, None]
        dist.broadcast_object_list(message, src=0)
        op, args = message
        if op == "stop":
            return
        try:
            OPERATIONS[op](service, *args)
        except Exception as err:  # rank 0 met the same error and reported it to its client
            log.info("follower: %s failed as on rank 0: %s", op, err)


def _build(service: Service, model_id: str, session_id: str, lora: dict[str, Any]) -> None:
    service._build(model_id, session_id, lora)


def _forward_backward(service: Service, model_id: str, fb: Any) -> None:
    service.model(model_id).forward_backward(fb)


def _optim_step(service: Service, model_id: str, adam: Any) -> None:
    service.model(model_id).optim_step(adam)


def _load(service: Service, *args: Any) -> None:
    service._load_state(*args)


def _drop(service: Service, model_ids: list[str]) -> None:
    with service.lock:
        for model_id in model_ids:
            service.models.pop(model_id, None)


OPERATIONS = {
    "build": _build,
    "forward_backward": _forward_backward,
    "optim_step": _optim_step,
    "load": _load,
    "drop": _drop,
}
