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
from rlvr.models.attention import NAME  # noqa: E402
from rlvr.models.chat import encode_prompt  # noqa: E402
from rlvr.rollout import HFEngine, SamplingParams  # noqa: E402
from rlvr.train.batch import build_batch  # noqa: E402
from rlvr.train.optim import build_optimizer, build_scheduler  # noqa: E402
from rlvr.train.update import policy_update  # noqa: E402

RECIPE = Path(__file__).resolve().parents[1] / "recipes" / "grpo.yaml"
SETTINGS = {"sdpa": "repeat K/V (transformers)", NAME: "enable_gqa (rlvr default)"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", default="2x8x32", help="PxGxT")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    p, g, t = (int(x) for x in args.shape.split("x"))
    overrides = ["data.few_shot=[]", f"algo.micro_batch_size={p * g}", "optim.warmup_steps=0"]
    cfg = api.load_config(RECIPE, overrides)  # zero-shot prompts, as in benchmarks/step_vs_trl.py
    train, _ = build_datasets(cfg.data)
    tokenizer = load_tokenizer(cfg.model.name)
    model = load_model(cfg.model.name, "float32", "cpu")
    engine = HFEngine(model, tokenizer, max_batch_sequences=1024)
    prompts = [encode_prompt(tokenizer, e.prompt) for e in train[:p]]
    params = SamplingParams(n=g, temperature=1.0, max_new_tokens=t, ignore_eos=True)
    optimizer = build_optimizer(model, cfg.optim)
    scheduler = build_scheduler(optimizer, 1000, cfg.optim)
    advantages = torch.randn(p * g, generator=torch.Generator().manual_seed(0)).tolist()

    logits = {}
    batch = build_batch(engine.generate(prompts, params), advantages, engine.pad_id)
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
            batch = build_batch(groups, advantages, engine.pad_id)
            start = time.perf_counter()
            policy_update(model, optimizer, scheduler, batch, cfg.algo, 1.0, 1.0, t)
            if rep:
                times[flag][0].append(generate_s)
                times[flag][1].append(time.perf_counter() - start)
    print(f"{args.shape}, {args.reps} repetitions; max |logit difference| {diff:.2e}")
    for flag, (gen, upd) in times.items():
        gen_s, upd_s = statistics.median(gen), statistics.median(upd)
        print(f"  {SETTINGS[flag]:26s} generate {gen_s:.2f} s, update {upd_s:.2f} s")


if __name__ == "__main__":
    main()
