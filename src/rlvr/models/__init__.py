"""Models: built-in offline models and loading of any Hugging Face causal LM."""

from rlvr.models.bundled import BUILTIN_MODELS, SMOLLM2, TINY_RANDOM, cache_dir
from rlvr.models.loading import load_backbone, load_model, load_tokenizer, resolve_model_path
from rlvr.models.value import ValueHead, ValueModel, load_value_model

__all__ = [
    "BUILTIN_MODELS",
    "SMOLLM2",
    "TINY_RANDOM",
    "ValueHead",
    "ValueModel",
    "cache_dir",
    "load_backbone",
    "load_model",
    "load_tokenizer",
    "load_value_model",
    "resolve_model_path",
]
