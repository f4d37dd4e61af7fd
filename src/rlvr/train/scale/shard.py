"""One rank's share of a policy update, and the gradient sum that joins the shares.

Every rank holds the whole batch (the collector all-gathers it, :mod:`rlvr.train.scale.distributed`)
and walks the same epochs and minibatches, in the same shuffled order. For each minibatch:

1. the loss weights are computed over the **whole** minibatch
   (:func:`rlvr.algo.token_weights`: the token count for ``token-mean``, the sequence count for the
   ``seq-mean-*`` modes, times ``loss_scale``), so every rank's rows carry the global denominators;
2. the minibatch's groups are assigned to ranks (whole groups, balanced by tokens) and each rank
   runs forward and backward over its own rows only, micro-batch by micro-batch;
3. the gradients are **summed** over the ranks (DDP with a summing communication hook, or FSDP2
   with a divide factor of 1), which gives the gradient of the one-process loss.

A rank with fewer micro-batches than the others runs zero-weight passes over rows of the
minibatch, so that every rank takes part in every collective (DDP needs one synchronising
backward per step; FSDP2 needs the same forward and backward calls). Their gradient is exactly 0.
Diagnostics are summed over the ranks too: the token-weighted ones use the whole minibatch's token
count, so their sum is the one-process mean.

The no-gradient passes over the whole batch (the reference's logprobs, the old policy's of a
multi-epoch or multi-minibatch update, a critic's values) are split the same way
(:meth:`Shard.split_pass`): each rank runs its whole groups of the batch, and the rows are
all-gathered, so every rank holds the one-process tensor, in the batch's order, without N ranks
each computing all of it. Through a sharded (FSDP2) policy, where a forward is a collective, a rank
with fewer micro-batches runs filler passes.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from rlvr.train.learn.batch import TrainBatch
from rlvr.train.learn.logprobs import completion_logprobs
from rlvr.train.scale.distributed import REPLICATED_METRICS, Ranks


def assign_groups(costs: list[float], world: int) -> list[int]:
    """The rank of each group: largest first, each to the least loaded rank (ties: lowest rank).

    Deterministic, so every rank computes the same assignment from the same batch."""
    order = sorted(range(len(costs)), key=lambda g: (-costs[g], g))
    heap = [(0.0, rank) for rank in range(world)]
    owner = [0] * len(costs)
    for g in order:
        load, rank = heapq.heappop(heap)
        owner[g] = rank
        heapq.heappush(heap, (load + costs[g], rank))
    return owner


def _no_buffer_sync() -> dict[str, bool]:
    """DDP's switch for broadcasting buffers at every forward, off (renamed in recent torch)."""
    import inspect

    from torch.nn.parallel import DistributedDataParallel

    names = inspect.signature(DistributedDataParallel).parameters
    key = "forward_sync_buffers" if "forward_sync_buffers" in names else "broadcast_buffers"
    return {key: False}


def _sum_hook(group, bucket):  # noqa: ANN001, ANN202
    """DDP communication hook: all-reduce SUM (DDP's default averages over the ranks)."""
    work = dist.all_reduce(bucket.buffer(), group=group, async_op=True)
    return work.get_future().then(lambda fut: fut.value()[0])


@dataclass
class Shard:
    """What a rank needs to train on its share: its place, the wrapped module, what it syncs."""

    ranks: Ranks
    mode: str  # "ddp" or "fsdp2"
    owned: set[int] = field(default_factory=set)  # ids of the parameters the wrapper reduces itself
    module: torch.nn.Module | None = None  # the FSDP2 root (fsdp2)

    @classmethod
    def ddp(cls, policy: torch.nn.Module, ranks: Ranks) -> tuple[torch.nn.Module, Shard]:
        """Wrap ``policy`` in DDP with summed gradients; returns (module to train through, shard).

        Buffers are not broadcast at every forward (a Llama's are constant rotary tables), so a
        forward pass is local and only the synchronising backward communicates."""
        from torch.nn.parallel import DistributedDataParallel

        wrapped = DistributedDataParallel(policy, **_no_buffer_sync())
        wrapped.register_comm_hook(dist.group.WORLD, _sum_hook)
        owned = {id(p) for p in policy.parameters() if p.requires_grad}
        return wrapped, cls(ranks, "ddp", owned)

    # ----------------------------------------------------------------------------- the split
    def row_owners(self, batch: TrainBatch) -> torch.Tensor:
        """The rank of each row of ``batch`` [B] (on the CPU): whole groups, balanced by tokens."""
        index = batch.group_index.cpu()
        groups = int(index.max()) + 1
        prompt_tokens = batch.prompt_mask.sum(dim=1)[batch.group_index]
        row_cost = batch.completion_attention.sum(dim=1).float() + prompt_tokens
        costs = torch.zeros(groups).index_add_(0, index, row_cost.float().cpu()).tolist()
        return torch.tensor(assign_groups(costs, self.ranks.world))[index]

    def split_pass(
        self,
        batch: TrainBatch,
        micro: int,
        compute: Callable[[TrainBatch], torch.Tensor],
        collective: bool = False,
    ) -> torch.Tensor:
        """A no-gradient pass over ``batch`` split over the ranks: ``compute`` ([b, T'] of the rows
        of a batch, ``micro`` rows per forward) runs over this rank's groups only, and the rows are
        all-gathered, so every rank returns the [B, T] tensor of the whole batch, in its order.

        ``collective``: a forward of ``compute``'s module is a collective (an FSDP2-sharded policy),
        so a rank with fewer micro-batches than another runs ``compute`` on a filler of one
        micro-batch as many times as it is short, its result discarded, and every rank makes the
        same number of forward calls. Afterwards FSDP2's units free their full parameters (kept
        after a forward, ``reshard_after_forward=False``, for the backward that does not come)."""
        owner = self.row_owners(batch)
        mine = (owner == self.ranks.rank).nonzero().flatten()
        out = torch.zeros_like(batch.sampling_logprobs)
        if len(mine):
            local = batch.select(mine)
            out[mine.to(out.device), : local.completion_width] = compute(local)
        if collective:
            passes = [-(-int((owner == r).sum()) // micro) for r in range(self.ranks.world)]
            filler = batch.select(slice(0, min(micro, len(batch))))
            for _ in range(max(passes) - passes[self.ranks.rank]):
                compute(filler)
            if self.mode == "fsdp2":
                from rlvr.train.scale.fsdp import reshard_all

                reshard_all(self.module)
        parts = self.ranks.gather_all(out[mine.to(out.device)].cpu())
        for rank, part in enumerate(parts):
            out[(owner == rank).nonzero().flatten().to(out.device)] = part.to(out.device)
        return out

    def local(
        self, mini: TrainBatch, weights: torch.Tensor, micro: int, rows: torch.Tensor
    ) -> tuple[TrainBatch, torch.Tensor, list[slice], list[TrainBatch], torch.Tensor]:
        """This rank's rows of the minibatch ``mini`` (rows ``rows`` of the whole batch): the rows
        as a batch, their (global) ``weights``, its micro-batch slices, the zero-weight passes that
        keep it in step with the other ranks, and their rows in the whole batch."""
        owner = self.row_owners(mini)
        counts = [int((owner == r).sum()) for r in range(self.ranks.world)]
        micro_counts = [-(-n // micro) for n in counts]
        pads = (max(micro_counts) if self.mode == "fsdp2" else 1) - micro_counts[self.ranks.rank]
        padding = [mini.select(slice(0, min(micro, len(mini))))] * pads if pads > 0 else []
        mine = (owner == self.ranks.rank).nonzero().flatten()
        if len(mine) == 0:
            return mini, weights, [], padding, rows
        local = mini.select(mine.to(weights.device))
        local_weights = weights[mine.to(weights.device)][:, : local.completion_width]
        return local, local_weights, _slices(len(local), micro), padding, rows[mine.to(rows.device)]

    def sync_on_backward(self, model: torch.nn.Module, last: bool) -> None:
        """Reduce gradients in the next backward only when it is this step's last one."""
        if self.mode == "ddp":
            model.require_backward_grad_sync = last  # what DDP.no_sync() toggles
        else:
            model.set_requires_gradient_sync(last)

    def pad(self, model: torch.nn.Module, padding: list[TrainBatch], temperature: float) -> None:
        """Zero-weight forward and backward passes: gradient exactly 0, collectives as the others'."""
        for i, filler in enumerate(padding):
            self.sync_on_backward(model, last=i == len(padding) - 1)
            logprobs = completion_logprobs(model, filler, temperature)[0]
            (logprobs.sum() * 0.0).backward()

    # ----------------------------------------------------------------------------- after backward
    def reduce_grads(self, params: list[torch.nn.Parameter]) -> None:
        """Sum over the ranks the gradients the wrapper does not reduce (a value head, a separate
        critic). A parameter without a gradient on every rank keeps none (the optimizer skips it)."""
        if self.mode == "fsdp2":
            from rlvr.train.scale.fsdp import reshard_all

            reshard_all(self.module)
        unique = {id(p): p for p in params}.values()  # a value head is listed twice
        extra = [p for p in unique if p.requires_grad and id(p) not in self.owned]
        if not extra:
            return
        device = extra[0].device
        has = torch.tensor([p.grad is not None for p in extra], dtype=torch.float32, device=device)
        dist.all_reduce(has)
        live = [p for p, h in zip(extra, has.tolist()) if h > 0]
        for p in live:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        if live:
            flat = torch.cat([p.grad.reshape(-1) for p in live])
            dist.all_reduce(flat)
            at = 0
            for p in live:
                n = p.grad.numel()
                p.grad.copy_(flat[at : at + n].view_as(p.grad))
                at += n

    def reduce_sums(self, sums: dict[str, float]) -> dict[str, float]:
        """The update's diagnostics summed over the ranks (replicated ones kept as they are)."""
        total: dict[str, float] = {}
        for part in self.ranks.gather_all(dict(sums)):
            for key, value in part.items():
                if key not in REPLICATED_METRICS:
                    total[key] = total.get(key, 0.0) + value
        return {**total, **{k: v for k, v in sums.items() if k in REPLICATED_METRICS}}


def _slices(n: int, size: int) -> list[slice]:
    return [slice(start, min(start + size, n)) for start in range(0, n, size)]


def distribute_learner(learner, ranks: Ranks, mode: str) -> None:  # noqa: ANN001
    """Make ``learner`` (a :class:`rlvr.train.learn.learner.Learner`) train its rank's share, its update
    split by :class:`Shard`: ``ddp`` wraps its policy; for ``fsdp2`` the policy was sharded before
    the learner built its optimizer (:func:`rlvr.train.scale.fsdp.shard_policy`)."""
    if mode == "ddp":
        learner.train_model, learner.shard = Shard.ddp(learner.model, ranks)
    elif mode == "fsdp2":
        owned = {id(p) for p in learner.model.parameters()}
        learner.train_model, learner.shard = learner.model, Shard(ranks, "fsdp2", owned, learner.model)
    else:
        raise ValueError(f"unknown train.distributed '{mode}'")
