"""Which decode path is fastest in bf16 here? Sampling a GRPO batch through each, alternating, in one run.

    .venv/bin/python benchmarks/bf16_decode.py [--prompts 4 --group 8 --tokens 24 --reps 3 --threads 2]

Paths (all through :class:`rlvr.rollout.HFEngine`, same prompts, fixed length via ``ignore_eos``):

- ``fp32 fused``: fp32 weights, rlvr's fused, MKL-packed Llama decode step (the fp32 default);
- ``bf16 fused``: a bf16 copy of the weights (what ``model.precision: bf16-mixed`` samples from)
  through the fused decode step with oneDNN-packed bf16 weights (the bf16 default where the CPU
  computes bf16 natively);
- ``bf16 plain``: the bf16 copy through transformers' forward, whose one-query attention is
  rlvr's ``single_query_attention`` (``rlvr_sdpa``);
- ``bf16 plain, torch SDPA``: the same through transformers' own ``sdpa`` attention, i.e. PyTorch's
  SDPA kernel at one query in bf16 (what ``bf16 plain`` was before ``single_query_attention``);
- with ``--autocast``, also ``fp32 + autocast``: fp32 weights under bf16 autocast.

Then one decode step alone (16 rows, a 120-token cache), and the matmul that dominates it alone: a
16 x 576 by 576 x 1536 GEMM in fp32, bf16, and bf16 through oneDNN with a prepacked weight
(``torch.ops.mkldnn._linear_pointwise``, what the fused bf16 step uses).

Prints median seconds per batch and the ratio to ``fp32 fused``; a result on a shared machine is
only as good as its ratios. Also checks that ``bf16 fused`` and ``bf16 plain`` drew the same tokens.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import os
import platform
import statistics
import time


def _cpu() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=24)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--autocast", action="store_true", help="also time fp32 weights under bf16 autocast")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch

    from rlvr.config import load_config
    from rlvr.data.from_config import build_datasets
    from rlvr.models import load_model, load_tokenizer
    from rlvr.models.chat import encode_prompt
    from rlvr.models.fused_decode import FusedLlamaDecoder, fused_decode_supported
    from rlvr.models.precision import native_low_precision
    from rlvr.rollout.base import SamplingParams
    from rlvr.rollout.hf_engine import HFEngine
    from rlvr.rollout.kv_cache import reserve_decode_room

    torch.set_num_threads(args.threads)
    tokenizer = load_tokenizer("smollm2-135m-instruct")
    fp32 = load_model("smollm2-135m-instruct").eval().requires_grad_(False)
    bf16 = copy.deepcopy(fp32).to(torch.bfloat16)
    torch_sdpa = copy.deepcopy(bf16)
    torch_sdpa.set_attn_implementation("sdpa")
    native, why = native_low_precision("cpu")
    print(f"{_cpu()}; {why}; fused bf16 step available: {fused_decode_supported(bf16)}")
    train, _ = build_datasets(load_config().data)
    prompts = [encode_prompt(tokenizer, train[i].prompt) for i in range(args.prompts)]
    params = SamplingParams(n=args.group, max_new_tokens=args.tokens, ignore_eos=True)
    none = contextlib.nullcontext
    paths = {
        "fp32 fused": (HFEngine(fp32, tokenizer, packed_weights="on"), none),
        "bf16 fused": (HFEngine(bf16, tokenizer, packed_weights="on", seed=1), none),
        "bf16 plain": (HFEngine(bf16, tokenizer, packed_weights="off", seed=1), none),
        "bf16 plain, torch SDPA": (HFEngine(torch_sdpa, tokenizer, packed_weights="off"), none),
    }
    if args.autocast:
        paths["fp32 + autocast"] = (
            HFEngine(fp32, tokenizer, packed_weights="off"),
            lambda: torch.autocast("cpu", dtype=torch.bfloat16),
        )
    for name, (engine, ctx) in paths.items():  # warm-up, and the path each engine takes
        with ctx():
            engine.generate(prompts[:1], SamplingParams(n=2, max_new_tokens=4, ignore_eos=True))
        print(f"  {name}: decode path {engine.decode_path(args.prompts * args.group, params)}")
    times: dict[str, list[float]] = {name: [] for name in paths}
    drawn: dict[str, list[list[int]]] = {}
    for rep in range(args.reps):
        order = list(paths) if rep % 2 == 0 else list(reversed(paths))
        for name in order:
            engine, ctx = paths[name]
            if name in ("bf16 fused", "bf16 plain"):
                engine.generator.manual_seed(100 + rep)  # the two draw from the same random stream
            start = time.perf_counter()
            with ctx():
                out = engine.generate(prompts, params)
            times[name].append(time.perf_counter() - start)
            drawn[f"{name} {rep}"] = [c.token_ids for group in out for c in group]
    base = statistics.median(times["fp32 fused"])
    print(
        f"{args.prompts} prompts x {args.group} completions x {args.tokens} tokens, {args.threads} threads, "
        f"{args.reps} reps"
    )
    for name, values in times.items():
        median = statistics.median(values)
        print(f"  {name:24s} {median:7.2f} s/batch  ({base / median:.2f}x fp32 fused)")
    same = sum(drawn[f"bf16 fused {r}"] == drawn[f"bf16 plain {r}"] for r in range(args.reps))
    print(f"  bf16 fused and bf16 plain drew identical tokens in {same} of {args.reps} batches")

    def per_step_ms(
        model, fused: bool, rows: int = 16, context: int = 120, steps: int = 24
    ) -> tuple[float, torch.Tensor]:
        """Median milliseconds of a decode step, and the first step's logits (fp32)."""
        from transformers import DynamicCache

        torch.manual_seed(0)
        ids = torch.randint(100, 40000, (rows, context))
        with torch.inference_mode():
            cache = model(input_ids=ids, past_key_values=DynamicCache(), use_cache=True).past_key_values
        reserve_decode_room(cache, steps)
        mask = torch.ones((rows, context), dtype=torch.long)
        pos = torch.full((rows,), context)
        token = torch.randint(100, 40000, (rows,))
        decoder = FusedLlamaDecoder(model, rows_hint=rows) if fused else None
        took, first = [], None
        for _ in range(steps):
            mask = torch.cat([mask, mask.new_ones((rows, 1))], dim=1)
            start = time.perf_counter()
            if decoder is not None:
                logits = decoder.step(token, pos, cache, mask)
            else:
                with torch.inference_mode():
                    logits = model(
                        input_ids=token[:, None],
                        attention_mask=mask,
                        position_ids=pos[:, None],
                        past_key_values=cache,
                    ).logits[:, -1]
            took.append(time.perf_counter() - start)
            first = logits.float() if first is None else first
            pos = pos + 1
        return statistics.median(took[2:]) * 1e3, first

    print(
        "one decode step, 16 rows, 120-token cache of random tokens (median of 22); the first step's "
        "logits against fp32 transformers' (mean and max absolute difference):"
    )
    steps = {
        "fp32 fused": per_step_ms(fp32, True),
        "fp32 plain": per_step_ms(fp32, False),
        "bf16 plain": per_step_ms(bf16, False),
        "bf16 plain, torch SDPA": per_step_ms(torch_sdpa, False),
    }
    if fused_decode_supported(bf16):
        steps["bf16 fused"] = per_step_ms(bf16, True)
    reference = steps["fp32 plain"][1]
    for name, (ms, logits) in steps.items():
        diff = (logits - reference).abs()
        print(
            f"  {name:24s} {ms:7.1f} ms  ({steps['fp32 fused'][0] / ms:.2f}x fp32 fused)  "
            f"logits vs fp32: mean {diff.mean():.4f}, max {diff.max():.3f}"
        )

    from rlvr.models.attention import single_query_attention

    gen = torch.Generator().manual_seed(0)
    query = torch.randn(16, 9, 1, 64, generator=gen).bfloat16()  # SmolLM2: 9 query heads, 3 kv heads
    key, value = (torch.randn(16, 3, 120, 64, generator=gen).bfloat16() for _ in range(2))
    real = torch.ones(16, 1, 1, 120, dtype=torch.bool)
    real[:4, ..., :10] = False  # some left padding
    attention = {
        "single_query_attention": lambda q: single_query_attention(q, key, value, real),
        "torch SDPA (bf16, GQA)": lambda q: torch.nn.functional.scaled_dot_product_attention(
            q, key, value, attn_mask=real, enable_gqa=True
        ),
    }

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
    print("one layer's attention, 16 sequences x 9 heads over 120 cached keys, bf16:")
    with torch.no_grad():
        for name, fn in attention.items():
            print(f"  {name:24s} {gemm_us(fn, query, reps=100):7.0f} µs")
    print("decode-shaped GEMM 16x576 · 576x1536:")
    for name, us in results.items():
        print(f"  {name:20s} {us:7.0f} µs  ({results['fp32'] / us:.2f}x fp32)")


if __name__ == "__main__":
    main()
