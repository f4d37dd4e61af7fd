"""The public Python API; the CLI is a thin layer over these functions.

from rlvr import api
cfg = api.load_config("recipes/grpo.yaml", ["train.steps=20"])
results = api.train(cfg)
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

from rich.console import Console

from rlvr.config import RunConfig, load_config
from rlvr.errors import RlvrError

# Hub ids download as in transformers unless HF_HUB_OFFLINE is set or the Hub is unreachable (rlvr.hub)
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

__all__ = [
    "RlvrError",
    "RunConfig",
    "collect",
    "evaluate_model",
    "load_config",
    "resume_config",
    "train",
    "with_rewards",
]


def resume_config(path: str | None, overrides: list[str] | tuple[str, ...] = ()) -> tuple[RunConfig, dict]:
    """The config a ``--resume`` continues with: the run's saved ``config.yaml`` (the run named by
    ``path`` and ``overrides``) with the given keys applied, and ``{key: (old, new)}`` of what they
    changed. Keys that may not change mid-run raise :class:`RlvrError` naming them
    (:mod:`rlvr.train.loop.resume`)."""
    from rlvr.train.loop.resume import resume_config as _resume_config

    return _resume_config(path, list(overrides))


def train(
    cfg: RunConfig,
    resume: bool = False,
    console: Console | None = None,
    quiet: bool = False,
    overwrite: bool = False,
    reward_funcs: Sequence[Callable[..., Any] | str] | None = None,
    reward_weights: Sequence[float] | None = None,
) -> dict:
    """Run a training job; returns {"before": eval metrics, "after": eval metrics, "run": {"steps",
    "updates", "reward_calls", "reward_errors"}} (``rlvr.train.loop.health.run_failure(results)`` says
    whether it failed to train: what makes ``rlvr train`` exit 3).

    ``resume`` continues the run ``output_dir/name`` from its last checkpoint; ``cfg`` may differ
    from the run's saved config only in settings that are safe to change mid-run. A finished run
    is left as it is (returns ``{}``); a run without a checkpoint starts over from step 0.
    ``overwrite`` deletes an existing run directory ``output_dir/name`` first (only an rlvr run
    directory, never through a symbolic link: :func:`rlvr.train.loop.run_dir.replace_run_dir`) and
    trains from scratch. With ``cluster.ray`` the trainer ranks run this function as Ray actors
    (docs/scale.md). ``reward_funcs`` (with ``reward_weights``) replace ``rewards.functions``, as
    TRL's ``GRPOTrainer(reward_funcs=...)``: see :func:`with_rewards`.
    """
    if reward_funcs is not None:
        cfg = with_rewards(cfg, reward_funcs, reward_weights)
    from pathlib import Path

    from rlvr.train.loop.run import run_training
    from rlvr.train.scale.distributed import under_torchrun

    console = console or Console(stderr=True)
    if overwrite:
        if resume:
            raise RlvrError("--overwrite deletes the run that --resume would continue: give one of them")
        if os.environ.get("RANK", "0") == "0":  # under torchrun rank 0 alone, before the others write
            from rlvr.train.loop.run_dir import replace_run_dir

            run_dir = Path(cfg.output_dir) / cfg.name
            if replace_run_dir(run_dir):
                console.print(f"--overwrite: deleted the earlier run {run_dir}", highlight=False)
    if cfg.stages:  # a pipeline: each stage is a run of its own in a sub-directory
        from rlvr.train.stages.pipeline import run_pipeline

        return run_pipeline(cfg, resume, console, quiet)
    if cfg.cluster.ray and not under_torchrun():  # the driver: ranks run run_training as Ray actors
        from rlvr.train.scale.ray_launch import train_on_ray

        return train_on_ray(cfg, resume, console, quiet)
    return run_training(cfg, resume=resume, console=console, quiet=quiet)


def with_rewards(
    cfg: RunConfig,
    reward_funcs: Sequence[Callable[..., Any] | str],
    reward_weights: Sequence[float] | None = None,
) -> RunConfig:
    """``cfg`` with ``rewards.functions`` replaced by ``reward_funcs``, weighted by
    ``reward_weights`` (default 1 each), checked as a config would be.

    An entry is a Python function or a reward name (registered, or an import path
    ``"module:function"``). A function runs in reward worker processes, which import it again, so
    it must be defined at the top level of a module or script (a script that defines one trains
    under ``if __name__ == "__main__":``); it is called once per completion as
    ``fn(completion: str, example: Example, **params) -> float | dict[str, float]`` — not with TRL's
    batch ``(prompts, completions, **kwargs) -> list[float]`` (docs/rewards.md, "Coming from TRL").
    Its results are labelled with its ``__name__``.
    """
    import inspect

    from rlvr.config.load import validate
    from rlvr.rewards.registry import reward_name_of

    funcs = list(reward_funcs)
    if not funcs:
        raise RlvrError("reward_funcs is empty: give at least one reward function or name")
    weights = [1.0] * len(funcs) if reward_weights is None else [float(w) for w in reward_weights]
    if len(weights) != len(funcs):
        raise RlvrError(f"reward_weights has {len(weights)} values for {len(funcs)} reward_funcs")
    items: list[dict[str, Any]] = []
    for fn, weight in zip(funcs, weights, strict=True):
        if isinstance(fn, str):
            items.append({"name": fn, "weight": weight})
            continue
        try:
            first = next(iter(inspect.signature(fn).parameters), None)
        except (TypeError, ValueError):
            first = None
        if first == "prompts":
            raise RlvrError(
                f"reward function {getattr(fn, '__name__', fn)!r} takes TRL's (prompts, completions, "
                "**kwargs) -> list[float]; rlvr calls a reward once per completion as fn(completion, "
                "example, **params) -> float (docs/rewards.md, 'Coming from TRL')"
            )
        name = reward_name_of(fn)
        item: dict[str, Any] = {"name": name, "weight": weight}
        if ":" in name:  # results and logs say the function's name, not its import path
            item["label"] = name.rpartition(":")[2]
        items.append(item)
    labels = [item.get("label", item["name"]) for item in items]
    repeated = sorted({label for label in labels if labels.count(label) > 1})
    if repeated:
        raise RlvrError(
            f"reward_funcs: several rewards are named {', '.join(repeated)}; give each its own name"
        )
    tree = cfg.model_dump(mode="json")
    tree["rewards"]["functions"] = items
    return validate(tree, source="reward_funcs")


def collect(
    cfg: RunConfig,
    out: str,
    prompts: int | None = None,
    split: str = "train",
    console: Console | None = None,
    quiet: bool = False,
) -> dict:
    """Sample and score ``prompts`` groups of trajectories with ``cfg`` and write them to ``out``
    (JSONL, docs/trajectories.md); returns a summary (groups kept, reward metrics, reward errors)."""
    from rlvr.collect.run import collect_to_file

    return collect_to_file(cfg, out, prompts, split, console=console, quiet=quiet)


def resolve_run(path: str) -> tuple[str, str | None]:
    """``(model directory, the run's config.yaml or None)`` for a run directory (its newest
    checkpoint, model-only or full), a checkpoint directory, or any other model name or path
    (returned as it is)."""
    from pathlib import Path

    from rlvr.train.loop.checkpoint import newest_checkpoint

    given = Path(path)
    if (given / "checkpoints").is_dir() or (given / "metrics.jsonl").is_file():
        last = newest_checkpoint(given / "checkpoints")
        if last is None:
            raise RlvrError(
                f"{given} is a run directory without a checkpoint (was it trained with "
                "train.final_checkpoint=none?)"
            )
        config = given / "config.yaml"
        return str(last / "model"), str(config) if config.is_file() else None
    if (given / "model").is_dir() and (given / "state.json").is_file():
        config = given.parent.parent / "config.yaml"
        return str(given / "model"), str(config) if config.is_file() else None
    return path, None


def evaluate_model(cfg: RunConfig, console: Console | None = None, quiet: bool = False) -> dict[str, float]:
    """Held-out metrics of ``cfg.model.name`` on ``cfg.data`` (greedy accuracy, pass@k if eval.samples)."""
    import torch

    from rlvr.data.from_config import build_datasets
    from rlvr.eval.evaluate import evaluate, scaling_plan
    from rlvr.log import eval_progress
    from rlvr.models import load_model, load_tokenizer
    from rlvr.models.chat import encode_prompts, rollout_context
    from rlvr.rewards.scoring import eval_pool, score_completions, wants_self_certainty
    from rlvr.rollout.from_config import build_engine

    if cfg.model.threads:
        torch.set_num_threads(cfg.model.threads)
    _, examples = build_datasets(cfg.data)
    if not examples:
        raise RlvrError(
            "nothing to evaluate: no held-out examples (data.eval_size=0, or data too small to hold out "
            "1 row in 10 by default: give data.eval_path or data.eval_size)"
        )
    tokenizer = load_tokenizer(cfg.model.name)
    model = load_model(cfg.model.name, cfg.model.dtype, cfg.model.device)
    engine = build_engine(cfg, model, tokenizer)
    from rlvr.train.loop.checkpoint import describe

    kind = describe(cfg.model.name)  # a run's checkpoint: which one ("model-only, step 70")
    label = f"{cfg.model.name} ({kind})" if kind else cfg.model.name
    starting = f"evaluating {label} on {len(examples)} held-out problems"
    if any(e.metadata.get("env") or cfg.env.name for e in examples):  # episodes, as training evaluates
        from rlvr.collect import Collector

        collector = Collector(cfg, engine, tokenizer, examples, examples)
        try:
            if console is not None:
                console.print(starting, highlight=False)
            return collector.evaluate("eval", console, quiet)[0]
        finally:
            collector.close()
    # a prompt that cannot fit the context (with its completion) is refused now, naming its row
    context, context_from = rollout_context(cfg, engine)
    new_tokens_key = "eval.max_new_tokens" if cfg.eval.max_new_tokens else "rollout.max_new_tokens"
    max_new_tokens = cfg.eval.max_new_tokens or cfg.rollout.max_new_tokens
    prompts = encode_prompts(tokenizer, examples, context, max_new_tokens, context_from, new_tokens_key)
    with eval_pool(cfg.rewards) as pool:
        if console is not None:  # the model is loaded and the reward workers are up
            console.print(starting, highlight=False)
        with eval_progress(console, disable=quiet) as progress:
            task = progress.add_task("eval", total=len(examples))
            return evaluate(
                engine,
                prompts,
                examples,
                lambda completions, exs, sizes: score_completions(pool, completions, exs, sizes),
                cfg.eval.max_new_tokens or cfg.rollout.max_new_tokens,
                cfg.eval.samples,
                cfg.eval.pass_k,
                cfg.eval.temperature,
                chunk=cfg.rollout.max_batch_sequences,
                on_progress=lambda n: progress.advance(task, n),
                group_by=cfg.eval.group_by,
                self_certainty=wants_self_certainty(pool),
                scaling=scaling_plan(cfg.eval, tokenizer, context),
            )
