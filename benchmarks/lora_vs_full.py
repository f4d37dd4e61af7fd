"""Full fine-tuning vs LoRA adapters: policy update time, generation time, peak RSS, alternating.

    .venv/bin/python benchmarks/lora_vs_full.py                       # 2x8x32 and 4x8x64, r=16
    .venv/bin/python benchmarks/lora_vs_full.py --configs 2x8x32 --reps 1 --rank 8

Peak RSS is per process, so every measurement is its own subprocess; full and LoRA alternate and
their order flips every repetition. Each child loads the bundled model (with adapters of rank
``--rank`` on every linear layer for LoRA, the way ``model.lora.r`` does), builds P zero-shot
chain_sum prompts, and times ``steps`` rounds of one generate call (G completions of exactly T
tokens) and one policy update (rlvr's GRPO loss, AdamW over the trainable parameters); the first
round is warm-up. Full fine-tuning decodes through the fused fp32 path, LoRA through transformers'
forward (the packed copies would leave the adapters out), so the generate column shows that cost
too. Run it on an idle machine.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time

MARK = "LORA_RESULT "


def child(shape: str, rank: int, steps: int, threads: int) -> None:
    import torch
    from bench_setup import grpo_step

    from rlvr.config.schema import LoraConfig
    from rlvr.models.lora import apply_lora, trainable_parameters
    from rlvr.rollout import HFEngine
    from rlvr.train.learn.batch import build_batch
    from rlvr.train.learn.optim import build_optimizer, build_scheduler
    from rlvr.train.learn.update import policy_update

    torch.set_num_threads(threads)
    p, g, t = (int(x) for x in shape.split("x"))
    bench = grpo_step(p, g, t)
    model, optimizer, scheduler, engine = bench.model, bench.optimizer, bench.scheduler, bench.engine
    if rank:
        model = apply_lora(model, LoraConfig(r=rank, alpha=2 * rank))
        optimizer = build_optimizer(model, bench.cfg.optim)
        scheduler = build_scheduler(optimizer, 1000, bench.cfg.optim)
        engine = HFEngine(model, engine.tokenizer, max_batch_sequences=1024)
    generate_s, update_s = [], []
    for _ in range(steps + 1):
        start = time.perf_counter()
        groups = engine.generate(bench.prompts, bench.params)
        generate_s.append(time.perf_counter() - start)
        batch = build_batch(groups, bench.advantages, engine.pad_id)
        start = time.perf_counter()
        policy_update(model, optimizer, scheduler, batch, bench.cfg.algo, 1.0, 1.0, t)
        update_s.append(time.perf_counter() - start)
    trainable, total = trainable_parameters(model)
    result = {
        "generate_s": statistics.median(generate_s[1:]),
        "update_s": statistics.median(update_s[1:]),
        "peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
        "trainable": trainable,
        "total": total,
    }
    print(MARK + json.dumps(result), flush=True)


def run_child(shape: str, rank: int, args: argparse.Namespace) -> dict:
    cmd = [sys.executable, __file__, "--child", shape, "--rank", str(rank)]
    cmd += ["--steps", str(args.steps), "--threads", str(args.threads)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    lines = [line for line in proc.stdout.splitlines() if line.startswith(MARK)]
    if proc.returncode or not lines:
        raise SystemExit(f"child {shape} rank={rank} failed:\n{proc.stderr[-3000:]}")
    return json.loads(lines[-1][len(MARK) :])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", default="2x8x32,4x8x64", help="comma-separated PxGxT")
    parser.add_argument("--rank", type=int, default=16, help="LoRA rank")
    parser.add_argument("--reps", type=int, default=2, help="subprocesses per mode and config")
    parser.add_argument("--steps", type=int, default=3, help="timed rounds per subprocess (after 1 warm-up)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.rank, args.steps, args.threads)
        return
    print(
        f"| P × G, T | update s: full | update s: LoRA r={args.rank} | ratio | generate s: full / LoRA "
        "| peak RSS GiB: full / LoRA | trainable: full / LoRA |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    for shape in args.configs.split(","):
        runs: dict[int, list[dict]] = {0: [], args.rank: []}
        for rep in range(args.reps):
            for rank in (0, args.rank) if rep % 2 == 0 else (args.rank, 0):
                runs[rank].append(run_child(shape, rank, args))

        def med(rank: int, key: str, runs: dict[int, list[dict]] = runs) -> float:
            return statistics.median(r[key] for r in runs[rank])

        full, lora = 0, args.rank
        print(
            f"| {shape.replace('x', ' × ', 1).replace('x', ', ')} | {med(full, 'update_s'):.2f} "
            f"| {med(lora, 'update_s'):.2f} | {med(full, 'update_s') / med(lora, 'update_s'):.2f}× "
            f"| {med(full, 'generate_s'):.2f} / {med(lora, 'generate_s'):.2f} "
            f"| {max(r['peak_rss_gib'] for r in runs[full]):.2f} / "
            f"{max(r['peak_rss_gib'] for r in runs[lora]):.2f} "
            f"| {runs[full][0]['trainable'] / 1e6:.1f}M / {runs[lora][0]['trainable'] / 1e6:.2f}M |",
            flush=True,
        )


if __name__ == "__main__":
    main()
