"""Decoding through MKL-packed weights vs plain nn.Linear, alternating, with an update in between.

    .venv/bin/python benchmarks/packed_decode.py                  # 1 prompt × 16 completions × 128 tokens
    .venv/bin/python benchmarks/packed_decode.py --shape 2x8x32

A decode step multiplies one row per live sequence by every weight matrix; MKL's sgemm re-lays out
each weight on every call, the packed path (``rlvr/models/packed.py``) does it once per generate call.
Each repetition runs a policy update (so the weights really change and must be repacked), then one
generate call per setting; the packed time includes the repack, which is also printed alone. The
two engines share the model and sample with the same seed; the script prints how many sampled tokens
differ between them (floating-point noise can flip a sample) and the largest logprob difference over
the tokens before the first difference. Run it on an idle machine.
"""

from __future__ import annotations

import statistics
import time

from bench_setup import bench_args, grpo_step

from rlvr.models.packed import packed_linears
from rlvr.rollout import HFEngine
from rlvr.train.batch import build_batch
from rlvr.train.update import policy_update


def main() -> None:
    args, (p, g, t) = bench_args(__doc__.splitlines()[0], shape="1x16x128", reps=3)
    bench = grpo_step(p, g, t)  # zero-shot prompts, as in benchmarks/step_vs_trl.py
    model, prompts, params = bench.model, bench.prompts, bench.params
    engines = {
        mode: HFEngine(model, bench.engine.tokenizer, max_batch_sequences=1024, seed=0, packed_weights=mode)
        for mode in ("off", "on")
    }
    generate_s: dict[str, list[float]] = {mode: [] for mode in engines}
    repack_s: list[float] = []
    for rep in range(args.reps + 1):  # the first repetition warms up both settings
        groups = engines["off"].generate(prompts, params)
        batch = build_batch(groups, bench.advantages, engines["off"].pad_id)
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
            with packed_linears(model):
                repack_s.append(time.perf_counter() - start)
    flips, diff = _compare(outputs["off"], outputs["on"])

    plain, packed = statistics.median(generate_s["off"]), statistics.median(generate_s["on"])
    print(f"{args.shape}, {args.reps} repetitions, {p * g} sequences decoding {t} tokens")
    print(f"  plain nn.Linear           generate {plain:.2f} s ({plain / t * 1e3:.1f} ms per token)")
    print(f"  MKL-packed (incl. repack) generate {packed:.2f} s ({packed / t * 1e3:.1f} ms per token)")
    print(f"  repack alone {statistics.median(repack_s):.2f} s; plain / packed = {plain / packed:.2f}x")
    print(f"  tokens from a first sampled difference on: {flips}; max |logprob diff| before: {diff:.1e}")


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
