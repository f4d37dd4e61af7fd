"""Checkpoints written atomically, and everything needed to resume a run exactly.

A checkpoint is ``checkpoints/step-000010/`` with the HF model and tokenizer (loadable by
``from_pretrained`` and by ``rlvr eval --model``), ``trainer_state.pt`` (optimizer, scheduler,
every RNG) and ``state.json`` (step, data position). It is built in a temporary sibling directory
and renamed into place, so a crash never leaves a half-written checkpoint that resume would pick.
A model-only checkpoint has no ``trainer_state.pt``: resume skips it, ``rlvr eval --model RUN``
evaluates it when it is the newest. By default (``train.final_checkpoint=auto``) the end of a run
that reached ``train.steps`` saves the model only, and periodic checkpoints (``train.save_every``)
and a run stopped early (a time limit, SIGTERM) save everything resume needs.

``train.keep_checkpoints`` keeps the newest N checkpoints, and always the newest resumable one (the
one ``--resume`` continues from), so a model-only final checkpoint never leaves a run that had a
resumable checkpoint without one. Older ones are deleted only after the new one is completely
written, each first renamed out of the ``step-*`` names (one atomic rename), so an interrupted
deletion never leaves a half-deleted directory that looks like a checkpoint.

A checkpoint that cannot be written (too little free space, measured before writing against an
estimate of its size; or any error while writing: a full disk, an I/O error) raises
:class:`CheckpointError` (exit code 74, sysexits' EX_IOERR) naming the path and the space it
needs. The temporary directory is removed and the previous checkpoint is left as it was.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import random
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rlvr.errors import RlvrError
from rlvr.models.lora import has_adapters, save_lora

PREFIX = "step-"
OVERHEAD_BYTES = 16 * 2**20  # tokenizer files, configs, state.json: a few MB for the models here


class CheckpointError(RlvrError):
    """A checkpoint could not be written (disk full, I/O error); the previous one is intact."""

    exit_code = 74  # EX_IOERR (sysexits.h): an input/output error, not a mistake in the config


def tensor_bytes(obj: Any, seen: set[int] | None = None) -> int:
    """Bytes of every tensor in a nested structure of dicts, lists and tuples, each storage once
    (tied weights are written once)."""
    seen = set() if seen is None else seen
    if isinstance(obj, torch.Tensor):
        storage = obj.untyped_storage()
        key = storage.data_ptr()
        if key in seen or obj.device.type == "meta":
            return 0
        seen.add(key)
        return storage.nbytes()
    if isinstance(obj, dict):
        return sum(tensor_bytes(v, seen) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(tensor_bytes(v, seen) for v in obj)
    return 0


def estimate_checkpoint_bytes(model: torch.nn.Module, trainer_state: dict[str, Any] | None) -> int:
    """An upper estimate of a checkpoint's size: the model's tensors (twice with LoRA: the adapter
    and the merged model), the trainer state's tensors (AdamW: twice the trained parameters), and
    the small files, plus 5%."""
    weights = tensor_bytes(model.state_dict())
    if has_adapters(model):
        weights *= 2
    state = tensor_bytes(trainer_state) if trainer_state is not None else 0
    return int((weights + state) * 1.05) + OVERHEAD_BYTES


def gib(n: float) -> str:
    return f"{n / 2**30:.2f} GiB" if n >= 2**30 / 10 else f"{n / 2**20:.1f} MiB"


def _failure(final: Path, root: Path, needed: int, why: str) -> CheckpointError:
    previous = latest_checkpoint(root)
    kept = (
        f"the previous checkpoint {previous} is intact (--resume continues from it)"
        if previous is not None
        else "there is no earlier checkpoint to resume from"
    )
    return CheckpointError(
        f"cannot write checkpoint {final}: {why}; it needs about {gib(needed)}. Nothing of it was kept and "
        f"{kept}. Free space on that disk (or set output_dir elsewhere), keep fewer checkpoints "
        "(train.keep_checkpoints), or save the model alone at the end (train.final_checkpoint=model)"
    )


def check_free_space(root: Path, final: Path, needed: int) -> None:
    """Refuse to start a checkpoint that the disk holding ``root`` has no room for."""
    free = shutil.disk_usage(root).free
    if free < needed:
        raise _failure(final, root, needed, f"{root} has {gib(free)} free")


def write_trainer_state(trainer_state: dict[str, Any], path: Path) -> None:
    torch.save(trainer_state, path)


def rng_state(generators: dict[str, torch.Generator]) -> dict[str, Any]:
    return {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
        "generators": {name: g.get_state() for name, g in generators.items()},
    }


def restore_rng(state: dict[str, Any], generators: dict[str, torch.Generator]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    for name, g in generators.items():
        g.set_state(state["generators"][name])


def save_checkpoint(
    root: Path,
    step: int,
    model: torch.nn.Module,
    tokenizer,
    trainer_state: dict[str, Any] | None,
    state: dict[str, Any],
    keep: int | None,
    extra_models: dict[str, torch.nn.Module] | None = None,
) -> Path:
    """Write ``root/step-NNNNNN`` atomically; ``trainer_state=None`` writes the model and tokenizer
    only (not resumable). ``extra_models`` (``{subdirectory: model}``: a role game's own policies)
    are written as ``subdirectory/model`` with the tokenizer, in the same atomic step. Then keeps the
    ``keep`` newest checkpoints (None: all) and the newest resumable one (:func:`prune`)."""
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        why = err.strerror or str(err)
        raise CheckpointError(f"cannot create the checkpoint directory {root}: {why}") from err
    final = root / f"{PREFIX}{step:06d}"
    tmp = root / f".tmp-{PREFIX}{step:06d}"
    extra_models = extra_models or {}
    needed = estimate_checkpoint_bytes(model, trainer_state)
    needed += sum(tensor_bytes(m.state_dict()) for m in extra_models.values())
    check_free_space(root, final, needed)
    try:
        if tmp.exists():
            shutil.rmtree(tmp)
        if has_adapters(model):  # the adapter (to resume) and the merged model (to load anywhere)
            save_lora(model, tmp)
        else:
            model.save_pretrained(tmp / "model", safe_serialization=True)
        # a VLM's processor (image processor, tokenizer, chat template), else the tokenizer
        saver = getattr(tokenizer, "rlvr_processor", None) or tokenizer
        saver.save_pretrained(tmp / "model")
        for sub, extra in extra_models.items():
            extra.save_pretrained(tmp / sub / "model", safe_serialization=True)
            saver.save_pretrained(tmp / sub / "model")
        if trainer_state is not None:
            write_trainer_state(trainer_state, tmp / "trainer_state.pt")
        meta = {**state, "step": step, "resumable": trainer_state is not None}
        (tmp / "state.json").write_text(json.dumps(meta, indent=2))
        replaced = _retire(final) if final.exists() else None  # one of this step from an earlier try
        os.replace(tmp, final)
        if replaced is not None:
            shutil.rmtree(replaced, ignore_errors=True)
    except BaseException as err:  # a full disk, an I/O error, Ctrl-C: leave no half-written directory
        shutil.rmtree(tmp, ignore_errors=True)
        if not isinstance(err, Exception):
            raise
        # OSError from Python's writers; safetensors reports the OS error inside its own exception
        if isinstance(err, OSError) and err.errno:
            why = os.strerror(err.errno)
        else:
            why = f"{type(err).__name__}: {(str(err).strip().splitlines() or [''])[0]}"
        if getattr(err, "errno", None) in (errno.ENOSPC, errno.EDQUOT) or "os error 28" in str(err):
            with contextlib.suppress(OSError):
                why += f" ({gib(shutil.disk_usage(root).free)} free on {root})"
        raise _failure(final, root, needed, f"writing it failed: {why}") from err
    prune(root, keep)
    return final


def _retire(path: Path) -> Path:
    """Rename a checkpoint out of the ``step-*`` names (atomic), so that no reader takes it for a
    checkpoint while it is deleted; returns its new path."""
    retired = path.with_name(f".old-{path.name}-{os.getpid()}")
    if retired.exists():
        shutil.rmtree(retired, ignore_errors=True)
    os.replace(path, retired)
    return retired


def prune(root: Path, keep: int | None) -> list[Path]:
    """Delete all but the ``keep`` newest checkpoints (None: keep all), never the newest resumable
    one; returns the deleted paths. Leftovers of an interrupted deletion go too."""
    for leftover in root.glob(".old-*"):
        shutil.rmtree(leftover, ignore_errors=True)
    found = list_checkpoints(root)
    if keep is None or len(found) <= keep:
        return []
    resumable = [p for p in found if is_resumable(p)]
    kept = {*found[-keep:], *resumable[-1:]}
    deleted = [p for p in found if p not in kept]
    for old in deleted:
        with contextlib.suppress(OSError):
            shutil.rmtree(_retire(old), ignore_errors=True)
    return deleted


def is_resumable(path: Path) -> bool:
    """Whether a checkpoint holds what resume needs (the optimizer, scheduler and RNG state)."""
    return (path / "trainer_state.pt").exists()


def describe(model_dir: str | Path) -> str | None:
    """``"model-only, step 70"`` / ``"full, step 60"`` for a checkpoint's ``model`` directory; None
    for any other model."""
    ckpt = Path(model_dir).parent
    if not ckpt.name.startswith(PREFIX) or not (ckpt / "state.json").is_file():
        return None
    try:
        step = int(ckpt.name[len(PREFIX) :])
    except ValueError:
        return None
    return f"{'full' if is_resumable(ckpt) else 'model-only'}, step {step}"


def list_checkpoints(root: Path) -> list[Path]:
    if not root.is_dir():
        return []
    found = [
        p for p in root.iterdir() if p.is_dir() and p.name.startswith(PREFIX) and (p / "state.json").exists()
    ]
    return sorted(found, key=lambda p: int(p.name[len(PREFIX) :]))


def latest_checkpoint(root: Path) -> Path | None:
    """The newest checkpoint a run can resume from (model-only checkpoints are skipped)."""
    found = [p for p in list_checkpoints(root) if is_resumable(p)]
    return found[-1] if found else None


def newest_checkpoint(root: Path) -> Path | None:
    """The newest checkpoint of any kind (what ``rlvr eval --model RUN`` evaluates)."""
    found = list_checkpoints(root)
    return found[-1] if found else None


def resume_point(root: Path) -> Path | None:
    """The checkpoint ``--resume`` continues from: the newest resumable one; None when there is no
    checkpoint at all (the run starts over); an error when only model-only checkpoints exist."""
    start = latest_checkpoint(root)
    model_only = list_checkpoints(root)
    if start is None and model_only:
        raise RlvrError(
            f"--resume: {root.parent} has no resumable checkpoint: {model_only[-1].name} holds the model "
            "only (train.final_checkpoint=auto, the default, saves the model alone at the end of a run "
            "that reached train.steps; =model always). To train further, start a new run from it: "
            f"model.name={model_only[-1] / 'model'} name=NEW_NAME. To be able to extend a finished run "
            "with --resume, train it with train.final_checkpoint=full (or periodic train.save_every)"
        )
    return start


def load_state(path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """(state.json, trainer_state.pt) of a checkpoint directory."""
    state = json.loads((path / "state.json").read_text())
    trainer_state = torch.load(path / "trainer_state.pt", weights_only=False)
    return state, trainer_state
