"""The run directory: created up front, checked writable, config saved before any work.

A new run that fails before its first training step (a bad reward spec or data found at start-up,
a model that does not load, Ctrl-C during the first evaluation) leaves nothing behind: the run
directory is removed if this run created it (and the parents it created, when empty), or else the
files it added (:func:`removed_unless_trained`) — except a log the error names (a vLLM server that
failed to start: its message quotes the log's end and gives its path). Re-running the same command
then starts clean; nothing half-made looks like a run to ``rlvr eval`` or ``--resume``. A resumed
run's directory is never removed.

A finished (or any) run is run again from scratch under the same name with ``--overwrite``
(``api.train(..., overwrite=True)``): :func:`replace_run_dir` deletes the old run directory first,
but only one that is a run directory (``config.yaml`` and ``metrics.jsonl``, nothing but what rlvr
writes there) and not a symbolic link; it is renamed aside in one step, then deleted without
following any link inside it.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from fnmatch import fnmatch
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
            f"run directory {run} already holds a run; pass --resume to continue it, --overwrite to "
            "delete it and train again from scratch (api.train(..., overwrite=True)), or choose another "
            "name (name=...)"
        )
    if resume and not (run / "config.yaml").exists():
        raise RlvrError(f"--resume: {run} holds no run to resume (no config.yaml)")
    (run / "config.yaml").write_text(dump_config(cfg))
    return run


# what rlvr writes in a run directory (rlvr.train.loop.orchestrator.LOGS and the rest): --overwrite
# deletes a directory holding these only, never one where a user keeps files of their own
RUN_FILES = frozenset(
    {
        "config.yaml",
        "metrics.jsonl",
        "samples.jsonl",
        "eval_samples.jsonl",
        "trajectories.jsonl",
        "prompt_history.jsonl",
        "checkpoints",
        "tensorboard",
        "wandb",
        "report.html",
        "pairs.jsonl",  # stage=rm's sampled preference pairs
        "eval_pairs.jsonl",
    }
)
RUN_PATTERNS = ("vllm_server*.log", ".vllm-ready-*")


def _written_by_rlvr(name: str) -> bool:
    return name in RUN_FILES or any(fnmatch(name, pattern) for pattern in RUN_PATTERNS)


def _is_stage_run(path: Path) -> bool:
    """A pipeline stage's directory: a run directory (not a link) holding only what rlvr writes."""
    if path.is_symlink() or not path.is_dir():
        return False
    return all(_written_by_rlvr(p.name) for p in path.iterdir())


def replace_run_dir(run: Path) -> bool:
    """Delete the run directory ``run`` so a new run can take its name (``--overwrite``); False when
    there is none. Refuses (:class:`RlvrError`) a symbolic link, and a directory that is not an rlvr
    run directory or holds files rlvr does not write."""
    if run.is_symlink():
        raise RlvrError(
            f"--overwrite: {run} is a symbolic link; rlvr does not delete what it points to. Remove the "
            "link, or choose another name (name=...)"
        )
    if not run.exists():
        return False
    if not run.is_dir():
        raise RlvrError(f"--overwrite: {run} is a file, not a run directory; not deleting it")
    names = sorted(p.name for p in run.iterdir())
    if "pipeline.json" in names and "config.yaml" in names:  # a pipeline: its stages are run directories
        stages = [n for n in names if n not in ("config.yaml", "pipeline.json", "report.html")]
        foreign = [n for n in stages if not _is_stage_run(run / n)]
        if foreign:
            raise RlvrError(
                f"--overwrite: {run} holds files rlvr did not write ({', '.join(foreign[:5])}); not deleting "
                "them. Move them out of it, or choose another name (name=...)"
            )
        names = []
    elif "config.yaml" not in names or "metrics.jsonl" not in names:
        raise RlvrError(
            f"--overwrite: {run} is not an rlvr run directory (no config.yaml and metrics.jsonl); not "
            "deleting it. Choose another name (name=...) or output_dir"
        )
    foreign = [name for name in names if not _written_by_rlvr(name)]
    if foreign:
        shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
        raise RlvrError(
            f"--overwrite: {run} holds files rlvr did not write ({shown}); not deleting them. Move them "
            "out of it, or choose another name (name=...)"
        )
    aside = run.with_name(f".{run.name}.overwritten-{os.getpid()}")
    try:
        os.replace(run, aside)  # one step: no half-deleted directory is left under the run's name
    except OSError as err:
        raise RlvrError(f"--overwrite: cannot remove {run}: {err.strerror or err}") from err
    try:
        shutil.rmtree(aside)  # unlinks any symbolic link inside, never follows one
    except OSError as err:
        raise RlvrError(
            f"--overwrite: {run} was moved to {aside} but could not be deleted completely "
            f"({err.strerror or err}); delete it by hand"
        ) from err
    return True


def _missing_dirs(path: Path) -> list[Path]:
    """``path`` and those of its parents that do not exist yet, deepest first."""
    missing = []
    while not path.exists() and path != path.parent:
        missing.append(path)
        path = path.parent
    return missing


def _logs_named_by(err: BaseException, run: Path) -> set[str]:
    """Names of the log files directly in ``run`` that ``err`` (or an exception it came from) names,
    such as the vLLM server's log that a failed start quotes: they are kept, with the directory, so
    the path in the message still leads somewhere."""
    texts, seen, current = [], set(), err
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        texts.append(str(current))
        current = current.__cause__ or current.__context__
    text = "\n".join(texts)
    if not run.is_dir():
        return set()
    return {
        entry.name
        for entry in run.iterdir()
        if entry.suffix == ".log" and entry.is_file() and (str(entry) in text or str(entry.resolve()) in text)
    }


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
    except BaseException as err:
        if not trained():
            kept = _logs_named_by(err, run)  # a failed vLLM server's log: the message points at it
            if created and not kept:
                shutil.rmtree(run, ignore_errors=True)
                for parent in created[1:]:  # the parents this run created, if nothing else is there
                    try:
                        parent.rmdir()
                    except OSError:
                        break
            elif run.is_dir():
                for entry in run.iterdir():
                    if entry.name not in before | kept:
                        shutil.rmtree(entry) if entry.is_dir() else entry.unlink(missing_ok=True)
        raise
