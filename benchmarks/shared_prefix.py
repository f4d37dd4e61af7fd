"""Generation with and without the prompts' shared prefix prefilled once (``rollout.share_prefix``).

    .venv/bin/python benchmarks/shared_prefix.py
    taskset -c 0 .venv/bin/python benchmarks/shared_prefix.py --threads 1

Two workloads of the default demo, on the recipe's few-shot chain_sum prompts (118–120 tokens, the
first 94 the same in all):

- a training step's rollouts: P prompts × G completions of at most T new tokens at temperature 1;
- the held-out evaluation: ``--eval`` prompts decoded greedily, at most T new tokens, in calls of
  at most 64 sequences as the evaluation runs them.

Each runs with the engine's ``share_prefix`` on and off in turn, the order swapping every repetition
(the first repetition warms both up). Both engines sample with the same seed; the script prints the
median seconds of each and how many completions differ (a sampled token can flip on float rounding).
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

    args, (p, g, t) = bench_args(__doc__.splitlines()[0], shape="4x8x24", reps=3, extra={"--eval": 200})
    cfg = api.load_config(RECIPE, [])
    train, held_out = build_datasets(cfg.data)
    tokenizer = load_tokenizer(cfg.model.name)
    model = load_model(cfg.model.name, "float32", "cpu")
    engines = {share: HFEngine(model, tokenizer, seed=0, share_prefix=share) for share in (False, True)}
    step_prompts = [encode_prompt(tokenizer, e.prompt) for e in train[:p]]
    eval_prompts = [encode_prompt(tokenizer, e.prompt) for e in held_out[: args.eval]]
    workloads = {
        f"rollouts {p} × {g} × {t}": (step_prompts, SamplingParams(n=g, temperature=1.0, max_new_tokens=t)),
        f"evaluation, {len(eval_prompts)} greedy": (
            eval_prompts,
            SamplingParams(n=1, temperature=0.0, max_new_tokens=t),
        ),
    }
    lengths = [len(x) for x in step_prompts + eval_prompts]
    print(f"{torch.get_num_threads()} threads; prompts of {min(lengths)}–{max(lengths)} tokens")
    for name, (prompts, params) in workloads.items():
        times: dict[bool, list[float]] = {False: [], True: []}
        differ = 0
        for rep in range(args.reps + 1):
            out = {}
            for share in (False, True) if rep % 2 else (True, False):
                engines[share].generator.manual_seed(rep)
                start = time.perf_counter()
                out[share] = engines[share].generate(prompts, params)
                if rep:
                    times[share].append(time.perf_counter() - start)
            differ += sum(
                a.token_ids != b.token_ids for ga, gb in zip(out[False], out[True]) for a, b in zip(ga, gb)
            )
        off, on = statistics.median(times[False]), statistics.median(times[True])
        total = (args.reps + 1) * sum(len(group) for group in out[False])
        print(
            f"{name}: prefilled whole {off:.2f} s, shared prefix once {on:.2f} s, {off / on:.2f}×; "
            f"completions that differ {differ}/{total}",
            flush=True,
        )


if __name__ == "__main__":
    main()
