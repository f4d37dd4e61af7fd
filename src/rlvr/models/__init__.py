"""Models: built-in offline models and loading of any Hugging Face causal LM."""

from rlvr.models.bundled import BUILTIN_MODELS, SMOLLM2, TINY_RANDOM, cache_dir
from rlvr.models.loading import load_model, load_tokenizer, resolve_model_path

__all__ = [
    "BUILTIN_MODELS",
    "SMOLLM2",
    "TINY_RANDOM",
    "cache_dir",
    "load_model",
    "load_tokenizer",
    "resolve_model_path",
]
