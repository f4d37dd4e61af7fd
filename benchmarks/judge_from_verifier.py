"""GRPO rewarded by a verifier trained in a role game, served as the ``judge`` (docs/roles.md).

Serves the verifier's checkpoint (``checkpoints/step-N/roles/verifier/model`` of a
``solver_verifier`` run with ``roles.settings.verifier.policy=own``) with
``rlvr.rewards.judge_server`` on one core, then trains GRPO on the other with that judge as its only
trained reward, asked with the verifier's own instruction and demonstration from
``recipes/solver_verifier.yaml``; the verifier (``reasoning_gym``) rides along at weight 0 to give
the held-out accuracy. The runs land in ``--out`` like ``benchmarks/algorithms.py``'s::

    V=runs/roles2/sv-own/runs/solver_verifier-own-s0/checkpoints/step-000015/roles/verifier/model
    .venv/bin/python benchmarks/judge_from_verifier.py --verifier $V --seeds 0,1 --budget-s 600 \\
        --out runs/roles2/grpo-judge
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--verifier", required=True, help="the verifier's model directory")
    parser.add_argument("--seeds", default="0")
    parser.add_argument("--budget-s", type=float, default=600)
    parser.add_argument("--eval-size", type=int, default=100)
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--out", default="runs/roles2/grpo-judge")
    args = parser.parse_args()
    settings = yaml.safe_load((ROOT / "recipes" / "solver_verifier.yaml").read_text())["roles"]["settings"]
    verifier = settings["verifier"]
    url = f"http://127.0.0.1:{args.port}/v1"
    judge = {
        "name": "judge",
        "params": {
            "url": url,
            "max_score": 1,
            "max_tokens": verifier["max_new_tokens"],
            "max_concurrency": 1,  # the server answers one request at a time
            "timeout_s": 100,
            "retries": 0,
            "rubric": verifier["prompt"],
            "few_shot": verifier["few_shot"],
        },
    }
    functions = [{"name": "reasoning_gym", "weight": 0.0, "params": {"extract": "auto"}}, judge]
    python = sys.executable
    server_cmd = [python, "-m", "rlvr.rewards.judge_server", "--model", args.verifier]
    server_cmd += ["--port", str(args.port), "--threads", "1"]
    Path(args.out).mkdir(parents=True, exist_ok=True)
    log = open(Path(args.out) / "judge_server.log", "w")  # noqa: SIM115 - open for the server's lifetime
    server = subprocess.Popen(["taskset", "-c", "1", *server_cmd], stdout=log, stderr=subprocess.STDOUT)
    try:
        for _ in range(300):
            try:
                urllib.request.urlopen(f"{url}/models", timeout=2)
                break
            except OSError:
                time.sleep(1)
        else:
            raise SystemExit(f"the judge server did not start; see {args.out}/judge_server.log")
        sets = [
            "model.threads=1",
            "eval.before=true",
            "train.time_budget_s=null",
            "rewards.timeout_s=120",
            "rewards.functions=" + json.dumps(functions),
        ]
        cmd = ["taskset", "-c", "0", python, str(ROOT / "benchmarks" / "algorithms.py"), "--recipes", "grpo"]
        cmd += ["--tag", "judge", "--budget-s", str(args.budget_s), "--eval-size", str(args.eval_size)]
        cmd += ["--eval-samples", "0", "--seeds", args.seeds, "--out", args.out]
        for item in sets:
            cmd += ["--set", item]
        subprocess.run(cmd, check=True)
    finally:
        server.terminate()
        server.wait()
        log.close()


if __name__ == "__main__":
    main()
