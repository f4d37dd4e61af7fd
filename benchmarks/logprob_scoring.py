"""Training forward + backward with the chunked chosen-token logprob vs a full log-softmax, alternating.

    .venv/bin/python benchmarks/logprob_scoring.py                  # 1 prompt × 16 completions × 128 tokens
    .venv/bin/python benchmarks/logprob_scoring.py --shape 2x8x32

Both sides run rlvr's shared-prefix forward (``completion_logprobs``) on the same batch of random
completion tokens, then backward a weighted sum of the logprobs, with the entropy computed as the
trainer does; only the scoring of the logits differs: ``rlvr.train.learn.token_logprobs.token_logprobs``
on the first token's and the other tokens' logits apart, vs a full log-softmax of the concatenated
[B, T, V] logits (``plain_scoring=True``). Prints median seconds and the ratio. Run it on an idle
machine.
"""

from __future__ import annotations

import os
import statistics
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
from bench_setup import bench_args  # noqa: E402

from rlvr.models import load_model  # noqa: E402
from rlvr.rollout import Completion  # noqa: E402
from rlvr.train.learn.batch import build_batch  # noqa: E402
from rlvr.train.learn.logprobs import completion_logprobs  # noqa: E402


def plain_scoring(model, batch, temperature=1.0, with_entropy=False):  # noqa: ANN001, ANN201
    """The pre-optimisation path: one [B, T, V] logit tensor, full log-softmax."""
    return completion_logprobs(model, batch, temperature, with_entropy, plain_scoring=True)


def main() -> None:
    args, (p, g, t) = bench_args(__doc__.splitlines()[0], shape="1x16x128", reps=4)
    model = load_model("smollm2-135m-instruct", "float32", "cpu")
    gen = torch.Generator().manual_seed(0)
    groups = []
    for i in range(p):
        prompt = torch.randint(100, 40000, (60,), generator=gen).tolist()
        groups.append(
            [
                Completion(
                    i, prompt, torch.randint(100, 40000, (t,), generator=gen).tolist(), [0.0] * t, "length"
                )
                for _ in range(g)
            ]
        )
    batch = build_batch(groups, torch.randn(p * g, generator=gen).tolist(), pad_id=2)

    def step(fn) -> float:  # noqa: ANN001
        model.zero_grad(set_to_none=True)
        start = time.perf_counter()
        logprobs, _entropy = fn(model, batch, 1.0, True)
        (logprobs * batch.advantages[:, None] * batch.completion_mask).sum().backward()
        return time.perf_counter() - start

    sides = {"full log-softmax": plain_scoring, "chunked": completion_logprobs}
    times: dict[str, list[float]] = {name: [] for name in sides}
    for rep in range(args.reps + 1):
        for name, fn in sides.items():
            elapsed = step(fn)
            if rep:
                times[name].append(elapsed)
    print(f"{args.shape}: forward + backward of the training logprobs, {args.reps} repetitions")
    med = {name: statistics.median(v) for name, v in times.items()}
    for name, m in med.items():
        print(f"  {name:17s} {m:.2f} s")
    print(f"  full / chunked = {med['full log-softmax'] / med['chunked']:.2f}x")


if __name__ == "__main__":
    main()
