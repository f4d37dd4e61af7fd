"""Seconds per GRPO step: rlvr vs TRL's GRPOTrainer on identical work, alternating, in one invocation.

    .venv/bin/python benchmarks/step_vs_trl.py                 # full run (tens of minutes on 2 cores)
    .venv/bin/python benchmarks/step_vs_trl.py --quick         # smoke test: 1 tiny config, 1 rep, 1+1 steps

Both frameworks train the same SmolLM2-135M-Instruct weights (the cached safetensors directory) on
the same reasoning-gym chain_sum prompts (identical token ids, checked), P prompts x G completions of
exactly T new tokens (checked), one AdamW step per generation batch (lr 1e-5, constant, no warmup),
no KL, fp32 on CPU, the same thread count, and the same trivial reward (text length mod 2). Each run
is its own subprocess (``step_vs_trl_child.py``), so peak RSS is per framework; runs alternate
rlvr/TRL (order flipped every repetition) so that drift on a shared machine hits both alike. The
matrix-multiply rate is measured in the same run, between the runs, to turn rlvr's step time into a
"floor fraction". Results (never typed in) replace the marked block of docs/performance.md and
docs/img/step_vs_trl.png. The method is described in docs/performance.md.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from step_vs_trl_child import RESULT_MARKER, rlvr_overrides
from step_vs_trl_report import machine_info, markdown, plot, write_doc

ROOT = Path(__file__).resolve().parents[1]
CHILD = Path(__file__).resolve().parent / "step_vs_trl_child.py"
DEFAULT_CONFIGS = "2x8x32,4x8x64,1x16x128"
QUICK_CONFIG = "2x4x8"


# ------------------------------------------------------------------------------------------ setup
def parse_configs(text: str) -> list[tuple[int, int, int]]:
    """``"2x8x32,4x8x64"`` -> [(P, G, T), ...]: prompts per step, completions per prompt, new tokens."""
    configs = []
    for item in text.split(","):
        parts = item.strip().lower().split("x")
        if len(parts) != 3 or not all(x.isdigit() and int(x) > 0 for x in parts):
            raise SystemExit(f"--configs: {item!r} is not PxGxT (e.g. 2x8x32)")
        configs.append(tuple(int(x) for x in parts))
    return configs


def build_spec(
    p: int, g: int, t: int, args: argparse.Namespace, model_dir: str, precision: str = "fp32"
) -> dict:
    """Everything a child needs, with the prompts in the order rlvr's sampler will draw them.

    rlvr draws prompts with its own seeded sampler; TRL takes its dataset in order
    (``shuffle_dataset=False``), so giving TRL the examples in rlvr's draw order gives both the same
    P prompts at every step. The children report the token ids they actually prompted with, and the
    parent checks them against ``expected_prompt_ids`` (rlvr's chat-template encoding).
    """
    from rlvr.config import load_config
    from rlvr.data.from_config import build_datasets
    from rlvr.data.sampler import PromptSampler
    from rlvr.models import load_tokenizer
    from rlvr.models.chat import encode_prompt

    steps = args.warmup + args.steps
    spec = {
        "model_dir": model_dir,
        "prompts_per_step": p,
        "group_size": g,
        "max_new_tokens": t,
        "warmup": args.warmup,
        "steps": args.steps,
        "threads": args.threads,
        "precision": precision,  # fp32, or bf16: rlvr bf16-mixed (+ bf16 rollout copy), TRL bf16=True
        "lr": 1e-5,
        "seed": 0,
        "train_size": p * (steps + 2),  # a little spare so TRL's dataloader never wraps around
        "trl_gradient_checkpointing": args.trl_gradient_checkpointing,
        "trl_keep_freed_memory": args.trl_keep_freed_memory,
    }
    cfg = load_config(None, rlvr_overrides(spec, tempfile.gettempdir()))
    train, _ = build_datasets(cfg.data)
    order = PromptSampler(len(train), cfg.seed).take(len(train))
    tokenizer = load_tokenizer(model_dir)
    spec["prompts"] = [train[i].prompt for i in order]
    spec["expected_prompt_ids"] = [encode_prompt(tokenizer, m) for m in spec["prompts"]]
    return spec


def matmul_gflops(threads: int, n: int = 2048, seconds: float = 1.5, dtype: str = "fp32") -> float:
    """Sustained GFLOP/s of an n x n matmul loop in ``dtype`` (fp32, bf16) on ``threads`` threads."""
    import torch

    torch.set_num_threads(threads)
    kind = {"fp32": torch.float32, "bf16": torch.bfloat16}[dtype]
    a, b = torch.randn(n, n, dtype=kind), torch.randn(n, n, dtype=kind)
    out = torch.empty(n, n, dtype=kind)
    for _ in range(2):
        torch.mm(a, b, out=out)
    count, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        torch.mm(a, b, out=out)
        count += 1
    return 2 * n**3 * count / (time.perf_counter() - start) / 1e9


def run_child(framework: str, spec_path: Path, threads: int) -> dict:
    env = dict(os.environ)
    env.update(
        {
            "HF_HUB_OFFLINE": "1",
            "TOKENIZERS_PARALLELISM": "false",
            "OMP_NUM_THREADS": str(threads),
            "MKL_NUM_THREADS": str(threads),
            "TRANSFORMERS_VERBOSITY": "error",
            "PYTHONPATH": os.pathsep.join(filter(None, [str(CHILD.parent), env.get("PYTHONPATH")])),
        }
    )
    proc = subprocess.run(
        [sys.executable, str(CHILD), framework, str(spec_path)],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith(RESULT_MARKER)]
    if proc.returncode != 0 or not lines:
        sys.stderr.write(proc.stdout[-4000:] + proc.stderr[-8000:])
        raise SystemExit(f"{framework} child failed (exit code {proc.returncode})")
    return json.loads(lines[-1][len(RESULT_MARKER) :])


# ------------------------------------------------------------------------------------------ analysis
def step_flops(params: dict, prompt_lengths: list[int], g: int, t: int) -> dict[str, float]:
    """FLOPs one step must do, counting each prompt once per group (see docs/performance.md).

    N_body = all parameters except the token embedding (and except an untied LM head); the LM head
    (V x d) is counted only where logits are needed. Attention score/value products are left out,
    so this is a lower bound.
    """
    head = params["lm_head"]
    body = params["total"] - params["embedding"] - (0 if params["tied"] else head)
    p, prompt_tokens = len(prompt_lengths), sum(prompt_lengths)
    b = p * g
    # Generation: prefill every prompt once, then T-1 one-token decode steps per sequence; logits at
    # the last prompt position (shared by the group) and after each decode step.
    generate = 2 * body * (prompt_tokens + b * (t - 1)) + 2 * head * (p + b * (t - 1))
    # Training: forward + backward (2 + 4 per parameter per token) over each prompt once and every
    # completion token; logits only at the B*T positions that predict a completion token.
    train = 6 * body * (prompt_tokens + b * t) + 6 * head * (b * t)
    return {"generate": generate, "train": train, "total": generate + train, "body_params": body}


def check(runs: dict, spec: dict) -> dict[str, object]:
    """Verify equal work: identical prompt ids, exactly T tokens per completion, both train."""
    p, g, t = spec["prompts_per_step"], spec["group_size"], spec["max_new_tokens"]
    n = spec["warmup"] + spec["steps"]
    expected = [spec["expected_prompt_ids"][s * p : (s + 1) * p] for s in range(n)]
    out: dict[str, object] = {}
    for fw in ("rlvr", "trl"):
        lengths = [x for r in runs[fw] for step in r["completion_lengths"] for x in step]
        out[f"{fw}_completions"] = len(lengths)
        out[f"{fw}_completions_of_T"] = sum(x == t for x in lengths)
        out[f"{fw}_completion_lengths"] = sorted(set(lengths))
        informative = [r["informative_groups"] for r in runs[fw]]
        out[f"{fw}_informative_groups"] = (sum(i for i, _ in informative), sum(k for _, k in informative))
        out[f"{fw}_threads"] = sorted({r["threads"] for r in runs[fw]})
        out[f"{fw}_dtype"] = sorted({r["dtype"] for r in runs[fw]})
    # rlvr prompts each unique prompt once; TRL's sampler repeats each prompt G times in a row.
    out["rlvr_prompts_match"] = all(r["prompt_ids"] == expected for r in runs["rlvr"])
    trl_expected = [[ids for ids in step for _ in range(g)] for step in expected]
    out["trl_prompts_match"] = all(r["prompt_ids"] == trl_expected for r in runs["trl"])
    out["rlvr_finish_reasons"] = sorted({f for r in runs["rlvr"] for s in r["finish_reasons"] for f in s})
    out["trl_optim"] = sorted({r["optim"] for r in runs["trl"]})
    out["trl_gradient_checkpointing"] = sorted({r["gradient_checkpointing"] for r in runs["trl"]})
    out["ok"] = bool(
        out["rlvr_prompts_match"]
        and out["trl_prompts_match"]
        and out["rlvr_completions_of_T"] == out["rlvr_completions"] > 0
        and out["trl_completions_of_T"] == out["trl_completions"] > 0
        and out["rlvr_threads"] == out["trl_threads"] == [spec["threads"]]
        and out["rlvr_dtype"] == out["trl_dtype"] == ["torch.float32"]
        and all(r["reward_errors"] == 0 for r in runs["rlvr"])
    )
    return out


def summarize(runs: dict, spec: dict, gflops: float) -> dict:
    """Medians over every timed step of every repetition; peak RSS is the max over repetitions."""
    p, g, t, w = spec["prompts_per_step"], spec["group_size"], spec["max_new_tokens"], spec["warmup"]
    precision = spec.get("precision", "fp32")
    row: dict = {"config": f"{p}x{g}x{t}-{precision}", "P": p, "G": g, "T": t, "precision": precision}
    for fw in ("rlvr", "trl"):
        timed = [s for r in runs[fw] for s in r["steps"][w:]]
        step = [s["step_s"] for s in timed]
        row[fw] = {
            "step_s": statistics.median(step),
            "step_s_min": min(step),
            "step_s_max": max(step),
            "collect_s": statistics.median(s["collect_s"] for s in timed),
            "generate_s": statistics.median(s["generate_s"] for s in timed),
            "train_s": statistics.median(s["step_s"] - s["collect_s"] for s in timed),
            "peak_rss_mib": max(r["peak_rss_mib"] for r in runs[fw]),
            "rss_after_setup_mib": max(r["rss_after_setup_mib"] for r in runs[fw]),
            "setup_s": statistics.median(r["setup_s"] for r in runs[fw]),
            "timed_steps": len(step),
        }
    params = runs["rlvr"][0]["params"]
    prompt_lengths = [
        [len(ids) for ids in step] for r in runs["rlvr"] for step in r["prompt_ids"][w:]
    ]  # identical across runs and frameworks (checked)
    flops = [step_flops(params, lengths, g, t) for lengths in prompt_lengths]
    row["flops"] = {k: statistics.mean(f[k] for f in flops) for k in ("generate", "train", "total")}
    row["params"] = {**params, "body": flops[0]["body_params"]}
    row["mean_prompt_tokens"] = statistics.mean(x for lengths in prompt_lengths for x in lengths)
    rate = gflops * 1e9
    row["ratio"] = row["trl"]["step_s"] / row["rlvr"]["step_s"]
    row["rlvr"]["floor_fraction"] = row["flops"]["total"] / (row["rlvr"]["step_s"] * rate)
    row["trl"]["floor_fraction"] = row["flops"]["total"] / (row["trl"]["step_s"] * rate)
    row["rlvr"]["generate_floor_fraction"] = row["flops"]["generate"] / (row["rlvr"]["generate_s"] * rate)
    row["rlvr"]["train_floor_fraction"] = row["flops"]["train"] / (row["rlvr"]["train_s"] * rate)
    row["check"] = check(runs, spec)
    return row


# ------------------------------------------------------------------------------------------ main
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--configs", default=DEFAULT_CONFIGS, help="comma-separated PxGxT")
    parser.add_argument("--reps", type=int, default=3, help="repetitions of each rlvr/TRL pair")
    parser.add_argument("--steps", type=int, default=5, help="timed steps per run")
    parser.add_argument("--warmup", type=int, default=1, help="untimed steps per run before timing")
    parser.add_argument("--threads", type=int, default=2, help="torch threads in both frameworks")
    parser.add_argument(
        "--precisions",
        default="fp32",
        help="comma-separated: fp32 and/or bf16 (rlvr model.precision=bf16-mixed with its bf16 rollout "
        "copy; TRL bf16=True)",
    )
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "performance.md")
    parser.add_argument("--json", type=Path, default=None, help="also write raw results here")
    parser.add_argument(
        "--trl-gradient-checkpointing",
        action="store_true",
        help="keep TRL's default gradient checkpointing (extra forward; rlvr has none)",
    )
    parser.add_argument(
        "--trl-keep-freed-memory",
        action="store_true",
        help="give TRL's process rlvr's malloc setting too (rlvr/runtime.py; rlvr always has it on CPU)",
    )
    parser.add_argument("--quick", action="store_true", help=f"smoke test: {QUICK_CONFIG}, 1 rep, 1+1 steps")
    args = parser.parse_args()
    if args.quick:
        args.configs, args.reps, args.steps, args.warmup = QUICK_CONFIG, 1, 1, 1
    if args.warmup < 1 or args.steps < 1 or args.reps < 1:
        raise SystemExit("--warmup, --steps and --reps must be at least 1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

    from rlvr.models import resolve_model_path

    command = shlex.join([Path(sys.executable).name, *sys.argv])
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    info = machine_info(args.threads)
    model_dir = resolve_model_path("smollm2-135m-instruct")
    precisions = [x.strip() for x in args.precisions.split(",") if x.strip()]
    if not precisions or any(x not in ("fp32", "bf16") for x in precisions):
        raise SystemExit(f"--precisions: {args.precisions!r}; allowed: fp32, bf16")
    configs = [(*c, prec) for c in parse_configs(args.configs) for prec in precisions]
    rates: dict[str, list[float]] = {d: [] for d in precisions}

    def measure_rates() -> None:
        for dtype in precisions:
            rates[dtype].append(matmul_gflops(args.threads, dtype=dtype))
            print(f"{dtype} matmul: {rates[dtype][-1]:.1f} GFLOP/s on {args.threads} threads", flush=True)

    measure_rates()

    rows, raw = [], []
    with tempfile.TemporaryDirectory(prefix="step_vs_trl_") as tmp:
        specs = []
        for p, g, t, prec in configs:
            spec = build_spec(p, g, t, args, model_dir, prec)
            path = Path(tmp) / f"spec_{p}x{g}x{t}_{prec}.json"
            path.write_text(json.dumps(spec))
            specs.append((spec, path))
        runs = [{"rlvr": [], "trl": []} for _ in configs]
        for rep in range(args.reps):
            for (spec, path), cfg_runs in zip(specs, runs):
                order = ("rlvr", "trl") if rep % 2 == 0 else ("trl", "rlvr")
                for fw in order:
                    label = (
                        f"{spec['prompts_per_step']}x{spec['group_size']}x{spec['max_new_tokens']} "
                        f"{spec['precision']}"
                    )
                    print(f"rep {rep + 1}/{args.reps} {label} {fw} ...", end=" ", flush=True)
                    result = run_child(fw, path, args.threads)
                    cfg_runs[fw].append(result)
                    timed = [s["step_s"] for s in result["steps"][args.warmup :]]
                    print(
                        f"median {statistics.median(timed):.2f} s/step, peak RSS "
                        f"{result['peak_rss_mib']:.0f} MiB",
                        flush=True,
                    )
                measure_rates()
        for (spec, _), cfg_runs in zip(specs, runs):
            rows.append(summarize(cfg_runs, spec, statistics.median(rates[spec["precision"]])))
            raw.append({"spec": {k: v for k, v in spec.items() if "prompt" not in k}, "runs": cfg_runs})

    image = args.out.parent / "img" / "step_vs_trl.png"
    plot(rows, image)
    block = markdown(rows, info, rates, command, os.path.relpath(image, args.out.parent), date)
    write_doc(args.out, block)
    if args.json:
        args.json.write_text(json.dumps({"info": info, "gflops": rates, "rows": rows, "raw": raw}, indent=1))
    for dtype, values in rates.items():
        print(f"\n{dtype} matmul GFLOP/s: {', '.join(f'{x:.0f}' for x in values)}")
    for r in rows:
        print(
            f"{r['config']}: rlvr {r['rlvr']['step_s']:.2f} s/step, TRL {r['trl']['step_s']:.2f} s/step, "
            f"TRL/rlvr {r['ratio']:.2f}x, rlvr floor fraction {r['rlvr']['floor_fraction']:.1%}, "
            f"peak RSS rlvr {r['rlvr']['peak_rss_mib']:.0f} / TRL {r['trl']['peak_rss_mib']:.0f} MiB, "
            f"checks {'ok' if r['check']['ok'] else 'FAILED: ' + json.dumps(r['check'])}"
        )
    print(f"wrote {args.out} and {image}")
    if not all(r["check"]["ok"] for r in rows):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
