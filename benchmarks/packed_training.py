"""One policy update unpacked, with rows packed, and with rows packed and the prompts' shared prefix
encoded once (``algo.packing``, the default), alternating, on real rollouts.

    .venv/bin/python benchmarks/packed_training.py                       # the default demo's shape
    .venv/bin/python benchmarks/packed_training.py --shape 1x16x128 --batches 2
    taskset -c 0 .venv/bin/python benchmarks/packed_training.py --threads 1

The batches are what the default demo trains on: the recipe's few-shot chain_sum prompts, P prompts ×
G completions of at most T new tokens sampled by the bundled model at temperature 1, stopping at
its stop token. Each batch is trained in the three settings in turn (the order reverses every
repetition), each a full ``policy_update``: the forward and backward passes, clipping and the
AdamW step. The script prints the completion tokens, the slots the unpacked rows hold (B × T), the
slots the packed rows hold, the prefix all prompts share, and the median update time of each setting.
The update's micro-batches are the recipe's (``algo.micro_batch_size`` 16: two groups of 8 each),
or ``--micro N`` rows; a prefix is shared by the prompts of one micro-batch.
"""

from __future__ import annotations

import statistics
import time

from bench_setup import RECIPE, bench_args


def main() -> None:
    import torch

    from rlvr import api
    from rlvr.data.from_config import build_datasets
    from rlvr.models import load_model, load_tokenizer
    from rlvr.models.chat import encode_prompt
    from rlvr.rollout import HFEngine, SamplingParams
    from rlvr.train.learn.batch import build_batch
    from rlvr.train.learn.logprobs import shared_prefix_length
    from rlvr.train.learn.optim import build_optimizer, build_scheduler
    from rlvr.train.learn.packing import completion_lengths, pack_rows, set_packing
    from rlvr.train.learn.update import policy_update

    args, (p, g, t) = bench_args(
        __doc__.splitlines()[0], shape="4x8x24", reps=3, extra={"--batches": 3, "--micro": 0}
    )
    micro = [f"algo.micro_batch_size={args.micro}"] if args.micro else []
    cfg = api.load_config(RECIPE, [*micro, "optim.warmup_steps=0"])
    train, _ = build_datasets(cfg.data)
    tokenizer = load_tokenizer(cfg.model.name)
    model = load_model(cfg.model.name, "float32", "cpu")
    optimizer = build_optimizer(model, cfg.optim)
    scheduler = build_scheduler(optimizer, 1000, cfg.optim)
    engine = HFEngine(model, tokenizer, max_batch_sequences=1024, seed=0)
    params = SamplingParams(n=g, temperature=1.0, max_new_tokens=t)
    gen = torch.Generator().manual_seed(0)
    from rlvr.train.learn import logprobs as logprobs_module

    settings = {  # (algo.packing, the shortest prefix shared across prompts)
        "unpacked": (False, 10**9),
        "rows packed": (True, 10**9),
        "rows packed + shared prefix": (True, logprobs_module.MIN_SHARED_PREFIX),
    }
    times: dict[str, list[float]] = {name: [] for name in settings}
    tokens = slots = packed_slots = 0
    print(
        f"{p} prompts × {g} completions, ≤ {t} new tokens, micro-batches of {cfg.algo.micro_batch_size} "
        f"rows, {torch.get_num_threads()} threads"
    )
    for b in range(args.batches):
        prompts = [encode_prompt(tokenizer, e.prompt) for e in train[b * p : (b + 1) * p]]
        groups = engine.generate(prompts, params)
        batch = build_batch(groups, torch.randn(p * g, generator=gen).tolist(), engine.pad_id)
        lengths = completion_lengths(batch.completion_attention)
        _, bins = pack_rows(batch.group_index, lengths, batch.completion_width)
        tokens += int(lengths.sum())
        slots += batch.completion_ids.numel()
        packed_slots += len(bins) * batch.completion_width
        print(
            f"batch {b}: prompt tokens {batch.prompt_mask.sum(1).tolist()} (shared prefix "
            f"{shared_prefix_length(batch)}), completion tokens "
            f"{int(lengths.sum())} in {len(batch)} rows × {batch.completion_width} unpacked, "
            f"{len(bins)} rows packed",
            flush=True,
        )
        for rep in range(args.reps + 1):  # the first repetition warms up every setting
            for name in settings if rep % 2 else reversed(list(settings)):
                set_packing(model, settings[name][0])
                logprobs_module.MIN_SHARED_PREFIX = settings[name][1]
                start = time.perf_counter()
                policy_update(model, optimizer, scheduler, batch, cfg.algo, 1.0, 1.0, t)
                if rep:
                    times[name].append(time.perf_counter() - start)
    print(
        f"completion tokens {tokens}: unpacked slots {slots} ({tokens / slots:.0%} real), packed slots "
        f"{packed_slots} ({tokens / packed_slots:.0%} real)"
    )
    base = statistics.median(times["unpacked"])
    for name, seconds in times.items():
        median = statistics.median(seconds)
        print(f"update, {name}: {median:.2f} s (median of {len(seconds)}), {base / median:.2f}× unpacked")


if __name__ == "__main__":
    main()
