"""Load a causal LM and its tokenizer from a built-in name, a local directory or a hub id (offline)."""

from __future__ import annotations

import os
from pathlib import Path

import torch

from rlvr.errors import RlvrError
from rlvr.models.bundled import BUILTIN_MODELS

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def resolve_model_path(name_or_path: str) -> str:
    """Map a built-in name to its cached directory; leave local paths and hub ids unchanged."""
    if name_or_path in BUILTIN_MODELS:
        return str(BUILTIN_MODELS[name_or_path]())
    path = Path(name_or_path).expanduser()
    if path.exists():
        if not (path / "config.json").is_file():
            raise RlvrError(
                f"model directory {path} has no config.json: is it a Hugging Face model directory?"
            )
        return str(path)
    return name_or_path


def torch_dtype(name: str) -> torch.dtype:
    if name not in _DTYPES:
        raise RlvrError(f"unknown dtype '{name}'; allowed: {', '.join(_DTYPES)}")
    return _DTYPES[name]


def load_tokenizer(name_or_path: str):
    """The tokenizer with a pad token set (causal LMs often lack one; we pad with EOS)."""
    from transformers import AutoTokenizer

    path = resolve_model_path(name_or_path)
    try:
        tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=_offline(path))
    except OSError as err:
        raise _not_available(name_or_path, err) from err
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_model(name_or_path: str, dtype: str = "float32", device: str = "cpu") -> torch.nn.Module:
    """A ``transformers`` causal LM in ``dtype`` on ``device``, in train mode with no dropout."""
    from transformers import AutoModelForCausalLM

    return _from_pretrained(AutoModelForCausalLM, name_or_path, dtype, device)


def load_backbone(name_or_path: str, dtype: str = "float32", device: str = "cpu") -> torch.nn.Module:
    """The transformer body of a causal LM (no LM head): ``AutoModel`` of the same checkpoint."""
    from transformers import AutoModel

    return _from_pretrained(AutoModel, name_or_path, dtype, device)


def _from_pretrained(auto_class, name_or_path: str, dtype: str, device: str) -> torch.nn.Module:
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # a weight-loading bar per load drowns rlvr's own progress
    path = resolve_model_path(name_or_path)
    try:
        model = auto_class.from_pretrained(path, dtype=torch_dtype(dtype), local_files_only=_offline(path))
    except OSError as err:
        raise _not_available(name_or_path, err) from err
    model.config.use_cache = False
    model = model.to(device)
    if torch.device(device).type == "cpu":
        from rlvr.runtime import keep_freed_memory

        keep_freed_memory()  # no page faults on every step's large tensors (rlvr/runtime.py)
        if model.config._attn_implementation == "sdpa":
            from rlvr.models.attention import register

            model.set_attn_implementation(register())  # GQA without K/V copies (models/attention.py)
    return model


def _offline(path: str) -> bool:
    return Path(path).exists() or os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "", "false")


def _not_available(name: str, err: Exception) -> RlvrError:
    builtins = ", ".join(BUILTIN_MODELS)
    return RlvrError(
        f"model '{name}' is not available offline ({type(err).__name__}). Use a built-in name ({builtins}), "
        "a local directory with config.json and weights, or download it first on a machine with network "
        f"(huggingface-cli download {name}) so that it is in the Hugging Face cache."
    )
