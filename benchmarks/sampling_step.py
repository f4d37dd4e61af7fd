"""Sampling one token per row: the normalised inverse CDF against the unnormalised one, alternating.

    .venv/bin/python benchmarks/sampling_step.py
    taskset -c 0 .venv/bin/python benchmarks/sampling_step.py --threads 1

Both pick the next token from softmax(logits / T) with one uniform draw per row. The normalised
sampler (what ``rlvr.rollout.sampling.sample_next`` did before, kept here to compare) builds the
probabilities (a division and a softmax), their cumulative sum, and gathers the chosen probability;
the unnormalised one (``_sample_unnormalised``) exponentiates x − max in place, sums it in blocks of
512 entries, picks a block by the cumulative sum of the block sums and an entry by the cumulative sum
inside that block, with the uniform draw scaled instead of the probabilities. The logits are the
bundled model's at a real decode position, repeated to B rows (49,152 entries each). The script
prints the median time of each over many calls, their ratio, and the largest logprob difference of
the two on the same draws (the same generator state gives the same token unless a draw falls within
rounding of a CDF step).
"""

from __future__ import annotations

import statistics
import time

from bench_setup import bench_args


def normalised(logits, temperature: float, generator):  # noqa: ANN001, ANN201
    import torch

    probs = torch.softmax(logits.float() / temperature, dim=-1)
    cdf = probs.cumsum(dim=-1)
    u = torch.rand((probs.shape[0], 1), generator=generator) * cdf[:, -1:]
    tokens = torch.searchsorted(cdf, u, right=True).squeeze(-1).clamp(max=probs.shape[-1] - 1)
    return tokens, probs.gather(-1, tokens[:, None]).squeeze(-1).log()


def main() -> None:
    import torch

    from rlvr.models import load_model, load_tokenizer
    from rlvr.models.chat import encode_prompt
    from rlvr.rollout.sampling import _sample_unnormalised

    args, _ = bench_args(__doc__.splitlines()[0], shape="1x1x1", reps=200)
    tokenizer = load_tokenizer("smollm2-135m-instruct")
    model = load_model("smollm2-135m-instruct", "float32", "cpu")
    ids = encode_prompt(tokenizer, [{"role": "user", "content": "What is 12 + 35?"}])
    with torch.inference_mode():
        row = model(input_ids=torch.tensor([ids])).logits[0, -1]
    for rows in (16, 32, 64):
        logits = row.repeat(rows, 1).contiguous()
        samplers = {
            "normalised": lambda g, x=logits: normalised(x, 1.0, g),
            "unnormalised": lambda g, x=logits: _sample_unnormalised(x, 1.0, g),
        }
        times: dict[str, list[float]] = {name: [] for name in samplers}
        for rep in range(args.reps):
            for name in samplers if rep % 2 else reversed(list(samplers)):
                generator = torch.Generator().manual_seed(rep)
                start = time.perf_counter()
                samplers[name](generator)
                times[name].append(time.perf_counter() - start)
        a = samplers["normalised"](torch.Generator().manual_seed(0))
        b = samplers["unnormalised"](torch.Generator().manual_seed(0))
        same = a[0] == b[0]
        before, after = statistics.median(times["normalised"]), statistics.median(times["unnormalised"])
        print(
            f"B = {rows}: normalised {before * 1e3:.2f} ms, unnormalised {after * 1e3:.2f} ms, "
            f"{before / after:.2f}×; same tokens {int(same.sum())}/{rows}, max |Δ logprob| "
            f"{float((a[1] - b[1])[same].abs().max()):.1e}",
            flush=True,
        )


if __name__ == "__main__":
    main()
