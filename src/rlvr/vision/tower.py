"""The vision tower of a VLM policy, trained or frozen (``model.vision_tower``)."""

from __future__ import annotations

import torch

from rlvr.errors import RlvrError

# where transformers' VLMs keep their image encoders (Idefics3 / SmolVLM, LLaVA, Qwen2-VL)
_TOWER_NAMES = ("vision_model", "vision_tower", "visual")


def vision_tower(model: torch.nn.Module) -> torch.nn.Module | None:
    """The image encoder of ``model`` (PEFT-wrapped or not); None for a text-only model."""
    for owner in (
        model,
        getattr(model, "model", None),
        getattr(getattr(model, "model", None), "model", None),
    ):
        for name in _TOWER_NAMES:
            tower = getattr(owner, name, None) if owner is not None else None
            if isinstance(tower, torch.nn.Module):
                return tower
    return None


def apply_vision_tower(model: torch.nn.Module, mode: str) -> None:
    """``frozen``: the image encoder takes no gradient (the connector and language side still train);
    ``trained``: as loaded. A frozen tower on a text-only model is refused."""
    tower = vision_tower(model)
    if mode == "frozen":
        if tower is None:
            raise RlvrError("model.vision_tower=frozen, but the model is text-only (it has no vision tower)")
        tower.requires_grad_(False)
