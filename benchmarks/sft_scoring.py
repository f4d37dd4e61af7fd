"""SFT's packed scoring: the LM head at every position (full log-softmax) vs only where a trained
token is predicted (rlvr.data.packing.packed_token_logprobs), on multi-turn game demonstrations whose
tokens are mostly context. Same rows, same model, forward + backward, alternating, one thread.

    .venv/bin/python benchmarks/sft_scoring.py [--game frozenlake] [--examples 8] [--reps 3]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import statistics
import time

import torch

from rlvr import api
from rlvr.data.packing import (
    _next_token_logprobs,
    _row_tensors,
    pack,
    packed_token_logprobs,
    sft_loss,
    trajectory_example,
)
from rlvr.models import load_model, load_tokenizer
from rlvr.train.stages.sft import load_demonstrations


def full_head(model: torch.nn.Module, rows) -> tuple[torch.Tensor, torch.Tensor]:
    """The previous scoring: logits and a log-softmax at every position."""
    ids, positions, mask, starts = _row_tensors(rows, next(model.parameters()).device)
    logits = model(input_ids=ids, position_ids=positions, use_cache=False).logits
    return _next_token_logprobs(logits, ids).masked_fill(starts, 0.0), mask.masked_fill(starts, 0.0)


def timed(model: torch.nn.Module, rows, scorer) -> tuple[float, float]:
    model.zero_grad(set_to_none=True)
    start = time.perf_counter()
    loss = sft_loss(*scorer(model, rows))
    loss.backward()
    return time.perf_counter() - start, float(loss.detach())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--game", default="frozenlake")
    parser.add_argument("--examples", type=int, default=8)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    cfg = api.load_config(
        f"recipes/{args.game}.yaml", ["stage=sft", "sft.player=optimal", f"data.train_size={args.examples}"]
    )
    tokenizer = load_tokenizer(cfg.model.name)
    with contextlib.redirect_stderr(io.StringIO()):
        demos = load_demonstrations(cfg, tokenizer)
    rows = pack([trajectory_example(t) for t in demos], cfg.sft.max_length)
    tokens = sum(len(r) for r in rows)
    trained = sum(t.num_trained for t in demos)
    model = load_model(cfg.model.name)
    timed(model, rows, packed_token_logprobs)  # warm-up
    times: dict[str, list[float]] = {"every position": [], "trained positions": []}
    losses = {}
    for _ in range(args.reps):
        for name, scorer in (("every position", full_head), ("trained positions", packed_token_logprobs)):
            seconds, losses[name] = timed(model, rows, scorer)
            times[name].append(seconds)
    full, kept = (statistics.median(times[k]) for k in times)
    print(
        f"{args.game}: {len(demos)} demonstrations in {len(rows)} packed rows, {tokens:,} tokens, "
        f"{trained:,} trained; {args.threads} thread(s), median of {args.reps}"
    )
    for name in times:
        print(f"  LM head at {name:18s} {statistics.median(times[name]):6.2f} s  loss {losses[name]:.6f}")
    print(f"  speed-up {full / kept:.2f}x")


if __name__ == "__main__":
    main()
