"""Decoding three ways, alternating, with a policy update in between: plain nn.Linear, MKL-packed
nn.Linear inside transformers' forward, and the fused packed Llama decode step.

    .venv/bin/python benchmarks/packed_decode.py                  # 1 prompt × 16 completions × 128 tokens
    .venv/bin/python benchmarks/packed_decode.py --shape 2x8x32

A decode step multiplies one row per live sequence by every weight matrix. MKL's sgemm re-lays out
each weight on every call; the packed paths (``rlvr/models/packed.py``, ``rlvr/models/fused_decode.py``)
do it once per generate call, and the fused step also runs q|k|v and gate|up as one GEMM each and
skips transformers' per-layer framework calls. Each repetition runs a policy update (so the weights
really change and must be repacked), then one generate call per path; the packed times include the
repack, and the fused decoder's build (concatenate + pack) is also printed alone. The engines share
the model and sample with the same seed; the script prints how many sampled tokens differ from the
plain path (floating-point noise can flip a sample) and the largest logprob difference over the
tokens before the first difference. Run it on an idle machine.
"""

from __future__ import annotations

import statistics
import time

from bench_setup import bench_args, grpo_step

from rlvr.models.fused_decode import FusedLlamaDecoder
from rlvr.rollout import HFEngine
from rlvr.train.learn.batch import build_batch
from rlvr.train.learn.update import policy_update


def main() -> None:
    args, (p, g, t) = bench_args(__doc__.splitlines()[0], shape="1x16x128", reps=3)
    bench = grpo_step(p, g, t)  # zero-shot prompts, as in benchmarks/step_vs_trl.py
    model, prompts, params = bench.model, bench.prompts, bench.params
    tokenizer = bench.engine.tokenizer
    engines = {
        "plain": HFEngine(model, tokenizer, max_batch_sequences=1024, seed=0, packed_weights="off"),
        "packed": HFEngine(
            model, tokenizer, max_batch_sequences=1024, seed=0, packed_weights="on", fuse_layers=False
        ),
        "fused": HFEngine(model, tokenizer, max_batch_sequences=1024, seed=0, packed_weights="on"),
    }
    generate_s: dict[str, list[float]] = {mode: [] for mode in engines}
    build_s: list[float] = []
    for rep in range(args.reps + 1):  # the first repetition warms up both settings
        groups = engines["plain"].generate(prompts, params)
        batch = build_batch(groups, bench.advantages, engines["plain"].pad_id)
        policy_update(model, bench.optimizer, bench.scheduler, batch, bench.cfg.algo, 1.0, 1.0, t)
        outputs = {}
        for mode, engine in engines.items():
            engine.generator.manual_seed(rep)
            start = time.perf_counter()
            outputs[mode] = engine.generate(prompts, params)
            if rep:
                generate_s[mode].append(time.perf_counter() - start)
        if rep:
            start = time.perf_counter()
            FusedLlamaDecoder(model, rows_hint=p * g)
            build_s.append(time.perf_counter() - start)

    plain = statistics.median(generate_s["plain"])
    print(f"{args.shape}, {args.reps} repetitions, {p * g} sequences decoding {t} tokens")
    labels = {
        "plain": "plain nn.Linear",
        "packed": "packed nn.Linear (incl. repack)",
        "fused": "fused packed step (incl. build)",
    }
    for mode, label in labels.items():
        median = statistics.median(generate_s[mode])
        line = f"  {label:<32} generate {median:.2f} s ({median / t * 1e3:.1f} ms per token)"
        if mode != "plain":
            flips, diff = _compare(outputs["plain"], outputs[mode])
            line += f", {plain / median:.2f}x plain; tokens after a first difference {flips}, "
            line += f"max |logprob diff| before {diff:.1e}"
        print(line)
    print(f"  fused decoder build alone {statistics.median(build_s):.2f} s")


def _compare(plain_groups, packed_groups) -> tuple[int, float]:
    flips, diff = 0, 0.0
    for plain_group, packed_group in zip(plain_groups, packed_groups):
        for a, b in zip(plain_group, packed_group):
            same = 0
            while same < len(a.token_ids) and a.token_ids[same] == b.token_ids[same]:
                same += 1
            flips += len(a.token_ids) - same
            if same:
                diff = max(diff, max(abs(x - y) for x, y in zip(a.logprobs[:same], b.logprobs[:same])))
    return flips, diff


if __name__ == "__main__":
    main()
