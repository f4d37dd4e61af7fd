"""Small vision-language models built from real transformers architectures, offline.

No pretrained VLM ships in a package these machines can install, so rlvr builds small ones from
configs, the way peer frameworks test their VLM paths:

- ``tiny-smolvlm``: an Idefics3 (SmolVLM) model whose text side is the bundled SmolLM2-135M-Instruct
  (its weights copied in) and whose vision side, a 2-layer SigLIP encoder on 64-pixel images with a
  pixel-shuffle connector (4 image tokens an image), starts from random weights.
- ``tiny-random-vlm``: the same architecture on ``tiny-random``'s text side (for tests).
- :func:`tiny_qwen2_vl`: a Qwen2-VL of a few million random parameters with the SmolLM2 tokenizer,
  in memory (for tests of Qwen2-VL's multimodal rotary positions).

The two built-in names are built once into the rlvr cache (``rlvr.models.bundled``), with their
processor and a chat template that renders ``{"type": "image"}`` parts of a message. A user's own
pretrained VLM loads through the same path: ``model.name`` pointing at its local directory
(docs/vision.md).
"""

from __future__ import annotations

from pathlib import Path

TINY_SMOLVLM = "tiny-smolvlm"
TINY_RANDOM_VLM = "tiny-random-vlm"
IMAGE_SIDE = 64  # pixels: the tiny models' image size (one 64 × 64 tile, no splitting)

# SmolLM2's ChatML template, with image parts rendered as the processor's image placeholder
_CHAT_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face"
    "<|im_end|>\\n' }}{% endif %}{{ '<|im_start|>' + message['role'] + '\\n' }}"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}"
    "{% for part in message['content'] %}{% if part['type'] == 'image' %}{{ IMAGE }}"
    "{% else %}{{ part['text'] }}{% endif %}{% endfor %}{% endif %}{{ '<|im_end|>\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def _template(image: str) -> str:
    return _CHAT_TEMPLATE.replace("{{ IMAGE }}", image)


def build_tiny_smolvlm(out: Path) -> None:
    """Save the Idefics3 model with SmolLM2's text weights and a random SigLIP encoder to ``out``."""
    from rlvr.models.bundled import smollm2_dir

    _build_idefics3(out, smollm2_dir())


def build_tiny_random_vlm(out: Path) -> None:
    """The same architecture on ``tiny-random``'s text side (a few million parameters, for tests)."""
    from rlvr.models.bundled import tiny_random_dir

    _build_idefics3(out, tiny_random_dir())


def _build_idefics3(out: Path, source: Path) -> None:
    import torch
    from transformers import (
        AutoModelForCausalLM,
        AutoTokenizer,
        Idefics3Config,
        Idefics3ForConditionalGeneration,
        Idefics3Processor,
    )
    from transformers.models.idefics3.image_processing_pil_idefics3 import Idefics3ImageProcessorPil

    tokenizer = AutoTokenizer.from_pretrained(source)
    tokenizer.add_special_tokens(
        {
            "additional_special_tokens": [
                "<fake_token_around_image>",
                "<image>",
                "<end_of_utterance>",
                "<global-img>",
            ]
        }
    )
    text = AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32)
    text_config = text.config.to_dict()
    text_config["vocab_size"] = len(tokenizer)
    vision_config = {
        "hidden_size": 192,
        "intermediate_size": 384,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "image_size": IMAGE_SIDE,
        "patch_size": 16,
    }
    config = Idefics3Config(
        text_config=text_config,
        vision_config=vision_config,
        scale_factor=2,
        image_token_id=tokenizer.convert_tokens_to_ids("<image>"),
        tie_word_embeddings=True,
    )
    torch.manual_seed(0)
    model = Idefics3ForConditionalGeneration(config)
    model.model.text_model.load_state_dict(text.model.state_dict() | _grown_embeddings(text, len(tokenizer)))
    model.lm_head.weight = model.model.text_model.embed_tokens.weight
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id or tokenizer.eos_token_id
    image_processor = Idefics3ImageProcessorPil(
        do_image_splitting=False,
        size={"longest_edge": IMAGE_SIDE},
        max_image_size={"longest_edge": IMAGE_SIDE},
    )
    tokenizer.chat_template = _template("<image>")
    processor = Idefics3Processor(
        image_processor,
        tokenizer,
        image_seq_len=(IMAGE_SIDE // 16) ** 2 // 4,
        chat_template=_template("<image>"),
    )
    model.save_pretrained(out, safe_serialization=True)
    processor.save_pretrained(out)


def _grown_embeddings(text, vocab: int) -> dict:
    """SmolLM2's input embeddings with rows for the added image tokens (their mean, as transformers'
    ``resize_token_embeddings`` initialises new rows)."""
    import torch

    old = text.model.embed_tokens.weight.detach()
    extra = old.mean(dim=0, keepdim=True).expand(vocab - old.shape[0], -1)
    return {"embed_tokens.weight": torch.cat([old, extra]).clone()}


def tiny_qwen2_vl() -> tuple:
    """(model, processor) of a Qwen2-VL of a few million random parameters with SmolLM2's tokenizer,
    in memory: transformers' Qwen2-VL processor wants a video processor, which needs torchvision (not
    installed here), so this one takes images only and is not saved as a built-in model."""
    import torch
    from transformers import AutoTokenizer, Qwen2VLConfig, Qwen2VLForConditionalGeneration, Qwen2VLProcessor
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    from rlvr.models.bundled import smollm2_dir

    class ImageOnlyProcessor(Qwen2VLProcessor):
        def check_argument_for_proper_class(self, argument_name, argument):  # noqa: ANN001, ANN202
            if argument_name == "video_processor" and argument is None:
                return None
            return super().check_argument_for_proper_class(argument_name, argument)

    tokenizer = AutoTokenizer.from_pretrained(smollm2_dir())
    specials = ["<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"]
    tokenizer.add_special_tokens({"additional_special_tokens": specials})
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in specials}
    text = {
        "vocab_size": len(tokenizer),
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "max_position_embeddings": 2048,
        "rope_scaling": {"type": "mrope", "mrope_section": [2, 3, 3]},
        "tie_word_embeddings": True,
        "bos_token_id": tokenizer.bos_token_id,
        "eos_token_id": tokenizer.eos_token_id,
        "pad_token_id": tokenizer.pad_token_id,
    }
    vision = {"depth": 2, "embed_dim": 64, "hidden_size": 64, "num_heads": 4, "mlp_ratio": 2}
    config = Qwen2VLConfig(
        text_config=text,
        vision_config=vision,
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
        tie_word_embeddings=True,
    )
    torch.manual_seed(0)
    model = Qwen2VLForConditionalGeneration(config).float()
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    image_processor = Qwen2VLImageProcessorPil(min_pixels=56 * 56, max_pixels=56 * 56)
    template = _template("<|vision_start|><|image_pad|><|vision_end|>")
    tokenizer.chat_template = template
    processor = ImageOnlyProcessor(image_processor, tokenizer, None, chat_template=template)
    tokenizer.rlvr_processor = processor
    return model, processor
