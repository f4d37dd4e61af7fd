"""Multi-turn rollout: KV cache kept across turns vs the naive loop that prefills every turn again.

    .venv/bin/python benchmarks/multiturn_rollout.py                      # search env, 4 × 8 episodes
    .venv/bin/python benchmarks/multiturn_rollout.py --json /tmp/multiturn.json
    .venv/bin/python benchmarks/multiturn_rollout.py --model tiny-random --reps 1 --group 2  # smoke

Both modes play the same episodes: the bundled model on the search environment's questions
(``recipes/search_agent.yaml``'s opening: instructions, one worked exchange, the question; each
search answered with up to 3 documents), P questions × G episodes, up to ``--turns`` model turns of
at most T tokens, greedy so both modes make the same turns (checked: the script stops if their
tokens differ). They alternate in one process, the order flipping every repetition (the first round
of each is warm-up). Reported: model time per batch, the tokens the model wrote per second of model
time, turns per episode, the tokens each mode prefilled (counted from the trajectories, not timed),
and the ratio. ``--json`` writes the settings, every repetition's numbers and the summary. Run it on
an idle machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def prefilled_tokens(groups, reuse: bool) -> int:
    """Tokens the model's prefills run over for these episodes: each group's prompt once (its first
    turn), then per later turn the whole conversation (naive) or only what the turn added since the
    kept cache (KV reuse: the last sampled token, never fed, and the environment's message)."""
    total = 0
    for group in groups:
        total += len(group[0].prompt_ids)
        for t in group:
            length, cached = len(t.prompt_ids), None
            for s in t.segments:
                if s.kind == "sampled":
                    if cached is not None:
                        total += length - cached if reuse else length
                    cached = length + len(s.token_ids) - 1
                length += len(s.token_ids)
    return total


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
    parser.add_argument("--json", type=Path, default=None, help="write the raw numbers and summary here")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    tok, model = load_tokenizer(args.model), load_model(args.model)
    engine = HFEngine(model, tok, seed=0)
    examples = list(enumerate(search_examples(args.prompts, 0)))
    params = SamplingParams(n=args.group, temperature=0.0, max_new_tokens=args.tokens)
    runs: list[dict] = []
    tokens_of: dict[bool, list[list[int]]] = {}
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
                flat = [t for g in groups for t in g]
                tokens_of[reuse] = [t.response_ids for t in flat]
                if len(tokens_of) == 2 and tokens_of[True] != tokens_of[False]:
                    sys.exit(
                        "the two modes sampled different tokens: KV reuse is not computing the same model"
                    )
                sampled = sum(t.num_sampled for t in flat)
                runs.append(
                    {
                        "rep": rep,
                        "warmup": rep == 0,
                        "reuse_kv": reuse,
                        "wall_s": wall,
                        "model_s": stats.model_s,
                        "env_s": stats.env_s,
                        "sampled_tokens": sampled,
                        "prefilled_tokens": prefilled_tokens(groups, reuse),
                        "turns_per_episode": stats.counters["turns"] / stats.episodes,
                    }
                )
                print(f"rep {rep} reuse={reuse}: {wall:.1f} s, model {stats.model_s:.1f} s", flush=True)

    def median(reuse: bool, key) -> float:
        return statistics.median(key(r) for r in runs if r["reuse_kv"] is reuse and not r["warmup"])

    summary = {
        mode: {
            "model_s": median(reuse, lambda r: r["model_s"]),
            "sampled_tokens_per_s": median(reuse, lambda r: r["sampled_tokens"] / r["model_s"]),
            "prefilled_tokens": median(reuse, lambda r: r["prefilled_tokens"]),
        }
        for mode, reuse in (("naive", False), ("kv_reuse", True))
    }
    summary["speedup"] = summary["naive"]["model_s"] / summary["kv_reuse"]["model_s"]
    summary["turns_per_episode"] = median(True, lambda r: r["turns_per_episode"])
    naive, kept = summary["naive"], summary["kv_reuse"]
    print(
        "| model | P × G, T, turns | naive: model s / tok/s / prefilled "
        "| KV reuse: model s / tok/s / prefilled | turns/episode | speed-up |"
    )
    print("|---|---|---:|---:|---:|---:|")
    print(
        f"| {args.model} | {args.prompts} × {args.group}, {args.tokens}, ≤{args.turns} | "
        f"{naive['model_s']:.1f} / {naive['sampled_tokens_per_s']:.0f} / {naive['prefilled_tokens']:.0f} | "
        f"{kept['model_s']:.1f} / {kept['sampled_tokens_per_s']:.0f} / {kept['prefilled_tokens']:.0f} | "
        f"{summary['turns_per_episode']:.2f} | {summary['speedup']:.2f}× |"
    )
    if args.json is not None:
        settings = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
        record = {"settings": settings, "torch": torch.__version__, "runs": runs, "summary": summary}
        args.json.write_text(json.dumps(record, indent=1))
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
