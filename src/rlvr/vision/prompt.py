"""Prompts with images: token ids that carry the tensors their images become.

A vision-language model's processor expands each image of a prompt into image tokens in the ids and
into pixel values (and, per architecture, a pixel mask or a patch grid). :class:`VisionPrompt` is the
prompt's token ids (a ``list`` of ints, so everything that reads ids — the ledger, lengths, the
trajectory file — reads it unchanged) with those tensors attached. The rollout engine's prefill, and
every training forward that encodes the prompt (old, reference and current log-probs), pass them to
the model with the ids; image tokens are prompt tokens, so they are never in a loss mask.

Two layouts exist among transformers' VLMs, and :func:`vision_kwargs` collates both for a batch:

- per-image tiles (Idefics3 / SmolVLM, LLaVA-style): ``pixel_values`` [images, 3, H, W] per prompt;
  a batch is [prompts, most images, 3, H, W], padded with all-zero images the model skips;
- flattened patches (Qwen2-VL / Qwen2.5-VL): ``pixel_values`` [patches, dim] and ``image_grid_thw``
  [images, 3] per prompt; a batch concatenates them in row order.

A forward that sees image tokens but got no pixels would embed the placeholders as text and compute
log-probs of a prompt the policy never saw, silently: :func:`check_images_reach` refuses it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from rlvr.errors import RlvrError

# the per-image tensors of the tile layout (a batch axis of images, padded with zeros), and the
# tensors of the patch layout (concatenated)
_TILE_KEYS = ("pixel_values", "pixel_attention_mask")
_PATCH_KEYS = ("pixel_values", "image_grid_thw")


class VisionPrompt(list):
    """A prompt's token ids with its images' tensors (``inputs``) and how many images it holds.

    ``source`` is what an engine that expands images itself needs (vLLM): the prompt's ids with one
    placeholder per image, before the processor expanded them, and the images; None when the prompt
    was built another way (a multi-turn ledger's).

    A dataset's prompts are lazy (``make`` in place of ``inputs``): their pixel tensors, several
    times the size of the images (fp32, a tile per crop), are computed when a prompt is drawn, not
    held for the whole dataset. :func:`copy_prompt` of a lazy prompt computes them once for the copy
    (the engine's call, then the trajectory's forwards, share it)."""

    def __init__(
        self,
        ids: list[int],
        inputs: dict[str, torch.Tensor] | None,
        images: int,
        source: tuple[list[int], list[Any]] | None = None,
        make: Any = None,
    ) -> None:
        super().__init__(ids)
        if inputs is None and make is None:
            raise ValueError("a VisionPrompt needs its inputs or a way to make them")
        self._inputs = inputs
        self._make = make
        self.images = images
        self.source = source

    @property
    def inputs(self) -> dict[str, torch.Tensor]:
        """The images' tensors (computed on each access for a lazy prompt)."""
        return self._inputs if self._inputs is not None else self._make()

    def __reduce__(self):  # pickles (reward workers, checkpoints of sampled batches) with its images
        return (VisionPrompt, (list(self), self.inputs, self.images, self.source))

    @property
    def pictures(self) -> list[Any] | None:
        """The prompt's images, when known (its ``source``)."""
        return list(self.source[1]) if self.source is not None else None


@dataclass
class ImageSet:
    """The tensors of some images (a multi-turn response's observations), without token ids, and
    the images themselves when known (``pictures``: for the logs)."""

    inputs: dict[str, torch.Tensor]
    images: int
    pictures: list[Any] | None = None


def vision_of(prompt: Any) -> VisionPrompt | ImageSet | None:
    """``prompt`` when it carries images (a :class:`VisionPrompt` or an :class:`ImageSet`), else None."""
    return prompt if isinstance(prompt, (VisionPrompt, ImageSet)) and prompt.images else None


def merge_images(parts: list[Any]) -> ImageSet | None:
    """The images of ``parts`` (each a :class:`VisionPrompt`, an :class:`ImageSet` or None) in order,
    as one :class:`ImageSet`; None when there are none."""
    present = [p for p in (vision_of(x) for x in parts) if p is not None]
    if not present:
        return None
    pictures = [getattr(p, "pictures", None) for p in present]
    pictures = None if any(p is None for p in pictures) else [x for p in pictures for x in p]
    if len(present) == 1:
        return ImageSet(present[0].inputs, present[0].images, pictures)
    inputs = {}
    tiles = "image_grid_thw" not in present[0].inputs
    for key in present[0].inputs:
        tensors = [p.inputs[key] for p in present]
        if tiles:  # images of other sizes: padded with zeros to the largest
            tail = _largest([t.shape for t in tensors])
            tensors = [_placed(t, t.new_zeros((t.shape[0], *tail))) for t in tensors]
        inputs[key] = torch.cat(tensors)
    return ImageSet(inputs, sum(p.images for p in present), pictures)


def _largest(shapes: list[torch.Size]) -> list[int]:
    """The largest size of every axis but the first."""
    return [max(s[d] for s in shapes) for d in range(1, len(shapes[0]))]


def _placed(t: torch.Tensor, into: torch.Tensor) -> torch.Tensor:
    """``into`` with ``t`` written at its start on every axis (the rest stays padding)."""
    into[tuple(slice(0, n) for n in t.shape)] = t
    return into


def encode_with_images(processor: Any, text: str, images: list[Any]) -> tuple[list[int], ImageSet]:
    """Token ids of ``text`` (a rendered chat, its image placeholders expanded) and its images'
    tensors, through the processor."""
    encoded = processor(text=[text], images=[list(images)], return_tensors="pt", add_special_tokens=False)
    inputs = {}
    for key, value in encoded.items():
        if key in ("input_ids", "attention_mask", "token_type_ids", "mm_token_type_ids"):
            continue
        if not isinstance(value, torch.Tensor):
            continue
        # the tile layout's tensors come with a batch axis of one prompt; the patch layout's do not
        inputs[key] = value[0] if key in _TILE_KEYS and "image_grid_thw" not in encoded else value
    return encoded["input_ids"][0].tolist(), ImageSet(inputs, len(images), list(images))


def processor_of(tokenizer: Any) -> Any | None:
    """The processor a VLM's tokenizer was loaded with (``rlvr.models.loading.load_tokenizer``)."""
    return getattr(tokenizer, "rlvr_processor", None)


def with_image_parts(messages: list[dict[str, Any]], images: int) -> list[dict[str, Any]]:
    """``messages`` in a processor's content-parts form, with ``images`` image parts before the text
    of the first user message (TRL's convention for an ``images`` column beside a prompt)."""
    out = [dict(m) for m in messages]
    for message in out:
        if message.get("role") == "user":
            message["images"] = [None] * images
            return as_parts(out)
    raise RlvrError("a prompt with images needs a user message to put them in")


def as_parts(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Messages as VLM chat templates take them: content a list of parts, a message's ``images``
    (rlvr's key for a message's images) as image parts before its text."""
    out = []
    for message in messages:
        content = message.get("content")
        parts = [{"type": "image"} for _ in message.get("images") or []]
        parts += content if isinstance(content, list) else [{"type": "text", "text": content or ""}]
        out.append({k: v for k, v in message.items() if k != "images"} | {"content": parts})
    return out


def encode_vision_prompt(processor: Any, messages: list[dict[str, Any]], images: list[Any]) -> VisionPrompt:
    """Token ids of ``messages`` with ``images`` under the processor's chat template, ending with the
    assistant turn, and the images' tensors."""
    text = processor.apply_chat_template(
        with_image_parts(messages, len(images)), add_generation_prompt=True, tokenize=False
    )
    return encode_rendered(processor, text, images, lazy=True)


def encode_rendered(processor: Any, text: str, images: list[Any], lazy: bool = False) -> VisionPrompt:
    """The :class:`VisionPrompt` of ``text`` (a rendered chat with one placeholder per image) and
    ``images``: the processor's expanded ids and tensors, and the placeholder form (``source``).
    ``lazy``: the tensors are made again when asked for, not kept (a dataset's prompts)."""
    ids, found = encode_with_images(processor, text, images)
    placeholders = processor.tokenizer(text, add_special_tokens=False)["input_ids"]
    pictures = list(images)
    if not lazy:
        return VisionPrompt(ids, found.inputs, found.images, (placeholders, pictures))

    def make() -> dict[str, torch.Tensor]:
        return encode_with_images(processor, text, pictures)[1].inputs

    return VisionPrompt(ids, None, found.images, (placeholders, pictures), make)


def vision_kwargs(prompts: list[Any], device: torch.device | str | None = None) -> dict[str, torch.Tensor]:
    """The model keyword arguments of a batch of prompts (rows in order; a row without images gets
    padding in the tile layout and nothing in the patch layout); ``{}`` when no prompt has images."""
    visions = [vision_of(p) for p in prompts]
    present = [v for v in visions if v is not None]
    if not present:
        return {}
    if "image_grid_thw" in present[0].inputs:
        out = {key: torch.cat([v.inputs[key] for v in present]) for key in _PATCH_KEYS}
    else:
        out = {}
        most = max(v.images for v in present)
        for key in present[0].inputs:
            tail = _largest([v.inputs[key].shape for v in present])
            batch = present[0].inputs[key].new_zeros((len(prompts), most, *tail))
            for row, v in enumerate(visions):
                if v is not None:
                    _placed(v.inputs[key], batch[row])
            out[key] = batch
    return {k: v.to(device) for k, v in out.items()} if device is not None else out


def image_token_id(model: torch.nn.Module) -> int | None:
    """The token id a VLM's processor puts where image features go; None for a text-only model."""
    config = getattr(model, "config", None)
    for name in ("image_token_id", "image_token_index"):
        value = getattr(config, name, None)
        if isinstance(value, int):
            return value
    return None


def check_images_reach(
    model: torch.nn.Module, input_ids: torch.Tensor, kwargs: dict[str, Any], where: str
) -> None:
    """Refuse a forward whose ids hold image tokens while no pixels came with them (``where`` names
    the forward), or pixels without a VLM to take them."""
    token = image_token_id(model)
    if kwargs and token is None:
        raise RlvrError(f"{where}: the prompts have images, but the model is text-only (no vision config)")
    if token is None or kwargs:
        return
    if bool((input_ids == token).any()):
        raise RlvrError(
            f"{where}: the prompt holds image tokens but no image reached the forward (the prompt lost "
            "its images on the way, e.g. trajectories read back from a file): its log-probs would be "
            "those of a prompt the policy never saw"
        )


def copy_prompt(prompt: list[int]) -> list[int]:
    """A copy of ``prompt``'s ids that keeps its images (sharing their tensors): ``list(prompt)``
    would drop them."""
    if isinstance(prompt, VisionPrompt):  # a lazy prompt's tensors are made here, once for the copy
        return VisionPrompt(list(prompt), prompt.inputs, prompt.images, prompt.source)
    return list(prompt)
