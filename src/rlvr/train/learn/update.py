"""One policy update on a scored rollout batch: epochs × minibatches × micro-batches.

The algorithm enters only through registered functions (loss, KL estimator, aggregation weights);
nothing here knows which method is running.
"""

from __future__ import annotations

import inspect
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import TYPE_CHECKING, Any

import torch

from rlvr.algo import KL_ESTIMATORS, POLICY_LOSSES, token_weights, value_loss
from rlvr.algo.importance import sampler_log_ratio
from rlvr.config.schema import AlgoConfig
from rlvr.registry import accepted_context
from rlvr.train.learn.batch import TrainBatch
from rlvr.train.learn.logprobs import completion_logprobs, packing_applies
from rlvr.train.learn.packing import completion_lengths, micro_batches

if TYPE_CHECKING:
    from rlvr.models.precision import Precision
    from rlvr.train.learn.critic import Critic
    from rlvr.train.scale.shard import Shard


# losses that already weigh or mask every row by π_old/π_sampler from the rows' own sampling logprobs
# (rlvr.algo.importance): a replayed row is corrected there, not a second time
SAMPLER_CORRECTED = frozenset({"tis", "masked_is"})


def replay_weights(old: torch.Tensor, batch: TrainBatch, cap: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The truncated importance weight ``min(π_old/π_behaviour, cap)`` (detached) on the sampled
    tokens of a batch's replayed rows, 1 elsewhere; and where it applies (both [B, T]). The
    behaviour policy is the older one whose sampling logprobs a replayed row kept."""
    ratio = sampler_log_ratio(old, batch.sampling_logprobs).exp().clamp(max=cap)
    on = batch.replayed[:, None].expand_as(ratio)
    if batch.given_mask is not None:
        on = on & (batch.given_mask == 0)
    return torch.where(on, ratio, torch.ones_like(ratio)), on


@contextmanager
def captured_logits(model: torch.nn.Module, store: list[torch.Tensor]) -> Iterator[None]:
    """Append the logits of each forward pass of ``model`` to ``store`` while open (for a loss that
    names ``logsumexp``: the fused scoring keeps its log-sum-exp to itself)."""

    def keep(_module: torch.nn.Module, _args: Any, output: Any) -> None:
        store.append(output.logits)

    handle = model.register_forward_hook(keep)
    try:
        yield
    finally:
        handle.remove()


def logits_logsumexp(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """log Σ_v exp(logits_v / T) per position [B, T], in float32 and differentiable: the log
    normaliser of the distribution the logprobs are taken from (logprob = logit/T − it)."""
    x = logits.float()
    if temperature and temperature != 1.0:
        x = x / temperature
    return x.logsumexp(dim=-1)


def _micro_slices(n: int, size: int) -> list[slice]:
    return [slice(start, min(start + size, n)) for start in range(0, n, size)]


@torch.no_grad()
def batch_logprobs(
    model: torch.nn.Module,
    batch: TrainBatch,
    micro: int,
    temperature: float,
    autocast: AbstractContextManager | None = None,
) -> torch.Tensor:
    """Logprobs [B, T] of the whole batch without gradient (old policy or reference), computed
    under ``autocast`` (the training precision's) when given."""
    out = torch.zeros_like(batch.sampling_logprobs)
    with autocast or nullcontext():
        for rows in _micro_slices(len(batch), micro):
            sub = batch.select(rows)
            out[rows, : sub.completion_width] = completion_logprobs(model, sub, temperature)[0]
    return out


@torch.no_grad()
def batch_logprobs_entropy(
    model: torch.nn.Module,
    batch: TrainBatch,
    micro: int,
    temperature: float,
    autocast: AbstractContextManager | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`batch_logprobs` and the per-token entropy [B, T] of the model's distribution (the
    reference's confidence, for the critical-token KL)."""
    out, entropy = torch.zeros_like(batch.sampling_logprobs), torch.zeros_like(batch.sampling_logprobs)
    with autocast or nullcontext():
        for rows in _micro_slices(len(batch), micro):
            sub = batch.select(rows)
            logprobs, ent = completion_logprobs(model, sub, temperature, with_entropy=True)
            out[rows, : sub.completion_width], entropy[rows, : sub.completion_width] = logprobs, ent
    return out, entropy


def lopti_part(old_logprobs: torch.Tensor, mask: torch.Tensor, threshold: float, low: bool) -> torch.Tensor:
    """Lopti's token pass (seeds 003:12): the valid tokens whose probability under the policy before
    the update is below ``threshold`` (``low``) or not."""
    below = (old_logprobs[:, : mask.shape[1]].exp() < threshold).to(mask.dtype)
    return mask * (below if low else 1.0 - below)


def update_passes(
    batch: TrainBatch,
    minibatches: int,
    generator: torch.Generator | None,
    old_all: torch.Tensor | None,
    isolation: float | None,
) -> Iterator[tuple[torch.Tensor, torch.Tensor | None]]:
    """The optimizer steps of one epoch: each minibatch's rows, and the token mask the step trains
    on. Without ``isolation`` one step per minibatch over all its tokens (mask None). With it
    (Lopti), two: the low-probability tokens first, then the rest, each step its own gradient; a pass
    with no tokens is left out (an optimizer step on nothing would still move the weights through
    Adam's momentum)."""
    for rows in minibatch_rows(batch, minibatches, generator):
        if isolation is None:
            yield rows, None
            continue
        mask = batch.completion_mask[rows]
        for low in (True, False):
            part = lopti_part(old_all[rows], mask, isolation, low)
            if part.sum() > 0:
                yield rows, part


def split_logprobs(
    model: torch.nn.Module,
    batch: TrainBatch,
    micro: int,
    temperature: float,
    autocast: Callable[[], AbstractContextManager] = nullcontext,
    shard: Shard | None = None,
) -> torch.Tensor:
    """:func:`batch_logprobs` of the whole batch; under torchrun (a ``shard``) each rank computes
    its groups' rows and every rank gets them all (:meth:`Shard.split_pass`). ``model`` may be the
    DDP or FSDP2 module the update trains through: DDP's is unwrapped (its no-gradient forward is
    local); an FSDP2 module's forward is a collective, so every rank makes the same number of them.
    The reference model is never wrapped: its passes are local."""
    if shard is None:
        return batch_logprobs(model, batch, micro, temperature, autocast())
    from torch.distributed.fsdp import FSDPModule
    from torch.nn.parallel import DistributedDataParallel

    if isinstance(model, DistributedDataParallel):
        model = model.module
    collective = isinstance(model, FSDPModule)
    return shard.split_pass(
        batch, micro, lambda rows: batch_logprobs(model, rows, micro, temperature, autocast()), collective
    )


def mismatch_metrics(trainer: torch.Tensor, sampler: torch.Tensor, mask: torch.Tensor) -> dict[str, float]:
    """How far the trainer's logprobs [B, T] of the sampled tokens are from the sampler's, before
    the update: per token (mean and max of |Δ|, and the k3 estimate of KL(sampler ‖ trainer)) and per
    sequence (the spread of the importance ratio π_trainer / π_sampler over the sequence's tokens).
    Zero when both compute with the same weights in the same precision; a bf16 sampler against an
    fp32 trainer is what makes them differ (docs/precision.md)."""
    mask = mask.to(trainer.dtype)
    tokens = mask.sum().clamp(min=1)
    delta = (trainer - sampler) * mask  # log π_trainer − log π_sampler per sampled token
    seq_log_ratio = delta.sum(dim=1)
    k3 = (torch.expm1(-delta) + delta) * mask  # E_sampler[r − 1 − log r], r = π_trainer/π_sampler
    seq_ratio = seq_log_ratio.exp()
    return {
        "mismatch/logprob_diff_mean": float(delta.abs().sum() / tokens),
        "mismatch/logprob_diff_max": float(delta.abs().max()) if delta.numel() else 0.0,
        "mismatch/kl": float(k3.sum() / tokens),
        "mismatch/seq_log_ratio_std": float(seq_log_ratio.std()) if len(seq_log_ratio) > 1 else 0.0,
        "mismatch/seq_ratio_min": float(seq_ratio.min()),
        "mismatch/seq_ratio_max": float(seq_ratio.max()),
    }


def minibatch_rows(batch: TrainBatch, count: int, generator: torch.Generator | None) -> list[torch.Tensor]:
    """Split completion rows into ``count`` minibatches of whole groups (shuffled when count > 1).

    Keeping a group together lets its prompt be encoded once per micro-batch.
    """
    groups = int(batch.group_index.max()) + 1
    order = torch.randperm(groups, generator=generator) if count > 1 else torch.arange(groups)
    rows = []
    for chunk in order.chunk(min(count, groups)):
        rows.append(torch.cat([(batch.group_index == g).nonzero().flatten() for g in chunk.tolist()]))
    return rows


def policy_update(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler,
    batch: TrainBatch,
    cfg: AlgoConfig,
    grad_clip: float,
    temperature: float,
    max_new_tokens: int,
    ref_model: torch.nn.Module | None = None,
    generator: torch.Generator | None = None,
    critic: Critic | None = None,
    kl_coef: float | None = None,
    loss_context: dict[str, Any] | None = None,
    loss_scale: float = 1.0,
    precision: Precision | None = None,
    scaler: torch.amp.GradScaler | None = None,
    shard: Shard | None = None,
    aux_loss: Callable[[], tuple[torch.Tensor, dict[str, float]]] | None = None,
    main_weight: float = 1.0,
    replay_cap: float = 2.0,
) -> dict[str, float]:
    """Update ``model`` (and ``critic``) on ``batch``; return diagnostics averaged over optimizer steps.

    ``kl_coef`` overrides ``cfg.kl_coef`` (an adaptive coefficient); KL is a loss term only when it
    is not in the reward (``cfg.kl_in_reward``). ``loss_context`` is offered to the loss on top of
    the update's own context (e.g. an adaptive ``entropy_coef``). With a ``critic``, the batch
    carries ``returns`` and ``old_values`` and ``critic.vf_coef`` × the clipped value loss,
    aggregated with the policy loss's token weights, is added to the loss. ``loss_scale`` multiplies
    those weights (``algo.loss_norm=sampled``: the kept share of the sampled batch). With a
    ``shard`` (torchrun), ``model`` is the DDP/FSDP2 module and this rank trains on its groups of
    each minibatch, weighted over the whole minibatch (:mod:`rlvr.train.scale.shard`).
    ``precision`` runs the forward passes under its autocast (mixed precision); ``scaler`` scales
    the loss and unscales the gradients before clipping (fp16 mixed precision).

    Another objective can share the optimizer steps: ``main_weight`` multiplies the policy loss
    (with its KL term; not a critic's value loss), and ``aux_loss`` is called once per optimizer
    step, under the precision's autocast, after the micro-batches; its loss's backward adds to
    their gradients before clipping and the step, and its stats are returned under their own names
    (averaged over the steps). A batch's ``given_mask`` (demonstration tokens) is offered to the
    loss as ``given_mask``; the sampler diagnostics skip those tokens, which have no sampling
    logprob. A batch's ``replayed`` rows (past samples, an older policy's) have their per-token
    loss weighted by :func:`replay_weights` with ``replay_cap`` (unless the loss corrects every
    row already: :data:`SAMPLER_CORRECTED`); the sampler diagnostics skip them too.
    """
    if aux_loss is not None and shard is not None:
        raise ValueError("policy_update: an aux_loss is not supported under torchrun (a shard) yet")
    autocast = precision.autocast if precision is not None else nullcontext
    loss_fn = POLICY_LOSSES.get(cfg.loss)
    loss_names = inspect.signature(loss_fn).parameters
    entropy_mode = "grad" if "entropy_with_grad" in loss_names else True
    with_lse = "logsumexp" in loss_names  # a [B, T, V] graph, only for a loss that names it
    kl_fn = KL_ESTIMATORS.get(cfg.kl_estimator)
    isolation = cfg.lowprob_isolation  # Lopti's probability threshold, or None
    critical = cfg.reference.critical_kl  # the critical-token KL's α, or 0
    if shard is not None and (isolation is not None or critical > 0):
        raise ValueError(
            "algo.lowprob_isolation and algo.reference.critical_kl are not supported under torchrun yet"
        )
    # Lopti's second pass needs the logprobs from before its first: they are frozen, as off-policy
    on_policy = cfg.epochs == 1 and cfg.minibatches == 1 and isolation is None
    # On-policy, the old policy *is* the current one: its logprobs are the forward pass's own,
    # detached, and no extra pass is needed. Otherwise they are frozen before the first step.
    # Under torchrun each rank computes its share of these no-gradient passes (split_logprobs).
    micro_size = cfg.micro_batch_size
    old_all = None if on_policy else split_logprobs(model, batch, micro_size, temperature, autocast, shard)
    kl_coef = cfg.kl_coef if kl_coef is None else kl_coef
    ref_all = ref_weight = None
    if kl_coef > 0 and ref_model is not None and not cfg.kl_in_reward:
        if critical > 0:  # each token's KL weighted by the reference's confidence there
            ref_all, ref_h = batch_logprobs_entropy(ref_model, batch, micro_size, temperature, autocast())
            ref_weight = torch.exp(-critical * ref_h)
        else:
            ref_all = split_logprobs(ref_model, batch, micro_size, temperature, autocast, shard)
    if critic is not None and (batch.returns is None or batch.old_values is None):
        raise ValueError("a critic's update needs batch.returns and batch.old_values")
    with_hidden = critic is not None and critic.shares_policy
    params = [p for group in optimizer.param_groups for p in group["params"]]
    # the trainer's logprobs of the sampled tokens before this update, for the mismatch metrics
    before = old_all if old_all is not None else torch.zeros_like(batch.sampling_logprobs)

    sums: dict[str, float] = defaultdict(float)
    aux_sums: dict[str, float] = defaultdict(float)
    updates = 0
    for _ in range(cfg.epochs):
        for rows, part in update_passes(batch, cfg.minibatches, generator, old_all, isolation):
            mini = batch.select(rows)
            weights = token_weights(mini.completion_mask, cfg.loss_agg, max_new_tokens) * loss_scale
            if part is not None:  # Lopti: this step trains on these tokens only, weighted as in the whole
                weights = weights * part
            token_total = mini.completion_mask.sum().clamp(min=1)
            sampled_total = token_total  # the tokens with a sampling logprob
            if mini.given_mask is not None:
                sampled_total = (mini.completion_mask * (1.0 - mini.given_mask)).sum().clamp(min=1)
            if mini.replayed is not None:  # an older policy's logprobs (the diagnostics skip them)
                fresh = mini.completion_mask * ~mini.replayed[:, None]
                sampled_total = (
                    (fresh if mini.given_mask is None else fresh * (1.0 - mini.given_mask)).sum().clamp(min=1)
                )
            slices, padding = _micro_slices(len(mini), cfg.micro_batch_size), []
            # packed rows, except for a loss that reads the logits' [B, T] layout (logsumexp)
            pack = not with_lse and packing_applies(model, mini)
            if pack and completion_lengths(mini.completion_attention) is not None:
                slices = micro_batches(mini, cfg.micro_batch_size)  # as many tokens as that many rows
            if shard is not None:  # this rank's groups, with the whole minibatch's weights
                mini, weights, slices, padding, rows = shard.local(mini, weights, cfg.micro_batch_size, rows)
            optimizer.zero_grad(set_to_none=True)
            if critic is not None:
                critic.zero_grad()
            for i, micro_rows in enumerate(slices):
                if shard is not None:
                    shard.sync_on_backward(model, last=i == len(slices) - 1 and not padding)
                micro = mini.select(micro_rows)
                width, mask = micro.completion_width, micro.completion_mask
                logits: list[torch.Tensor] = []
                with autocast(), captured_logits(model, logits) if with_lse else nullcontext():
                    logprobs, entropy, *hidden = completion_logprobs(
                        model,
                        micro,
                        temperature,
                        with_entropy=entropy_mode,
                        with_hidden=with_hidden,
                        packing=pack,
                    )
                if old_all is None:  # on-policy: one minibatch, one step, so this is before the update
                    before[rows[micro_rows], :width] = logprobs.detach()
                old = logprobs.detach() if old_all is None else old_all[rows][micro_rows, :width]
                context = {
                    "clip_low": cfg.clip_low,
                    "clip_high": cfg.clip_high,
                    "entropy": entropy.detach(),
                    "entropy_with_grad": entropy,
                    "sampling_logprobs": micro.sampling_logprobs,
                    "truncated": micro.truncated,
                    "group_index": micro.group_index,  # each row's prompt (copg pairs a prompt's rows)
                    "completion_ids": micro.completion_ids,  # [B, T] the tokens (hicra reads their text)
                    # the completion pass's (the last one's) log-normaliser per position, with gradient
                    **({"logsumexp": logits_logsumexp(logits[-1], temperature)} if with_lse else {}),
                    **({} if micro.given_mask is None else {"given_mask": micro.given_mask}),
                    **(loss_context or {}),
                }
                kwargs = accepted_context(loss_fn, context, cfg.loss_params, "algo.loss_params")
                per_token, stats = loss_fn(logprobs, old, micro.advantages, mask, **kwargs)
                if micro.replayed is not None and cfg.loss not in SAMPLER_CORRECTED:
                    replay_w, on = replay_weights(old, micro, replay_cap)
                    per_token = per_token * replay_w
                    sums["_replay_w"] += float((replay_w * mask * on).sum())
                    sums["_replay_n"] += float((mask * on).sum())
                w = weights[micro_rows, :width]
                loss = (per_token * w).sum()
                if ref_all is not None:
                    kl = kl_fn(logprobs, ref_all[rows][micro_rows, :width])
                    if ref_weight is not None:  # less KL where the reference is unsure (critical tokens)
                        kl = kl * ref_weight[rows][micro_rows, :width]
                    loss = loss + kl_coef * (kl * w).sum()
                    sums["kl"] += float((kl.detach() * w).sum())
                if main_weight != 1.0:
                    loss = main_weight * loss
                if critic is not None:
                    with autocast():
                        values = critic.values(micro, hidden[0] if hidden else None)
                    v_loss, v_stats = value_loss(
                        values, micro.old_values, micro.returns, mask, cfg.critic.value_clip
                    )
                    v_loss = (v_loss * w).sum()
                    loss = loss + cfg.critic.vf_coef * v_loss
                    sums["value_loss"] += float(v_loss.detach())
                    stats = {**stats, **v_stats}
                (scaler.scale(loss) if scaler is not None else loss).backward()
                sums["loss"] += float(loss.detach())
                # Token-weighted diagnostics use the same weights as the loss, so they sum to means.
                token_share = float(mask.sum() / token_total)
                n_tok = mask.sum().clamp(min=1)
                sums["entropy"] += float((entropy.detach() * mask).sum() / n_tok) * token_share
                sampled = mask if micro.given_mask is None else mask * (1.0 - micro.given_mask)
                if micro.replayed is not None:  # an older policy's logprobs: not the engine's mismatch
                    sampled = sampled * ~micro.replayed[:, None]
                sums["sampler_logprob_diff"] += float(
                    ((logprobs.detach() - micro.sampling_logprobs).abs() * sampled).sum()
                    / sampled.sum().clamp(min=1)
                ) * float(sampled.sum() / sampled_total)
                for key, value in stats.items():
                    sums[key] += value * token_share
            if aux_loss is not None:  # another objective's gradient, in the same step
                with autocast():
                    extra, extra_stats = aux_loss()
                (scaler.scale(extra) if scaler is not None else extra).backward()
                for key, value in extra_stats.items():
                    aux_sums[key] += value
            if shard is not None:
                with autocast():  # the same passes as the other ranks' (FSDP2 orders its reductions by them)
                    shard.pad(model, padding, temperature)
                shard.reduce_grads(params + (list(critic.module().parameters()) if critic else []))
            if scaler is not None:
                scaler.unscale_(optimizer)  # clip the true gradients, not the scaled ones
            sums["grad_norm"] += float(torch.nn.utils.clip_grad_norm_(params, grad_clip))
            sums["lr"] += scheduler.get_last_lr()[0]
            if scaler is not None:
                scaler.step(optimizer)  # skipped when the gradients overflowed; the scale then shrinks
                scaler.update()
                sums["loss_scale_fp16"] += scaler.get_scale()
            else:
                optimizer.step()
            scheduler.step()
            if critic is not None:
                for key, value in critic.step(grad_clip).items():
                    sums[key] += value
            updates += 1
    if shard is not None:
        sums = shard.reduce_sums(sums)
        if old_all is None:  # each rank filled in the rows it trained on
            before = sum(shard.ranks.gather_all(before))
    replay_w, replay_n = sums.pop("_replay_w", 0.0), sums.pop("_replay_n", 0.0)
    metrics = {f"update/{key}": value / updates for key, value in sums.items()}
    if replay_n:
        metrics["update/replay_is_weight_mean"] = replay_w / replay_n
    metrics.update({key: value / updates for key, value in aux_sums.items()})
    if isolation is not None:  # the share of the trained tokens in Lopti's first (low-probability) pass
        low = lopti_part(old_all, batch.completion_mask, isolation, low=True)
        metrics["update/lopti_low_share"] = float(low.sum() / batch.completion_mask.sum().clamp(min=1))
    sampled, keep = batch.completion_mask, slice(None)
    if batch.given_mask is not None:  # given tokens have no sampling logprob; rows of them none at all
        sampled = batch.completion_mask * (1.0 - batch.given_mask)
        keep = sampled.sum(dim=1) > 0
    if batch.replayed is not None:  # an older policy sampled these: not the engine's mismatch
        keep = (sampled.sum(dim=1) > 0) & ~batch.replayed
    if sampled[keep].numel():
        metrics.update(mismatch_metrics(before[keep], batch.sampling_logprobs[keep], sampled[keep]))
    return metrics
