"""Which decode path is fastest in bf16 here? Sampling a GRPO batch through each, alternating, in one run.

    .venv/bin/python benchmarks/bf16_decode.py [--prompts 4 --group 8 --tokens 24 --reps 3 --threads 2]

Paths (all through :class:`rlvr.rollout.HFEngine`, same prompts, fixed length via ``ignore_eos``):

- ``fp32 fused``: fp32 weights, rlvr's fused, MKL-packed Llama decode step (the fp32 default);
- ``fp32 plain``: fp32 weights through transformers' forward;
- ``bf16 copy``: a bf16 copy of the weights through transformers' forward (``rollout.weights_dtype:
  bf16``, what ``model.precision: bf16-mixed`` samples from);
- ``fp32 + autocast``: fp32 weights, the generate call under bf16 autocast (casts cached per call);
- the matmul that dominates a decode step, alone: a 16 x 576 by 576 x 1536 GEMM in fp32, bf16, and
  bf16 through oneDNN with a prepacked weight (``torch.ops.mkldnn._linear_pointwise``), which rlvr's
  engine does not use yet.

Prints median seconds per batch and the ratio to ``fp32 fused``; a result on a shared machine is
only as good as its ratios.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import os
import statistics
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=24)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch

    from rlvr.config import load_config
    from rlvr.data.from_config import build_datasets
    from rlvr.models import load_model, load_tokenizer
    from rlvr.models.chat import encode_prompt
    from rlvr.rollout.base import SamplingParams
    from rlvr.rollout.hf_engine import HFEngine

    torch.set_num_threads(args.threads)
    tokenizer = load_tokenizer("smollm2-135m-instruct")
    fp32 = load_model("smollm2-135m-instruct").eval().requires_grad_(False)
    bf16 = copy.deepcopy(fp32).to(torch.bfloat16)
    train, _ = build_datasets(load_config().data)
    prompts = [encode_prompt(tokenizer, train[i].prompt) for i in range(args.prompts)]
    params = SamplingParams(n=args.group, max_new_tokens=args.tokens, ignore_eos=True)
    paths = {
        "fp32 fused": (HFEngine(fp32, tokenizer, packed_weights="on"), contextlib.nullcontext),
        "fp32 plain": (HFEngine(fp32, tokenizer, packed_weights="off"), contextlib.nullcontext),
        "bf16 copy": (HFEngine(bf16, tokenizer), contextlib.nullcontext),
        "fp32 + autocast": (
            HFEngine(fp32, tokenizer, packed_weights="off"),
            lambda: torch.autocast("cpu", dtype=torch.bfloat16),
        ),
    }
    times: dict[str, list[float]] = {name: [] for name in paths}
    for engine, ctx in paths.values():  # warm-up
        with ctx():
            engine.generate(prompts[:1], SamplingParams(n=2, max_new_tokens=4, ignore_eos=True))
    for rep in range(args.reps):
        order = list(paths) if rep % 2 == 0 else list(reversed(paths))
        for name in order:
            engine, ctx = paths[name]
            start = time.perf_counter()
            with ctx():
                engine.generate(prompts, params)
            times[name].append(time.perf_counter() - start)
    base = statistics.median(times["fp32 fused"])
    print(
        f"{args.prompts} prompts x {args.group} completions x {args.tokens} tokens, {args.threads} threads, "
        f"{args.reps} reps"
    )
    for name, values in times.items():
        median = statistics.median(values)
        print(f"  {name:16s} {median:7.2f} s/batch  ({base / median:.2f}x fp32 fused)")

    def gemm_us(fn, x, reps: int = 300) -> float:
        for _ in range(20):
            fn(x)
        start = time.perf_counter()
        for _ in range(reps):
            fn(x)
        return (time.perf_counter() - start) / reps * 1e6

    x = torch.randn(16, 576)
    w = torch.randn(1536, 576)
    wb, xb = w.bfloat16(), x.bfloat16()
    with torch.no_grad():
        results = {
            "fp32": gemm_us(lambda v: torch.nn.functional.linear(v, w), x),
            "bf16": gemm_us(lambda v: torch.nn.functional.linear(v, wb), xb),
        }
        if (
            hasattr(torch.ops.mkldnn, "_reorder_linear_weight")
            and torch.ops.mkldnn._is_mkldnn_bf16_supported()
        ):
            packed = torch.ops.mkldnn._reorder_linear_weight(wb, batch_size=16)
            results["bf16 oneDNN packed"] = gemm_us(
                lambda v: torch.ops.mkldnn._linear_pointwise(v, packed, None, "none", [], ""), xb
            )
    print("decode-shaped GEMM 16x576 · 576x1536:")
    for name, us in results.items():
        print(f"  {name:20s} {us:7.0f} µs  ({results['fp32'] / us:.2f}x fp32)")


if __name__ == "__main__":
    main()
