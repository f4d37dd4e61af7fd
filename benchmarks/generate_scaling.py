"""Seconds per generate call as the batch grows: how memory-bound decoding is.

    .venv/bin/python benchmarks/generate_scaling.py                       # 1×8, 4×8, 8×8 on the default job
    .venv/bin/python benchmarks/generate_scaling.py --shapes 1x8,4x8,8x8,4x16 --tokens 24

Prompts come from the default job (recipes/grpo.yaml: one demonstration, ≈120 prompt tokens);
every call decodes exactly ``--tokens`` tokens per sequence (``ignore_eos``). One warm-up call per
shape, then the median of ``--reps`` timed calls. A decode step reads every weight once whatever
the batch, so time grows much more slowly than the number of sequences. Run it on an idle machine.
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
    engine = HFEngine(load_model(cfg.model.name, "float32", "cpu"), tokenizer, max_batch_sequences=1024)
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
        print(
            f"{p} x {g}: {median:.2f} s per call, {median / args.tokens * 1000:.0f} ms per token step; "
            f"{p * g / base[0]:.0f}x the sequences of the first shape for {median / base[1]:.2f}x the time"
        )


if __name__ == "__main__":
    main()
