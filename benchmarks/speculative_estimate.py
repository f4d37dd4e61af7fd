"""Would prompt-lookup speculative decoding pay on this CPU? Its acceptance and its verify cost, measured.

    .venv/bin/python benchmarks/speculative_estimate.py
    taskset -c 0 .venv/bin/python benchmarks/speculative_estimate.py --threads 1

Prompt-lookup decoding drafts the next k tokens by finding the context's last n-gram (n = 3, 2, 1)
earlier in the context and copying what followed it; no draft model. Verifying the drafts keeps the
sampling distribution exact: at each drafted position the model samples its token as usual, and the
draft survives only while the sampled token equals it. (A deterministic draft d is accepted with
probability p(d), and on rejection the sample comes from p without d: this is rejection sampling
with a point-mass draft.) One verify forward then yields 1 + (the number of leading drafts that
survive) tokens per sequence.

Because the verification samples exactly as plain decoding does, the tokens a speculative sampler
would produce are distributed as plain samples. So the acceptance is measured on plain rollouts:
walking each sampled completion, a verify step starting at position i drafts from the context up
to i, and accepts the drafts that equal the tokens actually sampled next. The script does that on

- the default task: the recipe's few-shot chain_sum prompts, 8 × 8 completions of ≤ 24 tokens at
  temperature 1 (the demo's sampling), and the same prompts decoded greedily (its evaluation);
- a multi-turn environment: the search environment of ``benchmarks/multiturn_rollout.py``, 4 × 8
  episodes of ≤ 3 turns of ≤ 32 tokens at temperature 1, drafting from the whole conversation
  (the retrieved documents included);

and times the verify forward: B sequences each running S = k + 1 tokens on top of a prefilled
cache, against S = 1, through the same transformers forward. The projected decode speed-up at
draft length k is (tokens per verify step) / (cost of an S = k + 1 step / cost of an S = 1 step).
"""

from __future__ import annotations

import statistics
import time
from concurrent.futures import ThreadPoolExecutor

from bench_setup import RECIPE, bench_args

DRAFT_LENGTHS = (1, 2, 3, 4)


def lookup_draft(context: list[int], k: int, max_n: int = 3) -> list[int]:
    """Up to k tokens that followed the latest earlier occurrence of the context's last n-gram."""
    for n in range(max_n, 0, -1):
        if len(context) <= n:
            continue
        tail = context[-n:]
        for start in range(len(context) - n - 1, -1, -1):
            if context[start : start + n] == tail:
                return context[start + n : start + n + k]
    return []


def verify_steps(context: list[int], sampled: list[int], k: int) -> int:
    """Verify steps a prompt-lookup sampler with draft length k takes to produce ``sampled``."""
    steps = position = 0
    while position < len(sampled):
        draft = lookup_draft(context + sampled[:position], k)
        accepted = 0
        while accepted < len(draft) and position + accepted < len(sampled):
            if draft[accepted] != sampled[position + accepted]:
                break
            accepted += 1
        steps += 1
        position += accepted + 1  # the accepted drafts, then the step's own sample
    return steps


def sampled_runs(trajectory) -> list[tuple[list[int], list[int]]]:  # noqa: ANN001
    """(context, sampled tokens) of each run of sampled tokens in a trajectory's response."""
    runs, context, current = [], list(trajectory.prompt_ids), []
    for token, sampled in zip(trajectory.response_ids, trajectory.loss_mask):
        if sampled:
            current.append(token)
        else:
            if current:
                runs.append((list(context), current))
                context += current
                current = []
            context.append(token)
    if current:
        runs.append((context, current))
    return runs


def acceptance(runs: list[tuple[list[int], list[int]]]) -> dict[int, float]:
    tokens = sum(len(s) for _, s in runs)
    return {k: tokens / sum(verify_steps(c, s, k) for c, s in runs) for k in DRAFT_LENGTHS}


def main() -> None:
    import torch

    from rlvr import api
    from rlvr.data.from_config import build_datasets
    from rlvr.envs.search import SearchEnv, search_examples
    from rlvr.models import load_model, load_tokenizer
    from rlvr.models.chat import encode_prompt
    from rlvr.rollout import HFEngine, SamplingParams
    from rlvr.rollout.episodes import EpisodeLimits, EpisodeStats, run_episodes
    from rlvr.rollout.kv_cache import reserve_decode_room
    from rlvr.trajectory import Trajectory

    args, (p, g, t) = bench_args(__doc__.splitlines()[0], shape="4x8x24", reps=5)
    cfg = api.load_config(RECIPE, [])
    train, _ = build_datasets(cfg.data)
    tokenizer = load_tokenizer(cfg.model.name)
    model = load_model(cfg.model.name, "float32", "cpu")
    engine = HFEngine(model, tokenizer, max_batch_sequences=1024, seed=0)

    prompts = [encode_prompt(tokenizer, e.prompt) for e in train[: 2 * p]]
    groups = engine.generate(prompts, SamplingParams(n=g, temperature=1.0, max_new_tokens=t))
    single = [
        r for group in groups for c in group for r in sampled_runs(Trajectory.from_completion(c, -1, "", 0))
    ]
    greedy = engine.generate(prompts, SamplingParams(n=1, temperature=0.0, max_new_tokens=t))
    evals = [
        r for group in greedy for c in group for r in sampled_runs(Trajectory.from_completion(c, -1, "", 0))
    ]
    params = SamplingParams(n=g, temperature=1.0, max_new_tokens=32)
    with ThreadPoolExecutor(8) as threads:
        episodes = run_episodes(
            engine,
            tokenizer,
            list(enumerate(search_examples(p, 0))),
            lambda e: SearchEnv(k=3),
            params,
            EpisodeLimits(max_turns=3, max_tokens=1024),
            threads,
            EpisodeStats(),
        )
    multi = [r for group in episodes for traj in group for r in sampled_runs(traj)]
    rates = {
        "default task, temperature 1": acceptance(single),
        "default task, greedy (the evaluation)": acceptance(evals),
        "search, multi-turn, temperature 1": acceptance(multi),
    }

    # the verify forward: B rows, S new tokens each, on a prefilled cache of the default prompts
    rows = p * g
    cost: dict[int, float] = {}
    with torch.inference_mode():
        ids = torch.tensor([prompts[0]] * rows)
        for s in (1, *(k + 1 for k in DRAFT_LENGTHS)):
            times = []
            for _ in range(args.reps + 1):
                out = model(input_ids=ids, use_cache=True, logits_to_keep=1)
                cache = reserve_decode_room(out.past_key_values, 8)
                step = torch.randint(100, 1000, (rows, s))
                positions = torch.arange(ids.shape[1], ids.shape[1] + s)[None].expand(rows, s)
                start = time.perf_counter()
                model(input_ids=step, position_ids=positions, past_key_values=cache, use_cache=True)
                times.append(time.perf_counter() - start)
            cost[s] = statistics.median(times[1:])
    print(
        f"{rows} sequences, {torch.get_num_threads()} threads; "
        f"verify forward over a {ids.shape[1]}-token prompt:"
    )
    for s, seconds in cost.items():
        print(f"  S = {s}: {seconds * 1000:.1f} ms ({seconds / cost[1]:.2f}× S = 1)")
    print("| rollouts | " + " | ".join(f"k = {k}" for k in DRAFT_LENGTHS) + " |")
    print("|---|" + "---:|" * len(DRAFT_LENGTHS))
    for name, rate in rates.items():
        cells = [f"{rate[k]:.2f} tok/step, {rate[k] / (cost[k + 1] / cost[1]):.2f}×" for k in DRAFT_LENGTHS]
        print(f"| {name} | " + " | ".join(cells) + " |")
    print("(tokens per verify step, and the projected decode speed-up: tokens per step / relative step cost)")


if __name__ == "__main__":
    main()
