"""A cost model of one GRPO step at scale: generation, weight transfer, training, waiting. A MODEL.

    .venv/bin/python benchmarks/step_cost_model.py              # 7B on 8 and 64 GPUs, the defaults below
    .venv/bin/python benchmarks/step_cost_model.py --gpus 8,64,256 --response 4096

Nothing here was measured: no GPU was available to rlvr's sessions. The inputs are hardware data-sheet
figures and assumed efficiencies, each a flag, so that a measurement on a GPU machine replaces an
assumption instead of the model. The terms:

- generation (colocated: every GPU generates, then every GPU trains). Each decode step of a GPU's
  share of the batch costs the larger of reading the weights and its KV cache at
  ``bandwidth x bw_efficiency`` and its FLOPs at ``peak x decode_efficiency``; the step count is the
  *longest* response (``straggler`` x the mean length), because a synchronous step waits for it;
- prefill of the prompts at ``peak x prefill_mfu``;
- weight transfer after the update: bf16 weights at ``sync_gbps`` (in-node NVLink for 8 GPUs,
  the inter-node fabric beyond);
- training: 6 FLOPs per parameter per token over prompt + response tokens at ``peak x train_mfu``,
  plus one forward pass (2 FLOPs per parameter per token) for the old-policy / reference logprobs;
- waiting: the share of generation spent on the tail (sequences finished, GPUs idle), reported apart.
"""

from __future__ import annotations

import argparse


def step_cost(args: argparse.Namespace, gpus: int) -> dict[str, float]:
    params = args.params * 1e9
    seqs = args.prompts * args.group
    per_gpu = seqs / gpus
    peak = args.peak_tflops * 1e12
    bw = args.bandwidth_tbs * 1e12 * args.bw_efficiency
    kv_per_token = 2 * args.layers * args.kv_heads * args.head_dim * 2  # bf16 keys + values, bytes
    steps = int(args.response * args.straggler)
    decode = 0.0
    for k in range(steps):
        alive = per_gpu if k < args.response else per_gpu * 0.05  # the tail: a few long sequences
        context = args.prompt + k
        memory = (2 * params + alive * context * kv_per_token) / bw
        compute = 2 * params * alive / (peak * args.decode_efficiency)
        decode += max(memory, compute)
    tail = decode * (steps - args.response) / steps if steps > args.response else 0.0
    prefill = 2 * params * per_gpu * args.prompt / (peak * args.prefill_mfu)
    tokens = per_gpu * (args.prompt + args.response)
    train = (6 + 2) * params * tokens / (peak * args.train_mfu)
    link = args.nvlink_gbps if gpus <= args.gpus_per_node else args.fabric_gbps
    sync = 2 * params / (link * 1e9)
    total = prefill + decode + sync + train
    return {
        "generate": prefill + decode,
        "of which tail": tail,
        "sync": sync,
        "train": train,
        "step": total,
        "samples/s": seqs / total,
        "tokens/s": seqs * args.response / total,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--gpus", default="8,64")
    p.add_argument("--params", type=float, default=7.0, help="billions (a Llama/Qwen-7B shape)")
    p.add_argument("--layers", type=int, default=28)
    p.add_argument("--kv-heads", type=int, default=4)
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--prompts", type=int, default=512, help="prompts per step")
    p.add_argument("--group", type=int, default=8, help="completions per prompt")
    p.add_argument("--prompt", type=int, default=512, help="prompt tokens")
    p.add_argument("--response", type=int, default=2048, help="mean response tokens")
    p.add_argument("--straggler", type=float, default=2.0, help="longest response / mean")
    p.add_argument("--peak-tflops", type=float, default=989.0, help="H100 SXM dense bf16 data sheet")
    p.add_argument("--bandwidth-tbs", type=float, default=3.35, help="H100 SXM HBM3 data sheet")
    p.add_argument("--bw-efficiency", type=float, default=0.6, help="assumed share of HBM bandwidth")
    p.add_argument("--decode-efficiency", type=float, default=0.3, help="assumed")
    p.add_argument("--prefill-mfu", type=float, default=0.5, help="assumed")
    p.add_argument("--train-mfu", type=float, default=0.4, help="assumed FSDP MFU at 7B")
    p.add_argument("--gpus-per-node", type=int, default=8)
    p.add_argument("--nvlink-gbps", type=float, default=200.0, help="assumed effective GB/s in a node")
    p.add_argument("--fabric-gbps", type=float, default=25.0, help="assumed GB/s between nodes (200 Gb/s)")
    args = p.parse_args()
    print(
        f"MODEL, not a measurement: {args.params:g}B, {args.prompts} prompts x {args.group}, "
        f"prompt {args.prompt} + response {args.response} tokens (longest {args.straggler:g}x)"
    )
    rows = [(int(g), step_cost(args, int(g))) for g in args.gpus.split(",")]
    keys = list(rows[0][1])
    print("| GPUs | " + " | ".join(keys) + " |")
    print("|---:|" + "---:|" * len(keys))
    for gpus, r in rows:
        cells = [f"{r[k]:.0f}" if k.endswith("/s") else f"{r[k]:.1f} s" for k in keys]
        print(f"| {gpus} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
