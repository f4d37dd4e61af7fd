"""Multi-turn rollout: KV cache kept across turns vs the naive loop that prefills every turn again.

    .venv/bin/python benchmarks/multiturn_rollout.py                      # search env, 4 × 8 episodes
    .venv/bin/python benchmarks/multiturn_rollout.py --model tiny-random --reps 1   # smoke

Both modes play the same episodes: the bundled model on the search environment's questions
(``recipes/search_agent.yaml``'s opening: instructions, one worked exchange, the question; each
search answered with up to 3 documents), P questions × G episodes, up to ``--turns`` model turns of
at most T tokens, greedy so both modes make the same turns. They alternate in one process, the order
flipping every repetition (the first round of each is warm-up). Reported: model time per batch, the
tokens the model wrote per second of model time, turns per episode, and the ratio. Run it on an idle
machine.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from concurrent.futures import ThreadPoolExecutor

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def main() -> None:
    import torch

    from rlvr.envs.search import SearchEnv, search_examples
    from rlvr.models import load_model, load_tokenizer
    from rlvr.rollout import HFEngine, SamplingParams
    from rlvr.rollout.episodes import EpisodeLimits, EpisodeStats, run_episodes

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    tok, model = load_tokenizer(args.model), load_model(args.model)
    engine = HFEngine(model, tok, seed=0)
    examples = list(enumerate(search_examples(args.prompts, 0)))
    params = SamplingParams(n=args.group, temperature=0.0, max_new_tokens=args.tokens)
    results: dict[bool, list[tuple[float, int, float]]] = {True: [], False: []}
    with ThreadPoolExecutor(8) as threads:
        for rep in range(args.reps + 1):
            for reuse in (True, False) if rep % 2 == 0 else (False, True):
                stats = EpisodeStats()
                limits = EpisodeLimits(max_turns=args.turns, max_tokens=1024, reuse_kv=reuse)
                began = time.perf_counter()
                groups = run_episodes(
                    engine, tok, examples, lambda e: SearchEnv(k=3), params, limits, threads, stats
                )
                wall = time.perf_counter() - began
                sampled = sum(
                    len(s.token_ids) for g in groups for t in g for s in t.segments if s.kind == "sampled"
                )
                if rep:  # the first round warms up
                    results[reuse].append((stats.model_s, sampled, stats.counters["turns"] / stats.episodes))
                print(f"rep {rep} reuse={reuse}: {wall:.1f} s, model {stats.model_s:.1f} s", flush=True)
    print(
        "| model | P × G, T, turns | naive: model s / tok/s | KV reuse: model s / tok/s | turns/episode "
        "| speed-up |"
    )
    print("|---|---|---:|---:|---:|---:|")
    naive_s = statistics.median(r[0] for r in results[False])
    reuse_s = statistics.median(r[0] for r in results[True])
    naive_tok = statistics.median(r[1] / r[0] for r in results[False])
    reuse_tok = statistics.median(r[1] / r[0] for r in results[True])
    turns = statistics.mean(r[2] for r in results[True])
    print(
        f"| {args.model} | {args.prompts} × {args.group}, {args.tokens}, ≤{args.turns} | {naive_s:.1f} / "
        f"{naive_tok:.0f} | {reuse_s:.1f} / {reuse_tok:.0f} | {turns:.2f} | {naive_s / reuse_s:.2f}× |"
    )


if __name__ == "__main__":
    main()
