"""Reward-model training (``stage=rm``, ``rlvr rm``): a Bradley–Terry classifier on preference pairs.

Learned reward models are what RLHF trains on, and whether one helps or hurts RL beside a verifier
is itself a question the seeds ask (seeds/001:43: learned rewards can be hacked by repeating
correct but unneeded steps). This stage trains one in rlvr and hands it to the ``reward_model``
reward unchanged:

- **pairs** (``rm.pairs``): a file in TRL's preference columns (``prompt``, ``chosen``,
  ``rejected``; text or chat messages), or *verifier-built* pairs: the policy (``model.name``)
  samples ``rollout.group_size`` completions of ``rm.prompts`` training prompts and of
  ``rm.eval_prompts`` held-out prompts, the run's rewards score them, and within a group a
  higher-scored completion is chosen over a lower-scored one (ties and errored completions give no
  pair). Sampled pairs are written to ``pairs.jsonl`` / ``eval_pairs.jsonl`` in the same columns,
  so a later run can train on them as a file;
- **the model**: ``rm.base`` (default ``model.name``) with a one-logit sequence-classification
  head (``AutoModelForSequenceClassification``), trained on ``−log σ(s_chosen − s_rejected − margin)``
  (:func:`rlvr.algo.preference.bradley_terry_loss`) with the run's optimizer settings (``optim.*``);
- **the text** each score is computed from is :func:`rlvr.rewards.reward_model.render` of the
  prompt and the completion, tokenised as :func:`rlvr.rewards.reward_model.score_texts` does: the
  reward then scores exactly what the model was trained on;
- **the output**: ``checkpoints/step-N/model`` (model and tokenizer, ``pad_token_id`` set), which
  ``rewards.functions: [{name: reward_model, params: {path: ...}}]`` loads, and which a pipeline's
  later stage names as ``stage:NAME``. ``metrics.jsonl`` holds the training loss and accuracy per
  step and the held-out pair accuracy before and after (``phase: eval``).

The run is short and is not resumable: an interrupted rm stage is trained again from the start.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from rlvr.algo.preference import bradley_terry_loss
from rlvr.errors import RlvrError
from rlvr.rewards.reward_model import encode_texts, render
from rlvr.train.stages.reward_pairs import RewardPair, read_pairs, sample_pairs, write_pairs

if TYPE_CHECKING:
    from rich.console import Console

    from rlvr.config import RunConfig
    from rlvr.config.stages import RewardModelConfig

CHARS_PER_TOKEN_BOUND = 32  # a text longer than max_length * this cannot fit: left out untokenised


# ------------------------------------------------------------------------------------ the model
def load_classifier(base: str, tokenizer: Any, device: str) -> torch.nn.Module:
    """``base`` with a one-logit sequence-classification head, ``pad_token_id`` set as the reward's
    loader sets it (the classifier scores each row's last non-pad token)."""
    import transformers

    from rlvr.models.loading import resolve_model_path

    try:
        path = resolve_model_path(base)
    except RlvrError as err:
        raise RlvrError(f"rm.base={base}: {err}") from err
    verbosity = transformers.logging.get_verbosity()
    transformers.logging.set_verbosity_error()  # its load report lists the new head as "MISSING": expected
    try:
        model = transformers.AutoModelForSequenceClassification.from_pretrained(
            path, num_labels=1, dtype=torch.float32
        )
    except ValueError as err:
        raise RlvrError(f"rm.base={base}: no sequence-classification head for this model ({err})") from err
    finally:
        transformers.logging.set_verbosity(verbosity)
    model.config.pad_token_id = tokenizer.pad_token_id
    return model.to(device)


def pair_scores(
    model: torch.nn.Module, tokenizer: Any, pairs: list[RewardPair], max_length: int, device: str
) -> tuple[torch.Tensor, torch.Tensor]:
    """The model's scores of each pair's chosen and rejected text, in one padded batch, rendered and
    tokenised by the functions the ``reward_model`` reward scores with (``render``, ``encode_texts``)."""
    texts = [render(tokenizer, p.example, p.chosen) for p in pairs]
    texts += [render(tokenizer, p.example, p.rejected) for p in pairs]
    scores = model(**encode_texts(tokenizer, texts, max_length, device)).logits[:, 0]
    return scores[: len(pairs)], scores[len(pairs) :]


def fitting(pairs: list[RewardPair], tokenizer: Any, max_length: int) -> tuple[list[RewardPair], int]:
    """The pairs whose rendered texts both fit in ``max_length`` tokens, and how many did not (a
    truncated pair would train on text the reward never sees whole)."""
    kept, dropped = [], 0
    for pair in pairs:
        texts = [render(tokenizer, pair.example, c) for c in (pair.chosen, pair.rejected)]
        if any(len(t) > max_length * CHARS_PER_TOKEN_BOUND for t in texts) or any(
            len(tokenizer(t, add_special_tokens=False)["input_ids"]) > max_length for t in texts
        ):
            dropped += 1
        else:
            kept.append(pair)
    return kept, dropped


@torch.no_grad()
def evaluate_pairs(
    model: torch.nn.Module, tokenizer: Any, pairs: list[RewardPair], rm: RewardModelConfig, device: str
) -> dict[str, float]:
    """Held-out ``rm/eval_accuracy`` (chosen scored strictly above rejected), loss and margin."""
    if not pairs:
        return {}
    model.eval()
    losses, right, margins = 0.0, 0.0, 0.0
    for start in range(0, len(pairs), rm.batch_size):
        part = pairs[start : start + rm.batch_size]
        chosen, rejected = pair_scores(model, tokenizer, part, rm.max_length, device)
        loss, stats = bradley_terry_loss(chosen, rejected, rm.margin)
        losses += float(loss.sum())
        right += stats["accuracy"] * len(part)
        margins += stats["margin"] * len(part)
    n = len(pairs)
    return {
        "rm/eval_accuracy": right / n,
        "rm/eval_loss": losses / n,
        "rm/eval_margin": margins / n,
        "rm/eval_pairs": float(n),
    }


# ------------------------------------------------------------------------------------ the stage
def _progress(console: Console, quiet: bool) -> Any:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    fields = TextColumn("loss {task.fields[loss]:.3f}  pair acc {task.fields[acc]:.2f}")
    columns = (TextColumn("[bold]rm"), BarColumn(), MofNCompleteColumn(), fields, TimeRemainingColumn())
    return Progress(*columns, console=console, disable=quiet)


def _pairs(
    cfg: RunConfig, run_dir: Path, console: Console, quiet: bool
) -> tuple[list[RewardPair], list[RewardPair], dict[str, float]]:
    rm = cfg.rm
    if rm.pairs == "file":
        if not rm.path:
            raise RlvrError("rm.pairs=file needs rm.path: a file or dataset of prompt/chosen/rejected rows")
        held_out = read_pairs(rm, rm.eval_path, rm.eval_split or rm.split) if rm.eval_path else []
        return read_pairs(rm, rm.path, rm.split), held_out, {}
    if rm.path or rm.eval_path:
        raise RlvrError(
            "rm.path / rm.eval_path are read with rm.pairs=file; rm.pairs=sampled samples its own"
        )
    train, held_out, counts = sample_pairs(cfg, console, quiet)
    write_pairs(run_dir / "pairs.jsonl", train)
    write_pairs(run_dir / "eval_pairs.jsonl", held_out)
    return train, held_out, counts


def _batches(train: list[RewardPair], rm: RewardModelConfig, rng: random.Random, total: int) -> Iterator:
    """``(epoch, pairs)`` of ``rm.batch_size``, each epoch in a fresh seeded order, ``total`` in all."""
    made = 0
    for epoch in range(rm.epochs):
        order = list(range(len(train)))
        rng.shuffle(order)
        for start in range(0, len(order), rm.batch_size):
            if made == total:
                return
            made += 1
            yield epoch, [train[i] for i in order[start : start + rm.batch_size]]


def _update(
    model: Any, tokenizer: Any, optimizer: Any, scheduler: Any, batch: list[RewardPair], cfg: RunConfig
) -> dict:
    """One optimizer step on the mean Bradley–Terry loss of ``batch``, in micro-batches of
    ``algo.micro_batch_size`` rows (two per pair) whose gradients sum to the batch's."""
    began, rm, n = time.perf_counter(), cfg.rm, len(batch)
    micro = max(1, cfg.algo.micro_batch_size // 2)
    model.train()
    optimizer.zero_grad(set_to_none=True)
    row = {"rm/loss": 0.0, "rm/accuracy": 0.0, "rm/margin": 0.0}
    for m in range(0, n, micro):
        part = batch[m : m + micro]
        chosen, rejected = pair_scores(model, tokenizer, part, rm.max_length, cfg.model.device)
        loss, stats = bradley_terry_loss(chosen, rejected, rm.margin)
        (loss.sum() / n).backward()
        row["rm/loss"] += float(loss.detach().sum()) / n
        row["rm/accuracy"] += stats["accuracy"] * len(part) / n
        row["rm/margin"] += stats["margin"] * len(part) / n
    params = [p for p in model.parameters() if p.requires_grad]
    row["update/grad_norm"] = float(torch.nn.utils.clip_grad_norm_(params, cfg.optim.grad_clip))
    row["update/lr"] = scheduler.get_last_lr()[0]
    optimizer.step()
    scheduler.step()
    row["update/loss"] = row["rm/loss"]
    row["time/step_s"] = time.perf_counter() - began
    return row


def train_reward_model(cfg: RunConfig, console: Console, quiet: bool = False) -> dict[str, Any]:
    """Train ``cfg``'s reward model (module docstring) into ``output_dir/name``; returns
    ``{"before", "after"}`` held-out pair metrics and ``run`` (steps, updates, reward calls)."""
    from rlvr.log import JsonlWriter
    from rlvr.models import load_tokenizer
    from rlvr.train.learn.optim import build_optimizer, build_scheduler
    from rlvr.train.loop import checkpoint as ckpt
    from rlvr.train.loop.run_dir import prepare_run_dir

    rm, device = cfg.rm, cfg.model.device
    run_dir = prepare_run_dir(cfg, resume=False)
    torch.manual_seed(cfg.seed)
    if cfg.model.threads:
        torch.set_num_threads(cfg.model.threads)
    train, held_out, counts = _pairs(cfg, run_dir, console, quiet)
    base = rm.base or cfg.model.name
    tokenizer = load_tokenizer(base)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    train, too_long = fitting(train, tokenizer, rm.max_length)
    held_out, eval_too_long = fitting(held_out, tokenizer, rm.max_length)
    counts.update({"rm/pairs": float(len(train)), "rm/too_long": float(too_long + eval_too_long)})
    if not train:
        raise RlvrError(
            f"rm: no training pairs ({int(counts.get('rm/groups', 0))} groups sampled, {too_long} pairs over "
            f"rm.max_length={rm.max_length}); every group tied or errored. Sample more prompts (rm.prompts), "
            "larger groups (rollout.group_size), or give pairs in a file (rm.pairs=file)"
        )
    if not quiet:
        console.print(
            f"rm: {len(train)} training pairs, {len(held_out)} held-out pairs; {base} + a score head",
            highlight=False,
        )
    model = load_classifier(base, tokenizer, device)
    steps_per_epoch = math.ceil(len(train) / rm.batch_size)
    total = steps_per_epoch * rm.epochs
    if cfg.train.steps < total:  # the run's step budget binds before the epochs end: say so
        if not quiet:
            console.print(
                f"rm: train.steps={cfg.train.steps} ends training before rm.epochs={rm.epochs} "
                f"({total} steps of {rm.batch_size} pairs)",
                highlight=False,
            )
        total = cfg.train.steps
    optimizer = build_optimizer(model, cfg.optim)
    scheduler = build_scheduler(optimizer, total, cfg.optim)
    metrics = JsonlWriter(run_dir / "metrics.jsonl")
    before = evaluate_pairs(model, tokenizer, held_out, rm, device)
    metrics.write({"step": 0, "phase": "eval", **before, **counts})
    step, started = 0, time.perf_counter()
    with _progress(console, quiet) as progress:
        task = progress.add_task("rm", total=total, loss=0.0, acc=0.0)
        for epoch, batch in _batches(train, rm, random.Random(cfg.seed), total):
            row = _update(model, tokenizer, optimizer, scheduler, batch, cfg)
            step += 1
            metrics.write({"step": step, "phase": "train", **row, "rm/epoch": float(epoch)})
            progress.update(task, advance=1, loss=row["rm/loss"], acc=row["rm/accuracy"])
            if rm.eval_every and step % rm.eval_every == 0 and step < total:
                metrics.write(
                    {"step": step, "phase": "eval", **evaluate_pairs(model, tokenizer, held_out, rm, device)}
                )
            limit = cfg.train.time_limit_s
            if limit is not None and time.perf_counter() - started >= limit and step < total:
                if not quiet:
                    console.print(f"rm: train.time_limit_s={limit} reached at step {step} of {total}")
                break
    after = evaluate_pairs(model, tokenizer, held_out, rm, device)
    metrics.write({"step": step, "phase": "eval", **after})
    metrics.close()
    state = {"stage": "rm", "pairs": len(train), "held_out_pairs": len(held_out), "base": base}
    path = ckpt.save_checkpoint(
        run_dir / "checkpoints", step, model.eval(), tokenizer, None, state, keep=None
    )
    if not quiet:
        console.print(f"rm: reward model saved to {path / 'model'}", highlight=False)
    calls = counts.get("rm/groups", 0.0) * cfg.rollout.group_size if rm.pairs == "sampled" else 0.0
    run = {
        "steps": step,
        "updates": step,
        "reward_calls": calls,
        "reward_errors": counts.get("rm/reward_errors", 0.0),
    }
    return {"before": before, "after": after, "run": run, "model": str(path / "model")}
