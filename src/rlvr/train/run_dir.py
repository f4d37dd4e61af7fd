"""The run directory: created up front, checked writable, config saved before any work.

A new run that fails before its first training step (a bad reward spec or data found at start-up,
a model that does not load, Ctrl-C during the first evaluation) leaves nothing behind: the run
directory is removed if this run created it (and the parents it created, when empty), or else the
files it added (:func:`removed_unless_trained`). Re-running the same command then starts clean;
nothing half-made looks like a run to ``rlvr eval`` or ``--resume``. A resumed run's directory is
never removed.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
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


def _missing_dirs(path: Path) -> list[Path]:
    """``path`` and those of its parents that do not exist yet, deepest first."""
    missing = []
    while not path.exists() and path != path.parent:
        missing.append(path)
        path = path.parent
    return missing


@contextmanager
def removed_unless_trained(cfg: RunConfig, resume: bool, trained: Callable[[], bool]) -> Iterator[None]:
    """Remove what a new run made of its directory if the block fails while ``trained()`` is False
    (no training step completed); the exception goes on."""
    run = Path(cfg.output_dir) / cfg.name
    if resume:
        yield
        return
    created = _missing_dirs(run)
    before = set() if created else {p.name for p in run.iterdir()} if run.is_dir() else set()
    try:
        yield
    except BaseException:
        if not trained():
            if created:
                shutil.rmtree(run, ignore_errors=True)
                for parent in created[1:]:  # the parents this run created, if nothing else is there
                    try:
                        parent.rmdir()
                    except OSError:
                        break
            elif run.is_dir():
                for entry in run.iterdir():
                    if entry.name not in before:
                        shutil.rmtree(entry) if entry.is_dir() else entry.unlink(missing_ok=True)
        raise
