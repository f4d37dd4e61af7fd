"""A vision-language GRPO step vs a text step of the same token count, side by side, alternating.

    .venv/bin/python benchmarks/vlm_step.py                      # 2x8x32 and 4x8x64, 1 thread
    .venv/bin/python benchmarks/vlm_step.py --configs 2x8x32 --reps 1 --threads 2

The VLM is ``tiny-smolvlm`` (Idefics3: SmolLM2-135M's text side, a 2-layer SigLIP encoder on 64-pixel
images, 4 image tokens an image); the text model is the bundled SmolLM2-135M itself, so the two differ
only in the vision side. Each VLM prompt is a ``vision_count`` question with its image; each text
prompt is the same question with filler appended until it has at least as many tokens as the VLM
prompt (image tokens included), then cut to exactly as many (the completions have a fixed length, so
only the count matters). Every child process times ``steps`` rounds of one generate call
(G completions of exactly T tokens) and one policy update (rlvr's GRPO loss, AdamW, the whole batch in
one micro-batch); the first round is warm-up; VLM and text alternate, their order flipping every
repetition. Run it on an idle core.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

MARK = "VLM_RESULT "


def child(kind: str, shape: str, steps: int, threads: int) -> None:
    import torch
    from bench_setup import grpo_step

    from rlvr.data.vision_tasks import vision_count_examples
    from rlvr.models import load_model, load_tokenizer
    from rlvr.models.chat import encode_example, encode_prompt
    from rlvr.rollout import HFEngine
    from rlvr.train.learn.batch import build_batch
    from rlvr.train.learn.optim import build_optimizer, build_scheduler
    from rlvr.train.learn.update import policy_update

    torch.set_num_threads(threads)
    p, g, t = (int(x) for x in shape.split("x"))
    bench = grpo_step(p, g, t)  # the text model, its optimizer, sampling params, advantages
    examples = vision_count_examples(p, 0, "train")
    vlm_tokenizer = load_tokenizer("tiny-smolvlm")
    vlm_prompts = [encode_example(vlm_tokenizer, e) for e in examples]
    if kind == "vlm":
        model = load_model("tiny-smolvlm")
        engine = HFEngine(model, vlm_tokenizer, max_batch_sequences=1024)
        prompts = vlm_prompts
        optimizer = build_optimizer(model, bench.cfg.optim)
        scheduler = build_scheduler(optimizer, 1000, bench.cfg.optim)
    else:
        model, engine, optimizer, scheduler = bench.model, bench.engine, bench.optimizer, bench.scheduler
        prompts = []
        for example, target in zip(examples, vlm_prompts):
            words, ids = 0, []
            while len(ids) < len(target):
                words += 1
                text = example.prompt[-1]["content"] + " (image omitted" + " ." * words + ")"
                ids = encode_prompt(engine.tokenizer, [{"role": "user", "content": text}])
            prompts.append(ids[: len(target) - 1] + ids[-1:] if len(ids) > len(target) else ids)
        assert [len(x) for x in prompts] == [len(x) for x in vlm_prompts]
    generate_s, update_s = [], []
    for _ in range(steps + 1):
        start = time.perf_counter()
        groups = engine.generate(prompts, bench.params)
        generate_s.append(time.perf_counter() - start)
        batch = build_batch(groups, bench.advantages, engine.pad_id)
        start = time.perf_counter()
        policy_update(model, optimizer, scheduler, batch, bench.cfg.algo, 1.0, 1.0, t)
        update_s.append(time.perf_counter() - start)
    result = {
        "generate_s": statistics.median(generate_s[1:]),
        "update_s": statistics.median(update_s[1:]),
        "prompt_tokens": len(prompts[0]),
        "decode_path": engine.decode_path(p * g, bench.params),
    }
    print(MARK + json.dumps(result), flush=True)


def run_child(kind: str, shape: str, args: argparse.Namespace) -> dict:
    cmd = [sys.executable, __file__, "--child", kind, "--shape", shape]
    cmd += ["--steps", str(args.steps), "--threads", str(args.threads)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    lines = [line for line in proc.stdout.splitlines() if line.startswith(MARK)]
    if proc.returncode or not lines:
        raise SystemExit(f"child {kind} {shape} failed:\n{proc.stderr[-3000:]}")
    return json.loads(lines[-1][len(MARK) :])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", default="2x8x32,4x8x64", help="comma-separated PxGxT")
    parser.add_argument("--reps", type=int, default=2, help="subprocesses per kind and config")
    parser.add_argument("--steps", type=int, default=3, help="timed rounds per subprocess (after 1 warm-up)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--shape", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.shape, args.steps, args.threads)
        return
    print(
        "| P × G, T | prompt tokens | generate s: text / VLM | update s: text / VLM "
        "| step s: text / VLM | VLM step ÷ text step |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    for shape in args.configs.split(","):
        runs: dict[str, list[dict]] = {"text": [], "vlm": []}
        for rep in range(args.reps):
            for kind in ("text", "vlm") if rep % 2 == 0 else ("vlm", "text"):
                runs[kind].append(run_child(kind, shape, args))

        def med(kind: str, key: str, runs: dict[str, list[dict]] = runs) -> float:
            return statistics.median(r[key] for r in runs[kind])

        step = {k: med(k, "generate_s") + med(k, "update_s") for k in runs}
        print(
            f"| {shape.replace('x', ' × ', 1).replace('x', ', ')} | {runs['vlm'][0]['prompt_tokens']} "
            f"| {med('text', 'generate_s'):.2f} / {med('vlm', 'generate_s'):.2f} "
            f"| {med('text', 'update_s'):.2f} / {med('vlm', 'update_s'):.2f} "
            f"| {step['text']:.2f} / {step['vlm']:.2f} | {step['vlm'] / step['text']:.2f}× |",
            flush=True,
        )
        paths = {k: runs[k][0]["decode_path"] for k in runs}
        print(f"<!-- decode paths: {paths} -->", flush=True)


if __name__ == "__main__":
    main()
