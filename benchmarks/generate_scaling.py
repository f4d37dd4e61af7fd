"""Seconds per generate call as the batch grows, against the two floors of a decode step.

    .venv/bin/python benchmarks/generate_scaling.py                       # 1×8, 4×8, 8×8 on the default job
    .venv/bin/python benchmarks/generate_scaling.py --shapes 1x8,4x8,8x8,4x16 --tokens 24

Prompts come from the default job (recipes/grpo.yaml: one demonstration, ≈120 prompt tokens);
every call decodes exactly ``--tokens`` tokens per sequence (``ignore_eos``). One warm-up call per
shape, then the median of ``--reps`` timed calls. Each shape's time per token step is printed next
to two floors measured in the same run: reading every weight once (the model's bytes over the read
bandwidth of a ``sum`` over as many bytes) and its matmul FLOPs (2 × parameters × sequences) at the
rate of a 2048² fp32 matmul. Run it on an idle machine.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

from rlvr import api  # noqa: E402
from rlvr.data.from_config import build_datasets  # noqa: E402
from rlvr.models import load_model, load_tokenizer  # noqa: E402
from rlvr.models.chat import encode_prompt  # noqa: E402
from rlvr.rollout import HFEngine, SamplingParams  # noqa: E402

RECIPE = Path(__file__).resolve().parents[1] / "recipes" / "grpo.yaml"


def _best_seconds(fn, reps: int = 5) -> float:
    fn()
    best = float("inf")
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def floors(model: torch.nn.Module) -> tuple[float, float, int]:
    """(read bandwidth GB/s, matmul GFLOP/s, parameter count), measured now."""
    params = sum(p.numel() for p in model.parameters())
    block = torch.ones(params)
    read_gbs = block.numel() * 4 / _best_seconds(lambda: block.sum()) / 1e9
    a, b = torch.randn(2048, 2048), torch.randn(2048, 2048)
    gflops = 2 * 2048**3 / _best_seconds(lambda: a @ b) / 1e9
    return read_gbs, gflops, params


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default="1x8,4x8,8x8", help="comma-separated PxG")
    parser.add_argument("--tokens", type=int, default=24)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    cfg = api.load_config(RECIPE, [])
    train, _ = build_datasets(cfg.data)
    tokenizer = load_tokenizer(cfg.model.name)
    model = load_model(cfg.model.name, "float32", "cpu")
    engine = HFEngine(model, tokenizer, max_batch_sequences=1024)
    read_gbs, gflops, n_params = floors(model)
    weights_ms = n_params * 4 / read_gbs / 1e6
    print(
        f"{n_params / 1e6:.1f} M parameters; read bandwidth {read_gbs:.1f} GB/s -> {weights_ms:.0f} ms to "
        f"read the weights once; fp32 matmul {gflops:.0f} GFLOP/s"
    )
    shapes = [tuple(int(x) for x in s.split("x")) for s in args.shapes.split(",")]
    prompts = [encode_prompt(tokenizer, e.prompt) for e in train[: max(p for p, _ in shapes)]]
    print(f"mean prompt {statistics.mean(len(p) for p in prompts):.0f} tokens, {args.tokens} new tokens")
    base = None
    for p, g in shapes:
        params = SamplingParams(n=g, temperature=1.0, max_new_tokens=args.tokens, ignore_eos=True)
        engine.generate(prompts[:p], params)
        times = []
        for _ in range(args.reps):
            start = time.perf_counter()
            engine.generate(prompts[:p], params)
            times.append(time.perf_counter() - start)
        median = statistics.median(times)
        base = base or (p * g, median)
        step_ms = median / args.tokens * 1000
        flops_ms = 2 * n_params * p * g / gflops / 1e6
        print(
            f"{p} x {g}: {median:.2f} s per call, {step_ms:.0f} ms per new token with the prefill "
            f"(floors per decode step: weights "
            f"{weights_ms:.0f} ms, FLOPs {flops_ms:.0f} ms); {p * g / base[0]:.0f}x the sequences of the "
            f"first shape for {median / base[1]:.2f}x the time"
        )


if __name__ == "__main__":
    main()
