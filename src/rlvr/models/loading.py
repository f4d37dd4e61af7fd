"""Load a causal LM and its tokenizer from a built-in name, a local directory or a hub id
(downloaded as transformers does, unless downloads are off: :mod:`rlvr.hub`)."""

from __future__ import annotations

from pathlib import Path

import torch

from rlvr.errors import RlvrError
from rlvr.library_warnings import silence_library_deprecations
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


def is_vision_checkpoint(path: str) -> bool:
    """Whether the local model directory ``path`` holds a vision-language model (its config has a
    ``vision_config``); a Hub id is asked through transformers' config loader."""
    from transformers import AutoConfig

    try:
        config = AutoConfig.from_pretrained(path, local_files_only=_offline(path))
    except (OSError, ValueError):
        return False
    return getattr(config, "vision_config", None) is not None


def load_tokenizer(name_or_path: str):
    """The tokenizer with a pad token set (causal LMs often lack one; we pad with EOS). A
    vision-language model's tokenizer comes from its processor, which it carries as
    ``rlvr_processor`` (prompts with images are encoded by it; checkpoints save it)."""
    from transformers import AutoProcessor, AutoTokenizer

    path = resolve_model_path(name_or_path)
    try:
        if is_vision_checkpoint(path):
            processor = AutoProcessor.from_pretrained(path, local_files_only=_offline(path))
            tokenizer = processor.tokenizer
            tokenizer.rlvr_processor = processor
        else:
            tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=_offline(path))
    except OSError as err:
        raise _not_available(name_or_path, err) from err
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_model(name_or_path: str, dtype: str = "float32", device: str = "cpu") -> torch.nn.Module:
    """A ``transformers`` causal LM in ``dtype`` on ``device``, in train mode with no dropout; a
    vision-language model (its config has a ``vision_config``) as its image-text-to-text class."""
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText

    if is_vision_checkpoint(resolve_model_path(name_or_path)):
        return _from_pretrained(AutoModelForImageTextToText, name_or_path, dtype, device)
    return _from_pretrained(AutoModelForCausalLM, name_or_path, dtype, device)


def load_backbone(name_or_path: str, dtype: str = "float32", device: str = "cpu") -> torch.nn.Module:
    """The transformer body of a causal LM (no LM head): ``AutoModel`` of the same checkpoint."""
    from transformers import AutoModel

    return _from_pretrained(AutoModel, name_or_path, dtype, device)


def _from_pretrained(auto_class, name_or_path: str, dtype: str, device: str) -> torch.nn.Module:
    silence_library_deprecations()  # again here: a caller's warnings.catch_warnings() drops filters
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # a weight-loading bar per load drowns rlvr's own progress
    check_device(device)
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
    """A local directory never asks the Hub; a Hub id downloads unless downloads are off (rlvr.hub)."""
    from rlvr.hub import hub_offline

    return Path(path).exists() or hub_offline()


def _not_available(name: str, err: Exception) -> RlvrError:
    from rlvr.hub import downloads_hint, hub_offline

    builtins = ", ".join(BUILTIN_MODELS)
    detail = (str(err).strip().splitlines() or [type(err).__name__])[0][:300].rstrip(". ")
    where = (
        "is not available offline: it is not in the local Hugging Face cache"
        if hub_offline()
        else "could not be loaded from the Hugging Face Hub"
    )
    return RlvrError(
        f"model '{name}' {where} ({type(err).__name__}: {detail}). {downloads_hint(name)}. Other choices: "
        f"a built-in name ({builtins}) or a local directory with config.json and weights."
    )


def check_device(device: str, key: str = "model.device") -> None:
    """Refuse a device this torch cannot use (``cuda`` on a CPU-only build, a GPU index that is not
    there) with one message naming ``key``, before any weights are loaded."""
    try:
        parsed = torch.device(device)
    except (RuntimeError, TypeError) as err:
        raise RlvrError(f"{key}={device!r} is not a torch device ({err}); e.g. cpu, cuda, cuda:1") from None
    if parsed.type != "cuda":
        return
    if not torch.backends.cuda.is_built():
        raise RlvrError(
            f"{key}={device!r}, but this torch ({torch.__version__}) is a CPU-only build without CUDA: "
            f"install a CUDA build of torch (README, 'GPU install'), or set {key}=cpu"
        )
    count = torch.cuda.device_count()
    if count == 0:
        raise RlvrError(
            f"{key}={device!r}, but torch {torch.__version__} (CUDA {torch.version.cuda}) sees no GPU here "
            f"(check nvidia-smi and CUDA_VISIBLE_DEVICES), or set {key}=cpu"
        )
    if parsed.index is not None and parsed.index >= count:
        raise RlvrError(f"{key}={device!r}, but torch sees {count} GPU(s) here (cuda:0 to cuda:{count - 1})")
