"""Position ids of prompts with images for VLMs whose rotary positions are multimodal (M-RoPE).

Qwen2-VL and its successors give an image's tokens 3-D positions (time, height, width) and the text
after it positions shifted by how much shorter the image was in that space than in tokens. rlvr's
engine and learner lay prompts out left-padded with explicit 1-D positions (``mask.cumsum - 1``);
for such a model :func:`vision_positions` replaces the prompt's with the model's own 3-D positions.
Every later token is text, whose three components are equal, so continuing from the last prompt
position's first component (:func:`text_positions`) gives what the model computes itself.
Models with 1-D positions (Idefics3 / SmolVLM, LLaVA) are returned their positions unchanged.
"""

from __future__ import annotations

from typing import Any

import torch

from rlvr.vision.prompt import image_token_id


def uses_mrope(model: torch.nn.Module) -> bool:
    inner = getattr(model, "model", None)
    return hasattr(inner, "get_rope_index") and image_token_id(model) is not None


def vision_positions(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    mask: torch.Tensor,
    positions: torch.Tensor,
    vision: dict[str, Any],
) -> torch.Tensor:
    """The position ids to pass with ``input_ids`` [B, L] (``positions`` [B, L] 1-D, from ``mask``):
    [3, B, L] for an M-RoPE model given images, else ``positions``."""
    if not vision or "image_grid_thw" not in vision or not uses_mrope(model):
        return positions
    token_types = (input_ids == image_token_id(model)).to(torch.int)
    position_3d, _ = model.model.get_rope_index(
        input_ids,
        image_grid_thw=vision["image_grid_thw"],
        attention_mask=mask,
        mm_token_type_ids=token_types,
    )
    return position_3d.to(positions.device)


def text_positions(positions: torch.Tensor) -> torch.Tensor:
    """1-D positions [B, L] from ``positions`` that may be 3-D [3, B, L] (text tokens: equal parts)."""
    return positions[0] if positions.dim() == 3 else positions
