"""AdamW step + gradient clipping on SmolLM2-135M's parameters: torch's foreach path vs its fused kernel.

    .venv/bin/python benchmarks/optimizer_step.py            # 5 alternating repetitions, 2 threads

Both optimizers get the same parameters and the same (random, fixed) gradients; they alternate, so
load on the machine hits both alike. Prints the median seconds of each and the ratio. Run it on an
idle machine: the step is memory-bound, and a second busy process halves the bandwidth.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

from rlvr.models import load_model  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    params = list(load_model(args.model, "float32", "cpu").parameters())
    generator = torch.Generator().manual_seed(0)
    grads = [torch.randn(p.shape, generator=generator) * 1e-3 for p in params]
    variants = {"foreach": {"foreach": True}, "fused": {"fused": True}}
    optimizers = {
        name: torch.optim.AdamW(params, lr=1e-5, betas=(0.9, 0.99), weight_decay=0.0, **kw)
        for name, kw in variants.items()
    }
    times: dict[str, list[float]] = {name: [] for name in variants}
    for rep in range(args.reps + 1):  # the first repetition allocates optimizer state: not timed
        for name, optimizer in optimizers.items():
            for p, g in zip(params, grads):
                p.grad = g.clone()
            start = time.perf_counter()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            optimizer.step()
            if rep:
                times[name].append(time.perf_counter() - start)
    n = sum(p.numel() for p in params)
    print(f"{n / 1e6:.1f} M parameters, {args.threads} threads, {args.reps} repetitions (clip + AdamW step)")
    medians = {name: statistics.median(t) for name, t in times.items()}
    for name, median in medians.items():
        print(f"  {name:8s} {median:.3f} s  (min {min(times[name]):.3f}, max {max(times[name]):.3f})")
    print(f"  foreach / fused = {medians['foreach'] / medians['fused']:.2f}x")


if __name__ == "__main__":
    main()
