"""The tinker-cookbook's on-policy distillation recipe against ``rlvr serve``, on local prompts.

The recipe (``tinker_cookbook.recipes.distillation.on_policy_distillation``) reads its prompts from
Hugging Face Hub datasets (DeepMath, Tulu 3), which a machine without the Hub cannot load. This
script runs the recipe's own ``cli_main`` unchanged and replaces only its DeepMath prompt loader with
the arithmetic training problems (``arithmetic_data.py``'s ``train.jsonl``). The student samples, the
teacher (a checkpoint on the same server, e.g. the cookbook's chat_sl SFT run) scores every sampled
token with ``compute_logprobs``, and the student is trained on the per-token reverse KL with the
``importance_sampling`` loss, as the recipe does. Runs in the cookbook's environment (``make
cookbook``):

    TINKER_BASE_URL=http://127.0.0.1:8765 TINKER_API_KEY=tml-local .venv-cookbook/bin/python \\
        benchmarks/interop/cookbook_distill_arithmetic.py --model-name DIR \\
        --teacher-checkpoint tinker://RUN/sampler_weights/final --log-path runs/interop/cookbook-distill
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
from pathlib import Path

import tinker_cookbook.distillation.datasets as cookbook_datasets
from tinker_cookbook.recipes.distillation import on_policy_distillation as recipe


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-name", required=True, help="the served base model: student and teacher")
    parser.add_argument("--teacher-checkpoint", required=True, help="tinker://.../sampler_weights/NAME")
    parser.add_argument("--prompts", default="runs/interop/arithmetic-data/train.jsonl")
    parser.add_argument("--log-path", default="runs/interop/cookbook-distill")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--groups-per-batch", type=int, default=8)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--lora-rank", type=int, default=32)
    parser.add_argument("--learning-rate", type=float, default=3e-4)
    parser.add_argument("--max-tokens", type=int, default=8)
    args = parser.parse_args()

    questions = [json.loads(line)["question"] for line in Path(args.prompts).read_text().splitlines() if line]
    cookbook_datasets.load_deepmath_prompts = lambda split="train": questions if split == "train" else None
    config = recipe.CLIConfig(
        model_name=args.model_name,
        renderer_name="role_colon",
        lora_rank=args.lora_rank,
        teacher_model=args.model_name,
        teacher_checkpoint=args.teacher_checkpoint,
        dataset="deepmath",
        group_size=args.group_size,
        groups_per_batch=args.groups_per_batch,
        learning_rate=args.learning_rate,
        max_tokens=args.max_tokens,
        eval_every=0,
        save_every=0,
        max_steps=args.steps,
        log_path=args.log_path,
        base_url=os.environ.get("TINKER_BASE_URL"),
        behavior_if_log_dir_exists="delete",
    )
    asyncio.run(recipe.cli_main(config))


if __name__ == "__main__":
    main()
