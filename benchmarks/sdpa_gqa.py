"""GQA inside SDPA (rlvr_sdpa) vs repeating K/V to every query head (transformers' sdpa), alternating.

    .venv/bin/python benchmarks/sdpa_gqa.py                 # 2 prompts × 8 completions × 32 tokens
    .venv/bin/python benchmarks/sdpa_gqa.py --shape 1x16x128

With an attention mask (rlvr always passes one: prompts are left-padded), transformers' ``sdpa``
repeats each key/value head to all the query heads that share it before calling SDPA; rlvr's CPU
attention (``rlvr/models/attention.py``, the default on CPU) passes ``enable_gqa=True`` instead. The
model switches between the two with ``set_attn_implementation``, so one process times both.
Each repetition times one generate call and one policy update (rlvr's own, fused AdamW) per
setting; it also prints the largest logit difference between the two on one forward pass. Run it
on an idle machine.
"""

from __future__ import annotations

import statistics
import time

import torch
from bench_setup import bench_args, grpo_step

from rlvr.models.attention import NAME
from rlvr.train.learn.batch import build_batch
from rlvr.train.learn.update import policy_update

SETTINGS = {"sdpa": "repeat K/V (transformers)", NAME: "enable_gqa (rlvr default)"}


def main() -> None:
    args, (p, g, t) = bench_args(__doc__.splitlines()[0], shape="2x8x32", reps=3)
    bench = grpo_step(p, g, t)  # zero-shot prompts, as in benchmarks/step_vs_trl.py
    model, engine, prompts, params = bench.model, bench.engine, bench.prompts, bench.params

    logits = {}
    batch = build_batch(engine.generate(prompts, params), bench.advantages, engine.pad_id)
    for flag in SETTINGS:
        model.set_attn_implementation(flag)
        with torch.no_grad():
            ids = torch.cat([batch.prompt_ids[batch.group_index], batch.completion_ids], dim=1)
            mask = torch.cat([batch.prompt_mask[batch.group_index], batch.completion_mask.long()], dim=1)
            logits[flag] = model(input_ids=ids, attention_mask=mask).logits
    diff = float((logits["sdpa"] - logits[NAME]).abs().max())

    times: dict[str, tuple[list[float], list[float]]] = {flag: ([], []) for flag in SETTINGS}
    for rep in range(args.reps + 1):  # the first repetition warms up both settings
        for flag in SETTINGS:
            model.set_attn_implementation(flag)
            start = time.perf_counter()
            groups = engine.generate(prompts, params)
            generate_s = time.perf_counter() - start
            batch = build_batch(groups, bench.advantages, engine.pad_id)
            start = time.perf_counter()
            policy_update(model, bench.optimizer, bench.scheduler, batch, bench.cfg.algo, 1.0, 1.0, t)
            if rep:
                times[flag][0].append(generate_s)
                times[flag][1].append(time.perf_counter() - start)
    print(f"{args.shape}, {args.reps} repetitions; max |logit difference| {diff:.2e}")
    for flag, (gen, upd) in times.items():
        gen_s, upd_s = statistics.median(gen), statistics.median(upd)
        print(f"  {SETTINGS[flag]:26s} generate {gen_s:.2f} s, update {upd_s:.2f} s")


if __name__ == "__main__":
    main()
