"""The unit of training data: one prompt with what is needed to verify answers to it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Example:
    """One prompt and the information a verifier needs to score completions of it.

    ``prompt`` is a list of chat messages (``{"role": ..., "content": ...}``) *before* the chat
    template is applied; the system prompt and answer-format instruction are already included.
    ``reference`` is the ground-truth answer (``None`` for label-free rewards). ``data_source``
    names where the example came from (a reasoning-gym task name, a file stem); ``verifier`` names
    the reward function that should score it when a dataset mixes sources. ``metadata`` carries
    anything else a verifier needs (e.g. the reasoning-gym entry); it must be picklable because
    rewards run in worker processes. ``origin`` says where a row read from a file or dataset came
    from (``data.jsonl line 7``), so that a check made later, at start-up, can name the row.
    """

    id: str
    prompt: list[dict[str, str]]
    reference: str | None = None
    data_source: str = "unknown"
    verifier: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    origin: str | None = None
    # the prompt's images (PIL images, RGB), shown before the text of its first user message; a
    # vision-language model's processor turns them into pixel values and image tokens (docs/vision.md)
    images: list[Any] = field(default_factory=list)

    @property
    def question(self) -> str:
        """The last user message: what a person would call "the question"."""
        for message in reversed(self.prompt):
            if message.get("role") == "user":
                return message.get("content", "")
        return ""

    @property
    def where(self) -> str:
        """How errors name this example: its origin when it was read from data, else its id."""
        return self.origin or f"example {self.id!r}"
