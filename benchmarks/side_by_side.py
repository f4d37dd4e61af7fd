"""One arm of a side-by-side comparison: an ``rlvr train`` run pinned to one core (``taskset``), its
log beside its run directory. Shared by benchmarks/stages_vs_grpo.py and benchmarks/data_vs_plain.py."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def start_arm(
    arm: str, args_: list[str], common: list[str], seed: int, out: Path, core: int
) -> tuple[subprocess.Popen, Path]:
    """Start ``rlvr train ARGS... COMMON...`` as run ``{arm}-s{seed}`` under ``out`` on ``core``."""
    name = f"{arm}-s{seed}"
    log = out / f"{name}.log"
    cmd = [
        "taskset", "-c", str(core), sys.executable, "-m", "rlvr.cli", "train", args_[0], *args_[1:],
        *common, f"seed={seed}", "data.seed=0", f"output_dir={out}", f"name={name}", "--quiet",
    ]  # fmt: skip
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT / "src")}
    return subprocess.Popen(cmd, stdout=log.open("w"), stderr=subprocess.STDOUT, env=env), out / name
