"""Weight-sync time per MB for each transport that runs here, side by side in one run.

    .venv/bin/python benchmarks/weight_sync.py [--reps 3]            # the vLLM rows need `make vllm`

Each transport pushes the bundled SmolLM2-135M's weights (fp32 learner) to its engine after a small
change to every weight, as the weight sync does after an update:

- ``in-process``: the HF engine shares the learner's module (``InProcessSync``): nothing is copied;
- ``copy fp32``: the engine's own fp32 copy (``CopySync``, the asynchronous loop's sync);
- ``copy bf16``: a bf16 copy (``CopySync``, ``model.precision=bf16-mixed``'s sampling copy);
- ``vllm shm``: a vLLM server in its own process (``VLLMWeightSync``): the parameters written to
  /dev/shm, loaded by vLLM's weight-transfer API (fp32 server);
- ``vllm lora adapter`` / ``vllm lora merged``: a LoRA policy (r=16 on every linear layer, the
  adapters changed) pushed to a vLLM server started with LoRA on: only the adapters, loaded by
  vLLM's ``add_lora`` (``rollout.vllm.lora_sync=adapter``), or the merged weights through /dev/shm
  (``lora_sync=merged``).

Prints median seconds per push, the MB sent (the fp32 parameters; the adapters' alone for the adapter
row) and MB/s. NCCL and CUDA IPC need a GPU and are not measured.
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
    from rlvr.train.loop.async_collect import CopySync
    from rlvr.train.loop.weight_sync import InProcessSync

    torch.set_num_threads(args.threads)
    tokenizer = load_tokenizer("smollm2-135m-instruct")
    policy = load_model("smollm2-135m-instruct")
    megabytes = sum(p.numel() * p.element_size() for p in policy.parameters()) / 1e6

    def nudge(model) -> None:  # noqa: ANN001
        with torch.no_grad():
            for p in model.parameters():
                if p.requires_grad:  # all of a plain model; the adapters of a LoRA one
                    p.mul_(1.0 + 1e-6)

    syncs = {
        "in-process": lambda: InProcessSync(HFEngine(policy, tokenizer)),
        "copy fp32": lambda: CopySync(HFEngine(load_model("smollm2-135m-instruct").eval(), tokenizer)),
        "copy bf16": lambda: CopySync(
            HFEngine(load_model("smollm2-135m-instruct").eval().to(torch.bfloat16), tokenizer)
        ),
    }

    def time_pushes(sync, model=policy) -> tuple[list[float], float]:  # noqa: ANN001 (any WeightSync)
        sync.push(model, 0)  # warm-up
        times = []
        for version in range(1, args.reps + 1):
            nudge(model)
            start = time.perf_counter()
            sync.push(model, version)
            times.append(time.perf_counter() - start)
        return times, megabytes

    results = {name: time_pushes(make()) for name, make in syncs.items()}
    if not args.no_vllm:
        from rlvr.models.lora import apply_lora
        from rlvr.rollout.vllm_engine import VLLMWeightSync

        with tempfile.TemporaryDirectory() as logs:
            engine = build_engine(load_config(None, ["rollout.engine=vllm"]), policy, tokenizer, Path(logs))
            try:
                results["vllm shm"] = time_pushes(VLLMWeightSync(engine))
            finally:
                engine.close()
            cfg = load_config(None, ["rollout.engine=vllm", "model.lora.r=16"])
            adapted = apply_lora(load_model("smollm2-135m-instruct"), cfg.model.lora)
            adapter_mb = (
                sum(p.numel() * p.element_size() for p in adapted.parameters() if p.requires_grad) / 1e6
            )
            engine = build_engine(cfg, adapted, tokenizer, Path(logs))
            try:
                times, _ = time_pushes(VLLMWeightSync(engine), adapted)
                results["vllm lora adapter"] = times, adapter_mb
                engine.lora_sync = "merged"
                results["vllm lora merged"] = time_pushes(VLLMWeightSync(engine), adapted)
            finally:
                engine.close()
    print(
        f"SmolLM2-135M, {megabytes:.0f} MB of fp32 parameters pushed, {args.reps} pushes, "
        f"{args.threads} threads"
    )
    for name, (times, mb) in results.items():
        median = statistics.median(times)
        rate = f"{mb / median:8.0f} MB/s" if median > 1e-4 else "  (no copy)"
        print(f"  {name:17s} {mb:7.1f} MB {median:8.3f} s/push  {median / mb * 1e3:8.3f} ms/MB  {rate}")


if __name__ == "__main__":
    main()
