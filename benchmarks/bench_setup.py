"""What the single-process benchmarks share: their command line and one GRPO step's worth of setup."""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

RECIPE = Path(__file__).resolve().parents[1] / "recipes" / "grpo.yaml"


def bench_args(
    description: str, shape: str, reps: int, extra: dict[str, int] | None = None
) -> tuple[argparse.Namespace, tuple[int, int, int]]:
    """Parse ``--shape PxGxT --reps N --threads N`` (and ``extra`` integer options with their
    defaults), set the torch thread count, return (args, (P, G, T))."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--shape", default=shape, help="PxGxT: prompts, completions per prompt, new tokens")
    parser.add_argument("--reps", type=int, default=reps)
    parser.add_argument("--threads", type=int, default=2)
    for flag, default in (extra or {}).items():
        parser.add_argument(flag, type=int, default=default)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    p, g, t = (int(x) for x in args.shape.split("x"))
    return args, (p, g, t)


@dataclass
class GrpoStep:
    """The bundled model, its engine and optimizer, and P zero-shot chain_sum prompts to sample G × T from."""

    cfg: object
    model: torch.nn.Module
    engine: object
    prompts: list[list[int]]
    params: object
    optimizer: torch.optim.Optimizer
    scheduler: object
    advantages: list[float]


def grpo_step(p: int, g: int, t: int) -> GrpoStep:
    """Set up what one GRPO step needs (zero-shot prompts and fixed-length completions, as in
    ``step_vs_trl.py``; the update trains all P·G completions in one micro-batch)."""
    from rlvr import api
    from rlvr.data.from_config import build_datasets
    from rlvr.models import load_model, load_tokenizer
    from rlvr.models.chat import encode_prompt
    from rlvr.rollout import HFEngine, SamplingParams
    from rlvr.train.learn.optim import build_optimizer, build_scheduler

    overrides = ["data.few_shot=[]", f"algo.micro_batch_size={p * g}", "optim.warmup_steps=0"]
    cfg = api.load_config(RECIPE, overrides)
    train, _ = build_datasets(cfg.data)
    tokenizer = load_tokenizer(cfg.model.name)
    model = load_model(cfg.model.name, "float32", "cpu")
    optimizer = build_optimizer(model, cfg.optim)
    return GrpoStep(
        cfg=cfg,
        model=model,
        engine=HFEngine(model, tokenizer, max_batch_sequences=1024),
        prompts=[encode_prompt(tokenizer, e.prompt) for e in train[:p]],
        params=SamplingParams(n=g, temperature=1.0, max_new_tokens=t, ignore_eos=True),
        optimizer=optimizer,
        scheduler=build_scheduler(optimizer, 1000, cfg.optim),
        advantages=torch.randn(p * g, generator=torch.Generator().manual_seed(0)).tolist(),
    )
