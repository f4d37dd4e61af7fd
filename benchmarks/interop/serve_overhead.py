"""What the Tinker protocol costs: the same RL steps through the SDK and ``rlvr serve`` vs in-process.

Each step samples ``groups`` prompts × ``group`` completions (``max_tokens`` new tokens each, no
stop: fixed work; no seeds, so the server may batch the requests that wait together, and the
in-process run samples all prompts in one batch),
centres the rewards (here: a completion's count of even token ids, a stand-in any program could
compute) within each group, runs ``forward_backward`` with ``importance_sampling`` on the sampled
tokens and their sampler logprobs, one AdamW step, and takes a new sampler snapshot. ``api``: the
official SDK in this process against ``rlvr serve`` in another (pinned to its own core).
``direct``: the same server code (:class:`rlvr.serve.service.Service`'s model and sampler) called in
this process, with no HTTP, no serialisation and no client. Both start from the same LoRA seed and do
the same amount of work; the report gives seconds per step and the ratio.

    .venv/bin/python benchmarks/interop/serve_overhead.py --steps 6 [--out runs/interop/overhead.json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

PORT = 8791


def prompts(groups: int) -> list[list[int]]:
    rng = np.random.default_rng(0)
    return [[int(t) for t in rng.integers(100, 20000, 24)] for _ in range(groups)]


def advantages(tokens: list[list[int]]) -> list[float]:
    rewards = np.array([sum(t % 2 == 0 for t in seq) for seq in tokens], dtype=np.float64)
    return list(rewards - rewards.mean())


def run_api(args: argparse.Namespace, path: str) -> list[float]:
    import tinker
    from tinker import types

    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    server = subprocess.Popen(
        ["taskset", "-c", "0", sys.executable, "-m", "rlvr", "serve", "--port", str(PORT), "--threads", "1",
         "--root", str(Path(args.root) / "api")],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        for line in server.stdout:  # wait for the banner
            if "TINKER_BASE_URL" in line:
                break
        os.environ.update(TINKER_API_KEY="tml-bench", TINKER_TELEMETRY="0")
        client = tinker.ServiceClient(base_url=f"http://127.0.0.1:{PORT}")
        training = client.create_lora_training_client(base_model=path, rank=32, seed=0).result()
        times = []
        for _ in range(args.steps):
            start = time.perf_counter()
            sampler = training.save_weights_and_get_sampling_client().result()
            futures = [
                sampler.sample(
                    types.ModelInput.from_ints(p), args.group,
                    types.SamplingParams(max_tokens=args.max_tokens, stop=[]),
                )
                for p in prompts(args.groups)
            ]  # fmt: skip
            datums = []
            for prompt, future in zip(prompts(args.groups), futures):
                seqs = future.result().sequences
                for seq, adv in zip(seqs, advantages([s.tokens for s in seqs])):
                    full, pad = prompt + seq.tokens, len(prompt) - 1
                    datums.append(
                        types.Datum(
                            model_input=types.ModelInput.from_ints(full[:-1]),
                            loss_fn_inputs={
                                "target_tokens": full[1:],
                                "logprobs": [0.0] * pad + list(seq.logprobs),
                                "advantages": [0.0] * pad + [adv] * len(seq.tokens),
                            },
                        )
                    )
            training.forward_backward(datums, "importance_sampling").result()
            training.optim_step(types.AdamParams(learning_rate=1e-4)).result()
            times.append(time.perf_counter() - start)
        return times
    finally:
        server.terminate()
        server.wait(timeout=30)


def run_direct(args: argparse.Namespace) -> list[float]:
    from rlvr.models.lora import merged_weights
    from rlvr.serve.sampling import SampleSpec
    from rlvr.serve.service import ServeSettings, Service
    from rlvr.serve.training import AdamParams
    from rlvr.serve.wire import Datum, ForwardBackward

    service = Service(ServeSettings(root=Path(args.root) / "direct"))
    session = service.create_session()
    model = service._build(f"{session}:train:0", session, {"rank": 32, "seed": 0})
    times = []
    for step in range(args.steps):
        start = time.perf_counter()
        snapshot = f"step{step}"
        service.sampler.add(snapshot, merged_weights(model.policy))
        datums = []
        request = {"num_samples": args.group, "sampling_params": {"max_tokens": args.max_tokens, "stop": []}}
        spec = SampleSpec.from_request(request, 4096, 1024)
        groups = service.sampler.sample(snapshot, prompts(args.groups), spec)  # one batch, as the server does
        for prompt, seqs in zip(prompts(args.groups), groups):
            for seq, adv in zip(seqs, advantages([s.tokens for s in seqs])):
                full, pad = prompt + seq.tokens, len(prompt) - 1
                datums.append(
                    Datum(
                        np.array(full[:-1]),
                        {
                            "target_tokens": np.array(full[1:]),
                            "logprobs": np.array([0.0] * pad + seq.logprobs, dtype=np.float32),
                            "advantages": np.array([0.0] * pad + [adv] * len(seq.tokens), dtype=np.float32),
                        },
                    )
                )
        model.forward_backward(ForwardBackward("m", 0, "importance_sampling", {}, False, datums))
        model.optim_step(AdamParams(learning_rate=1e-4))
        times.append(time.perf_counter() - start)
    service.stop()
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--groups", type=int, default=8)
    parser.add_argument("--group", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--root", default="runs/interop/overhead")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    torch.set_num_threads(1)
    os.sched_setaffinity(0, {1})  # the client / in-process run on core 1; the server on core 0
    from rlvr.models.loading import resolve_model_path

    path = resolve_model_path("smollm2-135m-instruct")
    api = run_api(args, path)
    direct = run_direct(args)
    skip = 1  # the first step of each warms up (allocations, the first snapshot)
    a, d = float(np.mean(api[skip:])), float(np.mean(direct[skip:]))
    result = {
        "shape": f"{args.groups}x{args.group}x{args.max_tokens}",
        "steps": args.steps,
        "api_s_per_step": round(a, 3),
        "direct_s_per_step": round(d, 3),
        "api_over_direct": round(a / d, 3),
        "api_steps": [round(t, 3) for t in api],
        "direct_steps": [round(t, 3) for t in direct],
    }
    print(json.dumps(result, indent=2))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
