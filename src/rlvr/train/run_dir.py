"""The run directory: created up front, checked writable, config saved before any work."""

from __future__ import annotations

import os
from pathlib import Path

from rlvr.config import RunConfig, dump_config
from rlvr.errors import RlvrError


def prepare_run_dir(cfg: RunConfig, resume: bool) -> Path:
    """``output_dir/name``; a fresh run refuses to overwrite an existing run's metrics."""
    run = Path(cfg.output_dir) / cfg.name
    try:
        run.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise RlvrError(f"cannot create run directory {run}: {err.strerror or err}") from err
    if not os.access(run, os.W_OK):
        raise RlvrError(f"run directory {run} is not writable")
    if not resume and (run / "metrics.jsonl").exists():
        raise RlvrError(
            f"run directory {run} already holds a run; pass --resume to continue it, "
            "or choose another name (name=...)"
        )
    if resume and not (run / "config.yaml").exists():
        raise RlvrError(f"--resume: {run} holds no run to resume (no config.yaml)")
    (run / "config.yaml").write_text(dump_config(cfg))
    return run
