"""Weight-sync time per MB for each transport that runs here, side by side in one run.

    .venv/bin/python benchmarks/weight_sync.py [--reps 3]            # the vLLM rows need `make vllm`

Each transport pushes the bundled SmolLM2-135M's weights (fp32 learner) to its engine after a small
change to every weight, as the weight sync does after an update:

- ``in-process``: the HF engine shares the learner's module (``InProcessSync``): nothing is copied;
- ``copy fp32``: the engine's own fp32 copy (``CopySync``, the asynchronous loop's sync);
- ``copy bf16``: a bf16 copy (``CopySync``, ``model.precision=bf16-mixed``'s sampling copy);
- ``vllm shm``: a vLLM server in its own process (``VLLMWeightSync``): the parameters written to
  /dev/shm, loaded by vLLM's weight-transfer API (fp32 server).

Prints median seconds per push, the MB the learner sends (its fp32 parameters) and MB/s. NCCL and
CUDA IPC need a GPU and are not measured.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--no-vllm", action="store_true", help="leave out the vLLM row")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch

    from rlvr.config import load_config
    from rlvr.models import load_model, load_tokenizer
    from rlvr.rollout.from_config import build_engine
    from rlvr.rollout.hf_engine import HFEngine
    from rlvr.train.async_collect import CopySync
    from rlvr.train.weight_sync import InProcessSync

    torch.set_num_threads(args.threads)
    tokenizer = load_tokenizer("smollm2-135m-instruct")
    policy = load_model("smollm2-135m-instruct")
    megabytes = sum(p.numel() * p.element_size() for p in policy.parameters()) / 1e6

    def nudge() -> None:
        with torch.no_grad():
            for p in policy.parameters():
                p.mul_(1.0 + 1e-6)

    syncs = {
        "in-process": lambda: InProcessSync(HFEngine(policy, tokenizer)),
        "copy fp32": lambda: CopySync(HFEngine(load_model("smollm2-135m-instruct").eval(), tokenizer)),
        "copy bf16": lambda: CopySync(
            HFEngine(load_model("smollm2-135m-instruct").eval().to(torch.bfloat16), tokenizer)
        ),
    }

    def time_pushes(sync) -> list[float]:  # noqa: ANN001 (any WeightSync)
        sync.push(policy, 0)  # warm-up
        times = []
        for version in range(1, args.reps + 1):
            nudge()
            start = time.perf_counter()
            sync.push(policy, version)
            times.append(time.perf_counter() - start)
        return times

    results = {name: time_pushes(make()) for name, make in syncs.items()}
    if not args.no_vllm:
        cfg = load_config(None, ["rollout.engine=vllm"])
        with tempfile.TemporaryDirectory() as logs:
            from rlvr.rollout.vllm_engine import VLLMWeightSync

            engine = build_engine(cfg, policy, tokenizer, log_dir=Path(logs))
            try:
                results["vllm shm"] = time_pushes(VLLMWeightSync(engine))
            finally:
                engine.close()
    print(
        f"SmolLM2-135M, {megabytes:.0f} MB of fp32 parameters pushed, {args.reps} pushes, "
        f"{args.threads} threads"
    )
    for name, times in results.items():
        median = statistics.median(times)
        rate = f"{megabytes / median:8.0f} MB/s" if median > 1e-4 else "  (no copy)"
        print(f"  {name:11s} {median:8.3f} s/push  {median / megabytes * 1e3:8.3f} ms/MB  {rate}")


if __name__ == "__main__":
    main()
