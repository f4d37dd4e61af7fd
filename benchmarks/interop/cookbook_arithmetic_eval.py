"""Held-out accuracy of the tinker-cookbook's arithmetic task, through the Tinker SDK.

Runs in the cookbook's own environment (``make cookbook``: .venv-cookbook) against any Tinker
endpoint (``rlvr serve``): greedy answers to problems the cookbook's training batches never drew,
prompted and parsed exactly as ``tinker_cookbook.recipes.math_rl.arithmetic_env`` does (the
role_colon renderer, its one few-shot example, the last integer of the reply).

    TINKER_BASE_URL=http://127.0.0.1:8765 TINKER_API_KEY=tml-local .venv-cookbook/bin/python \\
        benchmarks/interop/cookbook_arithmetic_eval.py --model-name DIR [--model-path tinker://...]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import tinker
from tinker import types
from tinker_cookbook import renderers
from tinker_cookbook.recipes.math_rl.arithmetic_env import ArithmeticEnv, _extract_final_int
from tinker_cookbook.tokenizer_utils import get_tokenizer

sys.path.insert(0, str(Path(__file__).parent))
from arithmetic_data import held_out  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-name", required=True, help="the served base model (its tokenizer)")
    parser.add_argument("--model-path", default=None, help="tinker://.../sampler_weights/NAME; default: base")
    parser.add_argument("--n", type=int, default=200)
    parser.add_argument("--groups-per-batch", type=int, default=8, help="the training run's batch size")
    parser.add_argument("--max-tokens", type=int, default=5)
    parser.add_argument("--renderer", default="role_colon", help="the training run's renderer_name")
    args = parser.parse_args()
    tokenizer = get_tokenizer(args.model_name)
    renderer = renderers.get_renderer(args.renderer, tokenizer)
    problems = held_out(args.n, args.groups_per_batch)
    client = tinker.ServiceClient()
    if args.model_path:
        sampler = client.create_sampling_client(model_path=args.model_path, base_model=args.model_name)
    else:
        sampler = client.create_sampling_client(base_model=args.model_name)
    params = types.SamplingParams(
        max_tokens=args.max_tokens, temperature=0.0, stop=renderer.get_stop_sequences()
    )
    futures = []
    for x, y in problems:
        convo = [*ArithmeticEnv.standard_fewshot_prefix(), {"role": "user", "content": f"What is {x} + {y}?"}]
        futures.append(sampler.sample(renderer.build_generation_prompt(convo), 1, params))
    correct = 0
    for (x, y), future in zip(problems, futures):
        message, _ = renderer.parse_response(future.result().sequences[0].tokens)
        correct += _extract_final_int(renderers.get_text_content(message)) == x + y
    acc = correct / len(problems)
    se = math.sqrt(acc * (1 - acc) / len(problems))
    print(
        json.dumps(
            {
                "renderer": args.renderer,
                "model_path": args.model_path,
                "n": len(problems),
                "accuracy": acc,
                "se": round(se, 4),
            }
        )
    )


if __name__ == "__main__":
    main()
