"""LoRA adapters (PEFT) on the policy: train low-rank updates only, save adapter and merged weights.

With ``model.lora.r > 0`` the policy's linear layers get adapters (:func:`apply_lora`); the
optimizer sees only their parameters (the base weights are frozen by PEFT), so its state is a few
MB instead of twice the model. The in-process engine samples from the same module, adapters
included (the packed and fused decode paths read raw base weights, so they are off for it:
``rlvr.models.packed.packed_decode_available``). A checkpoint holds both forms
(:func:`save_lora`): ``adapter/`` (PEFT's own format, what a resume loads on top of the base model)
and ``model/`` with the adapters merged into a plain transformers model, which ``rlvr eval``,
``from_pretrained`` and any inference server load with no PEFT at all.
"""

from __future__ import annotations

import copy
from pathlib import Path

import torch

from rlvr.config.schema import LoraConfig
from rlvr.errors import RlvrError

ADAPTER_DIR = "adapter"
# the image side of transformers' VLMs (Idefics3, LLaVA, Qwen2-VL): no adapters there
VISION_MODULES = r".*(vision_model|vision_tower|visual|connector|multi_modal_projector).*"


def _peft():
    try:
        import peft
    except ImportError as err:
        raise RlvrError(
            "model.lora.r > 0 needs PEFT, which is not installed: pip install 'rlvr[peft]'"
        ) from err
    return peft


def has_adapters(model: torch.nn.Module) -> bool:
    """Whether ``model`` is a PEFT model (its forward adds adapter outputs to the base layers)."""
    return hasattr(model, "peft_config")


def apply_lora(model: torch.nn.Module, settings: LoraConfig, adapter: Path | None = None) -> torch.nn.Module:
    """``model`` with fresh adapters of ``settings`` (the LoRA B matrices start at zero, so the
    output is unchanged), or with the trained ones saved in ``adapter`` (a resume)."""
    peft = _peft()
    if adapter is not None:
        return peft.PeftModel.from_pretrained(model, str(adapter), is_trainable=True)
    config = peft.LoraConfig(
        r=settings.r,
        lora_alpha=settings.alpha,
        lora_dropout=settings.dropout,
        target_modules=settings.target_modules,
        # a vision-language model's adapters go on its language side only (its image encoder and
        # connector keep their weights, frozen like every base weight)
        exclude_modules=VISION_MODULES if getattr(model.config, "vision_config", None) is not None else None,
        task_type="CAUSAL_LM",
    )
    try:
        return peft.get_peft_model(model, config)
    except ValueError as err:  # e.g. a target module name the model does not have
        raise RlvrError(f"model.lora.target_modules: {err}") from err


def save_lora(model: torch.nn.Module, directory: Path) -> None:
    """Write ``directory/adapter`` (PEFT) and ``directory/model`` (adapters merged, plain transformers).

    The merge runs on a copy: merging in place and unmerging afterwards would leave the base weights
    off by the rounding of ``W + BA - BA``."""
    model.save_pretrained(directory / ADAPTER_DIR, safe_serialization=True)
    merged = copy.deepcopy(model).merge_and_unload()
    merged.save_pretrained(directory / "model", safe_serialization=True)


def merged_weights(model: torch.nn.Module, merge: bool = True) -> dict[str, torch.Tensor]:
    """The base model's parameters under their plain transformers names, each adapted layer's weight
    with its adapters added (``W + scale · B A``), computed without touching ``model``: what
    ``merge_and_unload`` would save, for an engine that cannot take adapters (vLLM's merged sync).
    ``merge=False``: the base weights alone. A model without adapters gives its own parameters."""
    if not has_adapters(model):
        return {name: p.detach() for name, p in model.named_parameters()}
    from peft.tuners.lora import LoraLayer

    base = model.get_base_model()
    adapted: dict[str, LoraLayer] = {  # the base layer's weight name → its adapted layer
        f"{name}.base_layer.weight": module
        for name, module in base.named_modules()
        if isinstance(module, LoraLayer) and not module.merged
    }
    weights: dict[str, torch.Tensor] = {}
    with torch.no_grad():
        for name, p in base.named_parameters():  # in the model's order, adapters left out
            if ".lora_" in name:
                continue
            weight = p.detach()
            module = adapted.get(name)
            for adapter in module.active_adapters if module is not None and merge else ():
                if adapter in module.lora_A:
                    weight = weight + module.get_delta_weight(adapter).to(weight.dtype)
            weights[name.replace(".base_layer.", ".")] = weight
    return weights


def trainable_parameters(model: torch.nn.Module) -> tuple[int, int]:
    """(trainable, total) parameter counts."""
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return trainable, sum(p.numel() for p in model.parameters())
