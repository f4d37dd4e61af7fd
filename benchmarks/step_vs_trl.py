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
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from step_vs_trl_child import RESULT_MARKER, rlvr_overrides

ROOT = Path(__file__).resolve().parents[1]
CHILD = Path(__file__).resolve().parent / "step_vs_trl_child.py"
BEGIN, END = "<!-- step_vs_trl:begin -->", "<!-- step_vs_trl:end -->"
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


def build_spec(p: int, g: int, t: int, args: argparse.Namespace, model_dir: str) -> dict:
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


def matmul_gflops(threads: int, n: int = 2048, seconds: float = 1.5) -> float:
    """Sustained fp32 GFLOP/s of an n x n matmul loop on ``threads`` threads."""
    import torch

    torch.set_num_threads(threads)
    a, b = torch.randn(n, n), torch.randn(n, n)
    out = torch.empty(n, n)
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
    row: dict = {"config": f"{p}x{g}x{t}", "P": p, "G": g, "T": t}
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


# ------------------------------------------------------------------------------------------ report
def machine_info(threads: int) -> dict:
    import torch
    import transformers
    import trl

    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        commit = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(ROOT), "status", "--porcelain", "--", "src"], capture_output=True, text=True
        ).stdout.strip()
        commit = f"{commit}{' (src/ has uncommitted changes)' if dirty else ''}"
    except OSError:
        commit = "unknown"
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "threads": threads,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "trl": trl.__version__,
        "rlvr_commit": commit,
        "load_avg_start": os.getloadavg()[0],
    }


def plot(rows: list[dict], path: Path) -> None:
    """One panel per configuration (own y scale): a stacked bar per framework."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path.parent.mkdir(parents=True, exist_ok=True)
    fig, axes = plt.subplots(1, len(rows), figsize=(max(5.0, 3.2 * len(rows)), 4.8), squeeze=False)
    parts = [
        ("generate", "#4c72b0"),
        ("reward + advantages", "#dd8452"),
        ("train (fwd/bwd + AdamW)", "#55a868"),
    ]
    for ax, row in zip(axes[0], rows):
        for x, fw in enumerate(("rlvr", "trl")):
            r = row[fw]
            values = [r["generate_s"], max(r["collect_s"] - r["generate_s"], 0.0), r["train_s"]]
            bottom = 0.0
            for value, (name, color) in zip(values, parts):
                ax.bar(x, value, 0.6, bottom=bottom, color=color, label=name)
                bottom += value
            ax.text(x, r["step_s"], f"{r['step_s']:.1f} s", ha="center", va="bottom", fontsize=9)
        ax.set_xticks([0, 1], ["rlvr", "TRL"])
        ax.set_xlim(-0.6, 1.6)
        ax.set_ylim(0, max(row["rlvr"]["step_s"], row["trl"]["step_s"]) * 1.15)
        ax.set_title(
            f"{row['P']} × {row['G']}, {row['T']} tokens\nTRL / rlvr = {row['ratio']:.2f}×", fontsize=10
        )
    axes[0][0].set_ylabel("seconds per step (median)")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles[:3], labels[:3], loc="lower center", ncol=3, fontsize=8, frameon=False)
    fig.suptitle("GRPO step on CPU: rlvr vs TRL GRPOTrainer\n(SmolLM2-135M-Instruct, fp32)", fontsize=10)
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    fig.savefig(path, dpi=130)
    plt.close(fig)


def markdown(rows: list[dict], info: dict, gflops: list[float], command: str, image: str, date: str) -> str:
    rate = statistics.median(gflops)
    lines = [
        BEGIN,
        "<!-- Generated by benchmarks/step_vs_trl.py; do not edit by hand. -->",
        "",
        f"Measured {date} with:",
        "",
        "```",
        command,
        "```",
        "",
        f"Machine: {info['cpu']}, {info['cores']} cores, {info['threads']} torch threads per run; "
        f"Python {info['python']}, torch {info['torch']}, transformers {info['transformers']}, "
        f"TRL {info['trl']}; rlvr {info['rlvr_commit']}. "
        f"fp32 matmul (2048², {info['threads']} threads): **{rate:.0f} GFLOP/s** median of "
        f"{len(gflops)} measurements between runs ({min(gflops):.0f}–{max(gflops):.0f}). "
        f"Load average at start: {info['load_avg_start']:.2f}.",
        "",
        "| P × G, T new tokens | rlvr s/step | TRL s/step | TRL / rlvr | rlvr peak RSS | TRL peak RSS "
        "| GFLOP/step | rlvr floor fraction | TRL floor fraction |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['P']} × {r['G']}, {r['T']} | {r['rlvr']['step_s']:.2f} | {r['trl']['step_s']:.2f} "
            f"| **{r['ratio']:.2f}×** | {r['rlvr']['peak_rss_mib']:.0f} MiB "
            f"| {r['trl']['peak_rss_mib']:.0f} MiB "
            f"| {r['flops']['total'] / 1e9:.0f} | {r['rlvr']['floor_fraction']:.0%} "
            f"| {r['trl']['floor_fraction']:.0%} |"
        )
    lines += [
        "",
        "Where the time goes (medians, seconds per step; *collect* = generate + decode text + reward + "
        "advantages, *train* = step − collect):",
        "",
        "| P × G, T | rlvr generate | rlvr collect | rlvr train | TRL generate | TRL collect | TRL train "
        "| rlvr generate floor | rlvr train floor | steps timed (each) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        a, b = r["rlvr"], r["trl"]
        lines.append(
            f"| {r['P']} × {r['G']}, {r['T']} | {a['generate_s']:.2f} | {a['collect_s']:.2f} "
            f"| {a['train_s']:.2f} | {b['generate_s']:.2f} | {b['collect_s']:.2f} | {b['train_s']:.2f} "
            f"| {a['generate_floor_fraction']:.0%} | {a['train_floor_fraction']:.0%} | {a['timed_steps']} |"
        )
    lines += ["", "Equal-work checks (from what the runs actually did):", ""]
    for r in rows:
        c = r["check"]
        status = "ok" if c["ok"] else "**FAILED**"
        lines.append(
            f"- {r['P']} × {r['G']}, {r['T']}: {status}. Completions of exactly T={r['T']} tokens: rlvr "
            f"{c['rlvr_completions_of_T']}/{c['rlvr_completions']}, TRL {c['trl_completions_of_T']}/"
            f"{c['trl_completions']} (lengths seen: {c['rlvr_completion_lengths']} / "
            f"{c['trl_completion_lengths']}). Prompt token ids identical to rlvr's encoding: rlvr "
            f"{c['rlvr_prompts_match']}, TRL {c['trl_prompts_match']} (mean prompt "
            f"{r['mean_prompt_tokens']:.1f} tokens). Groups with non-constant reward: rlvr "
            f"{c['rlvr_informative_groups'][0]}/{c['rlvr_informative_groups'][1]}, TRL "
            f"{c['trl_informative_groups'][0]}/{c['trl_informative_groups'][1]}. Threads "
            f"{c['rlvr_threads']}/{c['trl_threads']}; TRL optimizer `{', '.join(c['trl_optim'])}`, "
            f"gradient checkpointing {c['trl_gradient_checkpointing']}."
        )
    p = rows[0]["params"]
    lines += [
        "",
        f"Parameters: {p['total'] / 1e6:.1f} M in all, N_body = {p['body'] / 1e6:.1f} M without the token "
        f"embedding, LM head {p['lm_head'] / 1e6:.1f} M ({'tied to' if p['tied'] else 'separate from'} "
        "the embedding).",
        "",
        f"![rlvr vs TRL seconds per step]({image})",
        "",
        END,
    ]
    return "\n".join(lines)


def write_doc(path: Path, block: str) -> None:
    """Replace the marked block of ``path`` (or append it, or create the file)."""
    text = path.read_text() if path.exists() else "# Performance\n\n"
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        text = head + block + rest.split(END, 1)[1]
    else:
        text = text.rstrip() + "\n\n" + block + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


# ------------------------------------------------------------------------------------------ main
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--configs", default=DEFAULT_CONFIGS, help="comma-separated PxGxT")
    parser.add_argument("--reps", type=int, default=3, help="repetitions of each rlvr/TRL pair")
    parser.add_argument("--steps", type=int, default=5, help="timed steps per run")
    parser.add_argument("--warmup", type=int, default=1, help="untimed steps per run before timing")
    parser.add_argument("--threads", type=int, default=2, help="torch threads in both frameworks")
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
    configs = parse_configs(args.configs)
    gflops = [matmul_gflops(args.threads)]
    print(f"fp32 matmul: {gflops[-1]:.1f} GFLOP/s on {args.threads} threads", flush=True)

    rows, raw = [], []
    with tempfile.TemporaryDirectory(prefix="step_vs_trl_") as tmp:
        specs = []
        for p, g, t in configs:
            spec = build_spec(p, g, t, args, model_dir)
            path = Path(tmp) / f"spec_{p}x{g}x{t}.json"
            path.write_text(json.dumps(spec))
            specs.append((spec, path))
        runs = [{"rlvr": [], "trl": []} for _ in configs]
        for rep in range(args.reps):
            for (spec, path), cfg_runs in zip(specs, runs):
                order = ("rlvr", "trl") if rep % 2 == 0 else ("trl", "rlvr")
                for fw in order:
                    label = f"{spec['prompts_per_step']}x{spec['group_size']}x{spec['max_new_tokens']}"
                    print(f"rep {rep + 1}/{args.reps} {label} {fw} ...", end=" ", flush=True)
                    result = run_child(fw, path, args.threads)
                    cfg_runs[fw].append(result)
                    timed = [s["step_s"] for s in result["steps"][args.warmup :]]
                    print(
                        f"median {statistics.median(timed):.2f} s/step, peak RSS "
                        f"{result['peak_rss_mib']:.0f} MiB",
                        flush=True,
                    )
                gflops.append(matmul_gflops(args.threads))
        rate = statistics.median(gflops)
        for (spec, _), cfg_runs in zip(specs, runs):
            rows.append(summarize(cfg_runs, spec, rate))
            raw.append({"spec": {k: v for k, v in spec.items() if "prompt" not in k}, "runs": cfg_runs})

    image = args.out.parent / "img" / "step_vs_trl.png"
    plot(rows, image)
    block = markdown(rows, info, gflops, command, os.path.relpath(image, args.out.parent), date)
    write_doc(args.out, block)
    if args.json:
        args.json.write_text(json.dumps({"info": info, "gflops": gflops, "rows": rows, "raw": raw}, indent=1))
    print(f"\nmatmul GFLOP/s: {', '.join(f'{x:.0f}' for x in gflops)}")
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
