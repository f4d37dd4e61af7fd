"""Turning chat messages into the token ids a model is prompted with."""

from __future__ import annotations


def encode_prompt(tokenizer, messages: list[dict[str, str]]) -> list[int]:
    """Token ids of ``messages`` under the tokenizer's chat template, ending with the assistant turn.

    Models without a chat template (base models) get the messages' contents joined by blank lines.
    """
    if getattr(tokenizer, "chat_template", None):
        text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    else:
        text = "\n\n".join(m["content"] for m in messages) + "\n\n"
    return tokenizer(text, add_special_tokens=False)["input_ids"]
