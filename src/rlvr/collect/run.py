"""``rlvr collect``: the collector on its own — scored trajectories to a JSONL file, no optimizer.

For inspection (what does the policy write, what does each reward say), rejection-sampling and
distillation data (``kept`` groups, or every trajectory with ``reward`` ≥ a threshold), and
offline evaluation (``split="eval"``: every held-out problem, ``rollout.group_size`` samples
each). Sampling, scoring, reward-error handling and group filtering are the training step's own,
so a file collected here is what the learner would have been given.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from rlvr.collect.collector import Collector
from rlvr.collect.records import reward_metrics
from rlvr.config import RunConfig
from rlvr.data.from_config import build_datasets
from rlvr.errors import RlvrError
from rlvr.log import JsonlWriter
from rlvr.models import load_model, load_tokenizer
from rlvr.models.precision import precision_of
from rlvr.rewards.scoring import check_reward_examples
from rlvr.rollout.from_config import build_engine
from rlvr.trajectory import TrajectoryGroup, group_records


def _progress(console: Console | None, quiet: bool) -> Progress:
    return Progress(
        TextColumn("[bold]collect"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn(
            "reward {task.fields[reward]:.3f}  acc {task.fields[acc]:.2f}  errors {task.fields[errors]}"
        ),
        TimeElapsedColumn(),
        console=console,
        disable=quiet,
    )


def collect_to_file(
    cfg: RunConfig,
    out: str | Path,
    prompts: int | None = None,
    split: str = "train",
    console: Console | None = None,
    quiet: bool = False,
) -> dict[str, Any]:
    """Collect ``prompts`` groups (default: one step's ``rollout.prompts_per_step``; with
    ``split="eval"``, every held-out problem) and write their trajectories to ``out``.

    The file appears only when collection finished (it is written beside it, then renamed).
    Returns a summary: groups sampled and kept, reward metrics, reward errors by kind.
    """
    if split not in ("train", "eval"):
        raise RlvrError(f"--split must be train or eval, not {split!r}")
    out = Path(out)
    if out.exists():
        raise RlvrError(f"{out} already exists; choose another --out or remove it")
    if not out.parent.is_dir():
        raise RlvrError(f"cannot write {out}: directory {out.parent} does not exist")
    torch.manual_seed(cfg.seed)
    if cfg.model.threads:
        torch.set_num_threads(cfg.model.threads)
    train_examples, eval_examples = build_datasets(cfg.data)
    examples = train_examples if split == "train" else eval_examples
    if not examples:
        raise RlvrError(
            "nothing to collect from: no held-out examples (data.eval_size=0, or data too small to hold out "
            "1 row in 10 by default: give data.eval_path or data.eval_size)"
            if split == "eval"
            else "no examples"
        )
    check_reward_examples(cfg.rewards, examples)
    want = prompts or (len(examples) if split == "eval" else cfg.rollout.prompts_per_step)
    if want < 1:
        raise RlvrError(f"--prompts must be at least 1, not {want}")

    tokenizer = load_tokenizer(cfg.model.name)
    model = load_model(cfg.model.name, cfg.model.dtype, cfg.model.device).eval()
    rollout_dtype = precision_of(cfg).rollout_dtype
    if rollout_dtype is not None:  # sample as training would: from the rollout's copy dtype
        model = model.to(rollout_dtype)
    engine = build_engine(cfg, model, tokenizer)
    collector = Collector(cfg, engine, tokenizer, examples)
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    seen: list[TrajectoryGroup] = []
    kept = 0
    errors: dict[str, float] = {}
    try:
        writer = JsonlWriter(tmp)
        with _progress(console, quiet) as progress, torch.no_grad():
            task = progress.add_task("collect", total=want, reward=0.0, acc=0.0, errors=0)
            while len(seen) < want:
                batch = collector.collect(min(cfg.rollout.prompts_per_step, want - len(seen)))
                for record in group_records(batch.seen, batch.kept_flags(), len(seen)):
                    writer.write(record)
                seen.extend(batch.seen)
                kept += len(batch.kept)
                for key, value in collector.reward_error_metrics().items():
                    errors[key] = errors.get(key, 0.0) + value
                so_far = reward_metrics(seen, collector.correctness)
                progress.update(
                    task,
                    completed=min(len(seen), want),
                    reward=so_far["reward/mean"],
                    acc=so_far["train/accuracy"],
                    errors=int(so_far["reward/errors"]),
                )
        writer.close()
        os.replace(tmp, out)
    finally:
        collector.close()
        tmp.unlink(missing_ok=True)
    return {
        "out": str(out),
        "split": split,
        "groups/sampled": float(len(seen)),
        "groups/kept": float(kept),
        "trajectories": float(sum(len(g) for g in seen)),
        **reward_metrics(seen, collector.correctness),
        **errors,
    }
