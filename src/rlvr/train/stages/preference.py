"""Preference optimisation (the DPO family): groups of two trajectories, ``[chosen, rejected]``.

DPO trains on preference pairs without a reward model (DPO on constructed pairs, seeds/000:7;
offline DPO for reasoning, seeds/003:142; its degenerate optima, seeds/000:24). The pairs come
from one of two sources (``dpo.pairs``):

- ``file``: rows of TRL's preference format, ``prompt`` (text or messages) with ``chosen`` and
  ``rejected`` (text or the assistant messages that follow the prompt). Each member is built as a
  demonstration (:mod:`rlvr.data.demonstrations`: the assistant's tokens ``given``, end-of-turn
  included, template checks applied), split at the prompt so both share ``prompt_ids``;
- ``on_policy``: the collector's sampled, verifier-scored groups, the best-scored completion paired
  with the worst (verifier-built pairs after sampling, as ReST-DPO and VerIPO's GRPO→verifier→DPO
  loop, seeds/003:124, seeds/003:210). Tied groups and errored completions give no pair.

:class:`PreferenceObjective` sums each member's log-probs over its trained tokens under the policy
and the frozen reference and hands them to a registered loss (:data:`rlvr.algo.PREFERENCE_LOSSES`).
A file pair's reference log-probs never change, so they are computed once and kept.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from rlvr.algo import PREFERENCE_LOSSES
from rlvr.collect.collector import Collection
from rlvr.data.chat_data import ChatColumns, _found, _present, rows_to_chat_examples
from rlvr.data.demonstrations import to_demonstration
from rlvr.data.sampler import PromptSampler
from rlvr.errors import RlvrError
from rlvr.train.learn.batch import TrainBatch, build_batch
from rlvr.train.learn.logprobs import completion_logprobs
from rlvr.train.learn.update import _micro_slices, batch_logprobs
from rlvr.trajectory import CONTEXT, SAMPLED, Segment, Trajectory, TrajectoryGroup

if TYPE_CHECKING:
    from rlvr.collect.collector import Collector
    from rlvr.config import RunConfig
    from rlvr.config.stages import DpoConfig
    from rlvr.train.learn.learner import Learner

TIE = 1e-6  # rewards closer than this are a tie (as rlvr.algo.filters.informative_groups)


# ------------------------------------------------------------------------------ pairs from a file
def _rows(path: str, split: str) -> list[tuple[str, Any]]:
    """``(where, row)`` of a local data file (the chat data's readers) or a Hugging Face dataset."""
    from rlvr.data.file_source import _READERS, SUPPORTED_EXTENSIONS

    local = Path(path)
    if local.is_file() or local.suffix.lower() in _READERS:
        if local.suffix.lower() not in _READERS:
            raise RlvrError(
                f"{path}: unknown data file extension {local.suffix or '(none)'!r}; "
                f"supported: {', '.join(SUPPORTED_EXTENSIONS)}."
            )
        if not local.is_file():
            raise RlvrError(f"{path}: data file not found (looked in {local.resolve().parent}).")
        try:
            return list(_READERS[local.suffix.lower()](local))
        except OSError as error:
            raise RlvrError(f"{path}: cannot read the file: {error.strerror or error}.") from error
    from rlvr.data.hf_source import _open, _pick_split

    dataset = _pick_split(_open(path, None), split, path)
    return [(f"{path} [{split}] row {n}", row) for n, row in enumerate(dataset, start=1)]


def _member(tokenizer: Any, example: Any, prompt_messages: int, max_length: int) -> Trajectory:
    """The demonstration of prompt + completion, with everything up to the assistant header of the
    completion as the prompt (an assistant turn inside a multi-turn prompt is not trained)."""
    demo = to_demonstration(tokenizer, example, "all_assistant", max_length, "dpo.max_length")
    text = tokenizer.apply_chat_template(
        example.messages[:prompt_messages], tools=example.tools, add_generation_prompt=True, tokenize=False
    )
    prompt = tokenizer(text, add_special_tokens=False)["input_ids"]
    ledger = demo.prompt_ids + demo.response_ids
    kinds = [CONTEXT] * len(demo.prompt_ids) + [s.kind for s in demo.segments for _ in s.token_ids]
    if ledger[: len(prompt)] != prompt:
        raise RlvrError(
            f"{example.origin}: the chat template renders the prompt (with its generation prompt) "
            "differently once a completion follows, so chosen and rejected cannot share it."
        )
    segments: list[Segment] = []
    for token, kind in zip(ledger[len(prompt) :], kinds[len(prompt) :]):
        if segments and segments[-1].kind == kind:
            segments[-1].token_ids.append(token)
        else:
            segments.append(Segment(kind, [token]))
    return replace(demo, prompt_ids=prompt, segments=segments, example_index=example.index)


def check_pair_row(where: str, row: Any, keys: tuple[str, str, str], section: str) -> None:
    """A preference row must be an object with its prompt, chosen and rejected ``keys`` present
    (the error names the row, the columns found and the ``section``'s keys that rename them)."""
    if not isinstance(row, dict):
        raise RlvrError(f"{where}: expected an object with named fields, got {type(row).__name__}.")
    prompt, chosen, rejected = keys
    for key in keys:
        if not _present(row, key):
            raise RlvrError(
                f"{where}: column {key!r} is missing or null; a preference pair needs {prompt!r}, "
                f"{chosen!r} and {rejected!r} (columns found: {_found(row)}). Set {section}.prompt_key, "
                f"{section}.chosen_key and {section}.rejected_key to the columns that hold them."
            )


def pair_group(tokenizer: Any, d: DpoConfig, where: str, row: Any, index: int) -> TrajectoryGroup:
    """One preference row as ``TrajectoryGroup(index, [chosen, rejected])`` (rewards 1 and 0)."""
    check_pair_row(where, row, (d.prompt_key, d.chosen_key, d.rejected_key), "dpo")
    prompt = row[d.prompt_key]
    prompt_messages = len(prompt) if isinstance(prompt, list) else 1  # text: one user message
    members = []
    for key in (d.chosen_key, d.rejected_key):
        part = {d.prompt_key: prompt, key: row[key]}
        if _present(row, d.tools_key):
            part[d.tools_key] = row[d.tools_key]
        columns = ChatColumns("", d.prompt_key, key, d.tools_key)  # no messages column: prompt + key
        example = replace(rows_to_chat_examples([(where, part)], columns)[0], index=index)
        role = example.messages[prompt_messages]["role"]
        if role != "assistant":
            raise RlvrError(
                f"{where}: column {key!r} must start with the assistant's reply to the prompt, "
                f"not a {role!r} message."
            )
        members.append(_member(tokenizer, example, prompt_messages, d.max_length))
    chosen, rejected = members
    if chosen.prompt_ids != rejected.prompt_ids:
        raise RlvrError(f"{where}: {d.chosen_key!r} and {d.rejected_key!r} render different prompts.")
    if chosen.response_ids == rejected.response_ids:
        raise RlvrError(
            f"{where}: columns {d.chosen_key!r} and {d.rejected_key!r} hold the same completion; "
            "a pair must prefer one answer over another."
        )
    chosen.reward, rejected.reward = 1.0, 0.0
    return TrajectoryGroup(index, [chosen, rejected])


def load_pairs(tokenizer: Any, d: DpoConfig, path: str, split: str) -> list[TrajectoryGroup]:
    """Every row of ``path`` (the first ``dpo.limit``) as a ``[chosen, rejected]`` group."""
    rows = _rows(path, split)[: d.limit]
    if not rows:
        raise RlvrError(f"{path}: no rows; the preference data is empty.")
    return [pair_group(tokenizer, d, where, row, index) for index, (where, row) in enumerate(rows)]


def _length_metrics(groups: list[TrajectoryGroup]) -> dict[str, float]:
    lengths = [len(t) for g in groups for t in g.trajectories]
    mean = sum(lengths) / max(len(lengths), 1)
    return {"completion/tokens": float(sum(lengths)), "completion/mean_length": mean}


class FilePairs:
    """``rollout.prompts_per_step`` pairs a step from a file, in a seeded shuffle per epoch.

    Nothing is sampled, so ``seen`` is empty (the loop's samples.jsonl rows index the task's examples,
    which these pairs are not); the metrics say how many pairs went to the learner."""

    def __init__(self, cfg: RunConfig, tokenizer: Any) -> None:
        d = cfg.dpo
        if not d.path:
            raise RlvrError("dpo.pairs=file needs dpo.path: a file or dataset of prompt/chosen/rejected rows")
        self.pairs = load_pairs(tokenizer, d, d.path, d.split)
        self.seed, self.per_step = cfg.seed, cfg.rollout.prompts_per_step
        self.sampler = PromptSampler(len(self.pairs), self.seed)

    def collect(self, count: int | None = None, greedy_baseline: bool = False) -> Collection:
        groups = [self.pairs[i] for i in self.sampler.take(count or self.per_step)]
        n, epoch = float(len(groups)), float(self.sampler.epoch)
        metrics = {"groups/sampled": n, "groups/kept": n, "dpo/pairs": n, "dpo/epoch": epoch}
        return Collection(groups, [], {**metrics, **_length_metrics(groups)})

    def state(self) -> dict[str, Any]:
        return {"sampler": self.sampler.state()}

    def load_state(self, state: dict[str, Any]) -> None:
        self.sampler = PromptSampler(len(self.pairs), self.seed, **state["sampler"])


# ------------------------------------------------------------------------------- on-policy pairs
def best_worst(group: TrajectoryGroup) -> TrajectoryGroup | str:
    """``[best, worst]`` of a scored group, or why there is none (``"tie"``, ``"errors"``)."""
    scored = [t for t in group.trajectories if t.reward is not None and not t.errors]
    if len(scored) < 2:
        return "errors"
    best = max(scored, key=lambda t: t.reward)
    worst = min(scored, key=lambda t: t.reward)
    if best.reward - worst.reward <= TIE:
        return "tie"
    return TrajectoryGroup(group.example_index, [best, worst])


class OnPolicyPairs:
    """The collector's groups, each paired best vs worst. Pairs are built from every sampled group
    (the collector's own dynamic-sampling filter only decides refills), at most ``count`` a step."""

    def __init__(self, cfg: RunConfig, collector: Collector) -> None:
        self.cfg, self.collector = cfg, collector

    def collect(self, count: int | None = None, greedy_baseline: bool = False) -> Collection:
        want = count or self.cfg.rollout.prompts_per_step
        collection = self.collector.collect(want)
        pairs, skipped = [], {"tie": 0, "errors": 0}
        for group in collection.seen:
            pair = best_worst(group)
            if isinstance(pair, str):
                skipped[pair] += 1
            else:
                pairs.append(pair)
        pairs = pairs[:want]
        metrics = {
            **collection.metrics,
            "groups/kept": float(len(pairs)),
            "dpo/pairs": float(len(pairs)),
            "dpo/ties_skipped": float(skipped["tie"]),
            "dpo/errors_skipped": float(skipped["errors"]),
        }
        return Collection(pairs, collection.seen, metrics)

    def state(self) -> dict[str, Any]:
        return {}  # the collector's prompt order is checkpointed by the loop

    def load_state(self, state: dict[str, Any]) -> None:
        pass


def build_pair_source(cfg: RunConfig, collector: Collector, tokenizer: Any) -> FilePairs | OnPolicyPairs:
    """The DPO stage's source of ``[chosen, rejected]`` groups (``dpo.pairs``)."""
    return FilePairs(cfg, tokenizer) if cfg.dpo.pairs == "file" else OnPolicyPairs(cfg, collector)


# ------------------------------------------------------------------------------------ objective
def _needs_reference(cfg: RunConfig) -> bool:
    """Whether ``dpo.loss`` reads reference log-probs: a reference-free loss (simpo) accepts None.
    Also refuses ``dpo.loss_params`` the loss does not take, before any model is loaded."""
    d = cfg.dpo
    fn, x, n = PREFERENCE_LOSSES.get(d.loss), torch.zeros(1), torch.ones(1)
    try:
        fn(x, x, None, None, n, n, beta=d.beta, **d.loss_params)
        return False
    except Exception:  # noqa: BLE001 - any failure without references: it needs them
        pass
    try:
        fn(x, x, x, x, n, n, beta=d.beta, **d.loss_params)
    except Exception as error:  # noqa: BLE001 - the loss's own complaint, named
        raise RlvrError(f"dpo.loss={d.loss} with dpo.loss_params={d.loss_params}: {error}") from error
    return True


def _pair_key(group: TrajectoryGroup) -> str | None:
    """A file pair's id: a digest of its tokens (so equal pairs from the train and eval files share
    it); None for a pair with sampled tokens (new every step: nothing to keep)."""
    if any(s.kind == SAMPLED for t in group.trajectories for s in t.segments):
        return None
    ids = [group.trajectories[0].prompt_ids]
    ids += [(t.response_ids, t.loss_mask) for t in group.trajectories]
    return hashlib.sha1(repr(ids).encode()).hexdigest()


def _sums(learner: Learner, model: torch.nn.Module, batch: TrainBatch) -> torch.Tensor:
    """Each row's log-prob [B] summed over its trained tokens, at temperature 1 (the policy itself)."""
    with learner.precision.autocast():
        logprobs = completion_logprobs(model, batch, 1.0)[0]
    return (logprobs.float() * batch.completion_mask).sum(1)


class PreferenceObjective:
    """A preference loss over ``[chosen, rejected]`` groups: one optimizer step per call."""

    def __init__(self, cfg: RunConfig, learner: Learner) -> None:
        self.cfg, self.loss_fn = cfg, PREFERENCE_LOSSES.get(cfg.dpo.loss)
        self.ref_model = None
        if _needs_reference(cfg):  # loaded once; reference-free losses load none at all
            self.ref_model = learner.ref_model or learner.load_reference()
            learner.ref_model = self.ref_model
        self.ref_cache: dict[str, tuple[float, float]] = {}
        self.eval_pairs: list[TrajectoryGroup] = []
        if cfg.dpo.eval_path:  # read now, so a bad row fails at start-up
            from rlvr.models import load_tokenizer

            d = cfg.dpo
            tokenizer = load_tokenizer(cfg.model.name)
            self.eval_pairs = load_pairs(tokenizer, d, d.eval_path, d.eval_split or d.split)

    def _reference(self, learner: Learner, groups: list[TrajectoryGroup], batch: TrainBatch) -> tuple:
        """Reference sums [2N] (None for a reference-free loss), from the cache where known."""
        if self.ref_model is None:
            return None, {}
        keys = [_pair_key(g) for g in groups]
        todo = [i for i, k in enumerate(keys) if k is None or k not in self.ref_cache]
        out = torch.zeros(len(batch), device=batch.completion_mask.device)
        if todo:
            rows = torch.tensor([r for i in todo for r in (2 * i, 2 * i + 1)])
            sub = batch.select(rows.to(batch.group_index.device))
            micro, autocast = self.cfg.algo.micro_batch_size, learner.precision.autocast()
            logprobs = batch_logprobs(self.ref_model, sub, micro, 1.0, autocast).float()
            sums = (logprobs * sub.completion_mask).sum(1)
            out[rows.to(out.device)] = sums
            for j, i in enumerate(todo):
                if keys[i] is not None:
                    self.ref_cache[keys[i]] = (float(sums[2 * j]), float(sums[2 * j + 1]))
        computed = set(todo)
        for i, key in enumerate(keys):
            if i not in computed:
                out[2 * i], out[2 * i + 1] = self.ref_cache[key]
        hits = len(groups) - len(todo)
        return out, {"dpo/ref_cache_hits": float(hits), "dpo/ref_computed": float(len(todo))}

    def _loss(self, policy: torch.Tensor, ref: torch.Tensor | None, lengths: torch.Tensor) -> tuple:
        d = self.cfg.dpo
        refs = (None, None) if ref is None else (ref[0::2], ref[1::2])
        return self.loss_fn(
            policy[0::2], policy[1::2], *refs, lengths[0::2], lengths[1::2], beta=d.beta, **d.loss_params
        )

    def _batch(self, learner: Learner, groups: list[TrajectoryGroup]) -> TrainBatch:
        for g in groups:
            if len(g) != 2:
                raise ValueError(f"a preference group holds [chosen, rejected], got {len(g)} trajectories")
        batch = build_batch([g.trajectories for g in groups], [0.0] * 2 * len(groups), learner.pad_id)
        return batch.to(self.cfg.model.device)

    def update(self, learner: Learner, groups: list[TrajectoryGroup]) -> dict[str, float]:
        """One optimizer step on the mean loss over ``groups``; micro-batches of whole pairs
        accumulate gradients that sum to the one-batch gradient."""
        if learner.shard is not None:
            raise RlvrError("stage=dpo does not run under torchrun yet: train it in one process")
        cfg, model, optimizer = self.cfg, learner.train_model, learner.optimizer
        batch = self._batch(learner, groups)
        ref, metrics = self._reference(learner, groups, batch)
        n, lengths = len(groups), batch.completion_mask.sum(1)
        chosen_tokens = lengths[0::2].sum().clamp(min=1)
        sums: dict[str, float] = defaultdict(float)
        optimizer.zero_grad(set_to_none=True)
        for pairs in _micro_slices(n, max(1, cfg.algo.micro_batch_size // 2)):
            rows = torch.arange(2 * pairs.start, 2 * pairs.stop, device=batch.group_index.device)
            policy = _sums(learner, model, batch.select(rows))
            per_pair, stats = self._loss(policy, None if ref is None else ref[rows], lengths[rows])
            share = (pairs.stop - pairs.start) / n
            loss = per_pair.sum() / n
            sums["dpo/loss"] += float(loss.detach())
            if cfg.dpo.sft_weight > 0:  # token-mean NLL of the step's chosen completions
                nll = -policy[0::2].sum() / chosen_tokens
                loss = loss + cfg.dpo.sft_weight * nll
                sums["dpo/sft_loss"] += float(nll.detach())
            (learner.scaler.scale(loss) if learner.scaler is not None else loss).backward()
            sums["update/loss"] += float(loss.detach())
            for key, value in stats.items():
                sums[f"dpo/{key}"] += value * share
        params = [p for group in optimizer.param_groups for p in group["params"]]
        if learner.scaler is not None:
            learner.scaler.unscale_(optimizer)
        metrics["update/grad_norm"] = float(torch.nn.utils.clip_grad_norm_(params, cfg.optim.grad_clip))
        metrics["update/lr"] = learner.scheduler.get_last_lr()[0]
        if learner.scaler is not None:
            learner.scaler.step(optimizer)
            learner.scaler.update()
        else:
            optimizer.step()
        learner.scheduler.step()
        return {**metrics, **sums}

    @torch.no_grad()
    def evaluate(self, learner: Learner) -> dict[str, float]:
        """``dpo/eval_loss`` and ``dpo/eval_accuracy`` on the held-out pairs (``dpo.eval_path``)."""
        if not self.eval_pairs:
            return {}
        losses, correct, per_micro = [], [], max(1, self.cfg.algo.micro_batch_size // 2)
        for start in range(0, len(self.eval_pairs), per_micro):
            groups = self.eval_pairs[start : start + per_micro]
            batch = self._batch(learner, groups)
            ref, policy = self._reference(learner, groups, batch)[0], _sums(learner, learner.model, batch)
            per_pair, stats = self._loss(policy, ref, batch.completion_mask.sum(1))
            losses.append(float(per_pair.sum()))
            correct.append(stats["rewards/accuracy"] * len(groups))
        n = len(self.eval_pairs)
        return {"dpo/eval_loss": sum(losses) / n, "dpo/eval_accuracy": sum(correct) / n}
