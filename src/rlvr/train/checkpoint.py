"""Checkpoints written atomically, and everything needed to resume a run exactly.

A checkpoint is ``checkpoints/step-000010/`` with the HF model and tokenizer (loadable by
``from_pretrained`` and by ``rlvr eval --model``), ``trainer_state.pt`` (optimizer, scheduler,
every RNG) and ``state.json`` (step, data position). It is built in a temporary sibling directory
and renamed into place, so a crash never leaves a half-written checkpoint that resume would pick.
A model-only checkpoint (``train.final_checkpoint=model``) has no ``trainer_state.pt``; resume
skips it.
"""

from __future__ import annotations

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
    keep: int,
) -> Path:
    """Write ``root/step-NNNNNN`` atomically; ``trainer_state=None`` writes the model and tokenizer
    only (not resumable). Keeps the ``keep`` newest checkpoints."""
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"{PREFIX}{step:06d}"
    tmp = root / f".tmp-{PREFIX}{step:06d}"
    if tmp.exists():
        shutil.rmtree(tmp)
    if has_adapters(model):  # the adapter (to resume) and the merged model (to load anywhere)
        save_lora(model, tmp)
    else:
        model.save_pretrained(tmp / "model", safe_serialization=True)
    tokenizer.save_pretrained(tmp / "model")
    if trainer_state is not None:
        torch.save(trainer_state, tmp / "trainer_state.pt")
    meta = {**state, "step": step, "resumable": trainer_state is not None}
    (tmp / "state.json").write_text(json.dumps(meta, indent=2))
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    for old in list_checkpoints(root)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def list_checkpoints(root: Path) -> list[Path]:
    if not root.is_dir():
        return []
    found = [
        p for p in root.iterdir() if p.is_dir() and p.name.startswith(PREFIX) and (p / "state.json").exists()
    ]
    return sorted(found, key=lambda p: int(p.name[len(PREFIX) :]))


def latest_checkpoint(root: Path) -> Path | None:
    """The newest checkpoint a run can resume from (model-only checkpoints are skipped)."""
    found = [p for p in list_checkpoints(root) if (p / "trainer_state.pt").exists()]
    return found[-1] if found else None


def resume_point(root: Path) -> Path | None:
    """The checkpoint ``--resume`` continues from: the newest resumable one; None when there is no
    checkpoint at all (the run starts over); an error when only model-only checkpoints exist."""
    start = latest_checkpoint(root)
    model_only = list_checkpoints(root)
    if start is None and model_only:
        raise RlvrError(
            f"--resume: {root.parent} has no resumable checkpoint: {model_only[-1].name} holds the model "
            f"only (train.final_checkpoint=model); start a new run from it with "
            f"model.name={model_only[-1] / 'model'}"
        )
    return start


def load_state(path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """(state.json, trainer_state.pt) of a checkpoint directory."""
    state = json.loads((path / "state.json").read_text())
    trainer_state = torch.load(path / "trainer_state.pt", weights_only=False)
    return state, trainer_state
