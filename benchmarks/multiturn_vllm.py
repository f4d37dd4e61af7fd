"""Multi-turn episodes on the vLLM engine: what its prefix cache saves, beside the HF engine's KV reuse.

    .venv/bin/python benchmarks/multiturn_vllm.py                 # needs `make vllm`
    .venv/bin/python benchmarks/multiturn_vllm.py --reps 1 --prompts 2 --group 2   # smoke

The vLLM engine has no ``generate_with_states``: every turn of an episode sends the whole
conversation, and vLLM's automatic prefix cache supplies the prompt tokens it already holds, in
whole KV blocks (128 tokens by default on CPU). This runs the same episodes as
``benchmarks/multiturn_rollout.py`` (the bundled model on the search environment, P questions × G
episodes, up to ``--turns`` turns of at most T tokens, greedy) through:

- ``hf kv_reuse``: the HF engine keeping each episode's KV cache across turns (``env.reuse_kv``);
- ``vllm cache bNNN``: a vLLM server with prefix caching, KV blocks of NNN tokens (``--blocks``);
- ``vllm no cache``: a vLLM server with prefix caching off (every turn prefilled in full).

Each repetition plays other questions (a warm-up batch first), as training steps do. Reported per
mode: model seconds per batch (median over ``--reps``), the prompt tokens sent, the share of them
served from the prefix cache (vLLM's ``num_cached_tokens``), and whether the tokens equal the HF
engine's (fp32 greedy on both: they should). The servers run one at
a time in this process's CPU set; pin it with ``taskset``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def main() -> None:
    import torch

    from rlvr.config import load_config
    from rlvr.envs.search import SearchEnv, search_examples
    from rlvr.models import load_model, load_tokenizer
    from rlvr.rollout import HFEngine, SamplingParams
    from rlvr.rollout.episodes import EpisodeLimits, EpisodeStats, run_episodes
    from rlvr.rollout.from_config import build_engine

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--blocks", default="128,32", help="comma-separated KV block sizes to try")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    tok, model = load_tokenizer(args.model), load_model(args.model).eval()
    # each repetition plays other questions: the same ones again would be served from the cache
    # that the previous repetition filled, which is not what a training step sees
    batches = [list(enumerate(search_examples(args.prompts, rep))) for rep in range(args.reps + 1)]
    params = SamplingParams(n=args.group, temperature=0.0, max_new_tokens=args.tokens)

    def play(engine, reuse: bool, threads, examples) -> dict:  # noqa: ANN001
        stats = EpisodeStats()
        limits = EpisodeLimits(max_turns=args.turns, max_tokens=1024, reuse_kv=reuse)
        sent, cached = getattr(engine, "prompt_tokens", 0), getattr(engine, "cached_prompt_tokens", 0)
        began = time.perf_counter()
        groups = run_episodes(engine, tok, examples, lambda e: SearchEnv(k=3), params, limits, threads, stats)
        wall = time.perf_counter() - began
        flat = [t for g in groups for t in g]
        return {
            "wall_s": wall,
            "model_s": stats.model_s,
            "tokens": [t.response_ids for t in flat],
            "turns": stats.counters["turns"] / stats.episodes,
            "sent": getattr(engine, "prompt_tokens", 0) - sent,
            "cached": getattr(engine, "cached_prompt_tokens", 0) - cached,
        }

    def measure(engine, reuse: bool) -> dict:  # noqa: ANN001
        with ThreadPoolExecutor(8) as threads:
            runs = [play(engine, reuse, threads, examples) for examples in batches][1:]  # 1st: warm-up
        return {
            "model_s": statistics.median(r["model_s"] for r in runs),
            "turns": statistics.mean(r["turns"] for r in runs),
            "sent": sum(r["sent"] for r in runs),
            "cached": sum(r["cached"] for r in runs),
            "tokens": [t for r in runs for t in r["tokens"]],
        }

    results = {"hf kv_reuse": measure(HFEngine(model, tok, seed=0), True)}
    modes = [(f"vllm cache b{b}", {"block_size": int(b)}) for b in args.blocks.split(",")]
    modes.append(("vllm no cache", {"enable_prefix_caching": False}))
    with tempfile.TemporaryDirectory() as logs:
        for name, kwargs in modes:
            cfg = load_config(
                None,
                [
                    f"model.name={args.model}",
                    "rollout.engine=vllm",
                    "rollout.vllm.max_model_len=2048",
                    f"rollout.vllm.llm_kwargs={kwargs}",
                ],
            )
            engine = build_engine(cfg, model, tok, log_dir=Path(logs))
            try:
                results[name] = measure(engine, False)
            finally:
                engine.close()
            print(f"{name}: model {results[name]['model_s']:.1f} s", flush=True)

    reference = results["hf kv_reuse"]["tokens"]
    print(
        f"\n{args.model}, search env, {args.prompts} × {args.group} episodes, ≤{args.turns} turns of ≤"
        f"{args.tokens} tokens, greedy, {args.threads} thread(s); median of {args.reps} after a warm-up\n"
    )
    print("| mode | model s | turns/episode | prompt tokens sent | from prefix cache | tokens = HF's |")
    print("|---|---:|---:|---:|---:|---|")
    for name, r in results.items():
        share = f"{r['cached'] / r['sent']:.0%}" if r["sent"] else "—"
        sent = f"{r['sent']:,}" if r["sent"] else "—"
        same = "yes" if r["tokens"] == reference else "no"
        print(f"| {name} | {r['model_s']:.1f} | {r['turns']:.2f} | {sent} | {share} | {same} |")


if __name__ == "__main__":
    main()
