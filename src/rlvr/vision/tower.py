"""Which sides of a VLM policy train: its vision tower (``model.vision_tower``) and its language
side (``model.text_side``), each trained or frozen. The connector between them always trains."""

from __future__ import annotations

import torch

from rlvr.errors import RlvrError

# where transformers' VLMs keep their image encoders (Idefics3 / SmolVLM, LLaVA, Qwen2-VL) and their
# language models
_TOWER_NAMES = ("vision_model", "vision_tower", "visual")
_TEXT_NAMES = ("text_model", "language_model")


def _find(model: torch.nn.Module, names: tuple[str, ...]) -> torch.nn.Module | None:
    inner = getattr(model, "model", None)
    for owner in (model, inner, getattr(inner, "model", None)):
        for name in names:
            found = getattr(owner, name, None) if owner is not None else None
            if isinstance(found, torch.nn.Module):
                return found
    return None


def vision_tower(model: torch.nn.Module) -> torch.nn.Module | None:
    """The image encoder of ``model`` (PEFT-wrapped or not); None for a text-only model."""
    return _find(model, _TOWER_NAMES)


def apply_vision_tower(model: torch.nn.Module, tower: str, text_side: str = "trained") -> None:
    """``tower`` (``model.vision_tower``) ``frozen``: the image encoder takes no gradient.
    ``text_side`` ``frozen``: the language model and its LM head take none, so only the connector
    (and a trained tower) learn, as in LLaVA's first stage: the policy's answers can then change only
    through what the images feed it. ``trained``: as loaded. Either frozen on a text-only model is
    refused."""
    encoder = vision_tower(model)
    if tower == "frozen":
        if encoder is None:
            raise RlvrError("model.vision_tower=frozen, but the model is text-only (it has no vision tower)")
        encoder.requires_grad_(False)
    if text_side == "frozen":
        text = _find(model, _TEXT_NAMES)
        if text is None or encoder is None:
            raise RlvrError("model.text_side=frozen, but the model is text-only (it has no vision side)")
        text.requires_grad_(False)
        head = getattr(model, "lm_head", None)
        if isinstance(head, torch.nn.Module):
            head.requires_grad_(False)
