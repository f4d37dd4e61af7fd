"""Checkpoints of ``rlvr serve`` on disk, addressed by Tinker paths.

``tinker://<run>/weights/<name>`` (``save_state``: the trained parameters, the optimizer state
and what the model was built from) and ``tinker://<run>/sampler_weights/<name>``
(``save_weights_for_sampler``: a plain transformers model directory, adapters merged, with its
tokenizer, which ``rlvr eval --model DIR`` and ``from_pretrained`` load as they are). ``<run>`` is
the training client's model id made into a directory name. Paths come from clients, so every part
is checked to be a plain name and resolved under the server's checkpoint root only.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from rlvr.serve.wire import WireError

KINDS = ("weights", "sampler_weights")
_PLAIN = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}$")


def run_name(model_id: str) -> str:
    return model_id.replace(":", "_")


def plain(name: Any, what: str) -> str:
    if not isinstance(name, str) or not _PLAIN.match(name) or ".." in name:
        raise WireError(
            f"{what} must be a plain name (letters, digits, '.', '_', '-'; up to 128), got {name!r}"
        )
    return name


def tinker_path(run: str, kind: str, name: str) -> str:
    return f"tinker://{run}/{kind}/{name}"


def resolve(root: Path, path: Any, kind: str | None = None) -> tuple[str, Path]:
    """(kind, directory) of a ``tinker://run/kind/name`` path under ``root``; it must exist."""
    if not isinstance(path, str) or not path.startswith("tinker://"):
        raise WireError(f"checkpoint path must look like tinker://<run>/<kind>/<name>, got {path!r}")
    parts = path[len("tinker://") :].split("/")
    if len(parts) != 3 or parts[1] not in KINDS:
        raise WireError(
            f"checkpoint path must look like tinker://<run>/{'|'.join(KINDS)}/<name>, got {path!r}"
        )
    run, found, name = plain(parts[0], "the path's run"), parts[1], plain(parts[2], "the path's name")
    if kind is not None and found != kind:
        raise WireError(f"{path}: expected a {kind}/ checkpoint")
    directory = root / run / found / name
    if not (directory / "meta.json").is_file():
        raise WireError(f"no checkpoint at {path} on this server")
    return found, directory


def fresh_dir(root: Path, run: str, kind: str, name: str, overwrite: bool) -> Path:
    directory = root / run / kind / plain(name, "the checkpoint name")
    if directory.exists():
        if not overwrite:
            raise WireError(f"{tinker_path(run, kind, name)} exists (pass overwrite=True to replace it)")
        shutil.rmtree(directory)
    return directory


def _write_meta(directory: Path, meta: dict[str, Any]) -> None:
    (directory / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")


def read_meta(directory: Path) -> dict[str, Any]:
    meta = json.loads((directory / "meta.json").read_text())
    if not isinstance(meta, dict):
        raise WireError(f"{directory}: a damaged checkpoint (meta.json)")
    return meta


def save_state(
    directory: Path, policy: torch.nn.Module, optimizer: torch.optim.Optimizer | None, meta: dict[str, Any]
) -> None:
    """The trainable parameters (safetensors) and the optimizer state; written to a temporary
    directory first, so an interrupted save leaves nothing half-written under the name."""
    tmp = directory.with_name(directory.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    trained = {n: p.detach().contiguous().clone() for n, p in policy.named_parameters() if p.requires_grad}
    save_file(trained, str(tmp / "trained.safetensors"))
    if optimizer is not None:
        torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
    _write_meta(tmp, meta)
    tmp.rename(directory)


def load_state(directory: Path, policy: torch.nn.Module, optimizer: torch.optim.Optimizer | None) -> None:
    trained = load_file(str(directory / "trained.safetensors"))
    params = {n: p for n, p in policy.named_parameters() if p.requires_grad}
    if set(trained) != set(params):
        raise WireError(f"{directory.name}: its trained parameters do not match this model's")
    with torch.no_grad():
        for name, p in params.items():
            p.copy_(trained[name])
    if optimizer is not None:
        state = directory / "optimizer.pt"
        if not state.is_file():
            raise WireError(f"{directory.name}: saved without optimizer state")
        optimizer.load_state_dict(torch.load(state, weights_only=True))


def save_sampler(directory: Path, model: torch.nn.Module, tokenizer: Any, meta: dict[str, Any]) -> None:
    tmp = directory.with_name(directory.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    model.save_pretrained(tmp, safe_serialization=True)
    tokenizer.save_pretrained(tmp)
    _write_meta(tmp, meta)
    tmp.rename(directory)


def load_sampler_weights(directory: Path, names: list[str]) -> dict[str, torch.Tensor]:
    """A saved sampler model's parameters by name (tied weights saved once are shared)."""
    weights: dict[str, torch.Tensor] = {}
    for file in sorted(directory.glob("*.safetensors")):
        weights.update(load_file(str(file)))
    if "lm_head.weight" not in weights and "model.embed_tokens.weight" in weights:
        weights["lm_head.weight"] = weights["model.embed_tokens.weight"]
    missing = [n for n in names if n not in weights]
    if missing:
        raise WireError(f"{directory.name}: sampler weights lack {missing[:3]}")
    return {n: weights[n] for n in names}
