"""Turning chat messages into the token ids a model is prompted with."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rlvr.errors import RlvrError


def encode_prompt(tokenizer, messages: list[dict[str, str]]) -> list[int]:
    """Token ids of ``messages`` under the tokenizer's chat template, ending with the assistant turn.

    Models without a chat template (base models) get the messages' contents joined by blank lines.
    """
    if getattr(tokenizer, "chat_template", None):
        text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    else:
        text = "\n\n".join(m["content"] for m in messages) + "\n\n"
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def encode_example(tokenizer: Any, example: Any) -> list[int]:
    """:func:`encode_prompt` of ``example.prompt``; with images, their token ids and pixel tensors
    through the model's processor (a :class:`rlvr.vision.prompt.VisionPrompt`)."""
    images = getattr(example, "images", None)
    if not images:
        return encode_prompt(tokenizer, example.prompt)
    from rlvr.vision.prompt import encode_vision_prompt, processor_of

    processor = processor_of(tokenizer)
    if processor is None:
        raise RlvrError(
            f"{_where(example)}: the prompt has {len(images)} image(s), but the model is text-only; "
            "use a vision-language model (model.name: tiny-smolvlm, or a local VLM directory; docs/vision.md)"
        )
    try:
        return encode_vision_prompt(processor, example.prompt, images)
    except (ValueError, TypeError) as err:
        raise RlvrError(f"{_where(example)}: its images could not be processed ({err})") from None


# No tokenizer puts more characters than this in one token on average over a prompt (English
# text averages about 4): a prompt longer than this many characters per token of context is
# refused before it is tokenized, which would take minutes and gigabytes for a 50-million-character
# row. The exact check, prompt tokens + max new tokens against the context, follows tokenizing.
MAX_CHARS_PER_TOKEN = 32


def context_length(model: Any) -> int | None:
    """The longest prompt + completion ``model`` (a transformers model, PEFT-wrapped or not)
    takes: its config's ``max_position_embeddings`` (``n_positions`` in GPT-2's), widened by a
    RoPE scaling factor; None when the config does not say."""
    config = getattr(model, "config", None)
    if config is not None and hasattr(config, "get_text_config"):
        config = config.get_text_config()
    for name in ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length"):
        value = getattr(config, name, None)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            break
    else:
        return None
    scaling = getattr(config, "rope_scaling", None)
    factor = scaling.get("factor") if isinstance(scaling, dict) else None
    if isinstance(factor, (int, float)) and factor > 1:  # YaRN, linear, dynamic: longer than trained
        base = scaling.get("original_max_position_embeddings") or value
        value = max(value, int(base * factor))
    return value


def rollout_context(cfg: Any, engine: Any) -> tuple[int | None, str]:
    """``(tokens, what sets it)``: the longest prompt + completion the run's rollout engine takes.
    The HF engine: its model's context (:func:`context_length`); the vLLM server rlvr starts:
    ``rollout.vllm.max_model_len``; a server given by URL: unknown (None)."""
    if cfg.rollout.engine == "vllm":
        if cfg.rollout.vllm.url:
            return None, "the vLLM server"
        return cfg.rollout.vllm.max_model_len, "rollout.vllm.max_model_len"
    return context_length(getattr(engine, "model", None)), "the model's max_position_embeddings"


def _where(example: Any) -> str:
    origin = getattr(example, "origin", None)
    if origin:
        return f"{origin} (id {example.id!r})"
    return f"example {example.id!r} (data source {example.data_source!r})"


def check_prompt_chars(examples: Sequence[Any], context: int | None, context_from: str) -> None:
    """Refuse, before any tokenizing, a prompt too long in characters to fit ``context`` tokens
    at :data:`MAX_CHARS_PER_TOKEN` characters a token; the error names the row."""
    if not context:
        return
    limit = context * MAX_CHARS_PER_TOKEN
    for example in examples:
        chars = sum(len(m["content"]) for m in example.prompt if isinstance(m.get("content"), str))
        if chars > limit:
            raise RlvrError(
                f"{_where(example)}: the prompt has {chars:,} characters, more than a context of "
                f"{context:,} tokens ({context_from}) holds even at {MAX_CHARS_PER_TOKEN} characters a "
                "token; it was refused before tokenizing. Remove or shorten the row (docs/data.md, "
                "Limits on input)."
            )


def encode_prompts(
    tokenizer: Any,
    examples: Sequence[Any],
    context: int | None,
    max_new_tokens: int,
    context_from: str = "the model's max_position_embeddings",
    new_tokens_key: str = "rollout.max_new_tokens",
) -> list[list[int]]:
    """:func:`encode_prompt` of every example's prompt, at start-up, refusing a prompt that cannot
    fit: more characters than :func:`check_prompt_chars` allows (before tokenizing anything), or
    more tokens than ``context - max_new_tokens``. The error names the first such row (its file
    and line when it was read from data), how many there are, and the keys that would make room."""
    check_prompt_chars(examples, context, context_from)
    prompts = [encode_example(tokenizer, e) for e in examples]
    if not context:
        return prompts
    too_long = [(e, len(p)) for e, p in zip(examples, prompts) if len(p) + max_new_tokens > context]
    if too_long:
        example, tokens = too_long[0]
        raise_limit = f", or raise {context_from}" if context_from.startswith("rollout.") else ""
        fix = "Remove or shorten the row"
        if len(too_long) > 1:
            fix = f"{len(too_long)} of the {len(examples)} prompts are too long: remove or shorten them"
        raise RlvrError(
            f"{_where(example)}: the prompt is {tokens:,} tokens; with {new_tokens_key}={max_new_tokens} "
            f"that is more than the context of {context:,} tokens ({context_from}). {fix}, or lower "
            f"{new_tokens_key}{raise_limit}."
        )
    return prompts
