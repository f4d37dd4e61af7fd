"""One conversation as a token ledger: the model's turns exactly as sampled, everything else as the
chat template's own tokens.

The ledger never decodes and re-encodes what the model wrote. After a model turn, the new
messages (a tool's result, a game's reply) enter as the *suffix* the chat template adds for them:
the conversation is rendered with and without them, and only the difference is tokenized. That
suffix also holds the turn-boundary tokens the model did not sample (ChatML's ``<|im_end|>`` after
a turn cut at a stop string, the newline after it, the next ``<|im_start|>assistant``); they are
context, attended to and never trained on.

This needs a template that renders a conversation's beginning the same way whatever follows
(prefix-preserving). :func:`check_template` tests that at start-up and refuses a template that
rewrites history (e.g. strips earlier reasoning), naming the remedy.
"""

from __future__ import annotations

from rlvr.errors import RlvrError
from rlvr.trajectory import CONTEXT, SAMPLED, Segment
from rlvr.vision.images import checked_image
from rlvr.vision.prompt import (
    ImageSet,
    VisionPrompt,
    as_parts,
    encode_rendered,
    merge_images,
    processor_of,
)

Message = dict[str, str]


def render(tokenizer, messages: list[Message], generation_prompt: bool = True) -> str:
    """``messages`` under the chat template; a VLM's through its processor, in content-parts form
    (a message's ``images`` as image parts)."""
    processor = processor_of(tokenizer)
    if processor is not None:
        return processor.apply_chat_template(
            as_parts(messages), add_generation_prompt=generation_prompt, tokenize=False
        )
    return tokenizer.apply_chat_template(messages, add_generation_prompt=generation_prompt, tokenize=False)


def _images_in(messages: list[Message], tokenizer) -> list:
    """The images the messages carry (their ``images`` key), in order, each checked; refused for a
    text-only model."""
    images = []
    for message in messages:
        for image in message.get("images") or []:
            images.append(checked_image(image, "an environment message's image"))
    if images and processor_of(tokenizer) is None:
        raise RlvrError("an environment message has images, but the model is text-only (docs/vision.md)")
    return images


def check_template(tokenizer, role: str = "user") -> None:
    """Raise :class:`RlvrError` unless multi-turn ledgers can be built with this tokenizer's template:
    it exists, and rendering a conversation that continues after an assistant turn keeps the
    earlier rendering as its prefix (with the assistant's text inserted verbatim)."""
    if not getattr(tokenizer, "chat_template", None):
        raise RlvrError(
            "multi-turn environments need a chat template: this tokenizer has none (use an instruct "
            "model, or set tokenizer.chat_template)"
        )
    opening = [{"role": "user", "content": "Question?"}]
    reply = "Let me check. <tool>2+2</tool>"
    before = render(tokenizer, opening) + reply
    after = render(
        tokenizer, [*opening, {"role": "assistant", "content": reply}, {"role": role, "content": "4"}]
    )
    if not after.startswith(before):
        raise RlvrError(
            "the chat template is not prefix-preserving over turns: rendering an assistant turn and a "
            f"{role} message changes the text before them, so the tokens the model sampled would not be "
            "the tokens it is trained on. Use a template that renders history unchanged (e.g. one that "
            "does not strip earlier reasoning), or set tokenizer.chat_template to such a template"
        )


class ChatLedger:
    """A conversation being played out: its messages, their rendering, and the token segments."""

    def __init__(self, tokenizer, messages: list[Message]) -> None:
        self.tokenizer = tokenizer
        self.messages = list(messages)
        self.rendered = render(tokenizer, self.messages)
        images = _images_in(self.messages, tokenizer)
        self.prompt_ids: list[int] = self._encode(self.rendered, images)
        # the images of the environment's messages after the prompt, one set per message batch
        self.response_images: list[ImageSet] = []
        # the conversation with one placeholder per image, before the processor expanded them, and
        # every image: what an engine that expands images itself (vLLM) is sent
        self.placeholder_ids = list(self.prompt_ids.source[0] if images else self.prompt_ids)
        self.pictures = list(images)
        self.segments: list[Segment] = []
        self._pending: str | None = None  # the last model turn's text, until the next messages arrive
        self._ended_by: int | None = None  # the end-of-turn token the model sampled, if it did

    def _encode(self, text: str, images: list) -> list[int]:
        if not images:
            return self.tokenizer(text, add_special_tokens=False)["input_ids"]
        return encode_rendered(processor_of(self.tokenizer), text, images)

    @property
    def ids(self) -> list[int]:
        """Prompt and every segment so far: what the model continues from (with every image so
        far when there are any: a re-prefill needs them all)."""
        ids = self.prompt_ids + [t for s in self.segments for t in s.token_ids]
        merged = merge_images([self.prompt_ids, *self.response_images])
        if merged is None:
            return ids
        return VisionPrompt(
            ids, merged.inputs, merged.images, (list(self.placeholder_ids), list(self.pictures))
        )

    @property
    def response_vision(self) -> ImageSet | None:
        """The images among the response's context tokens (an environment's observations), or None."""
        return merge_images(self.response_images)

    @property
    def response_length(self) -> int:
        return sum(len(s.token_ids) for s in self.segments)

    def add_model_turn(self, token_ids: list[int], logprobs: list[float], text: str, eos: int | None) -> None:
        """Append the model's sampled tokens as they are. ``text`` is their decoded text without the
        end-of-turn token; ``eos`` is that token's id when the turn ended with it."""
        self.segments.append(Segment(SAMPLED, list(token_ids), list(logprobs)))
        self.placeholder_ids += token_ids
        self._pending, self._ended_by = text, eos

    def add_messages(self, messages: list[Message]) -> None:
        """Append ``messages`` after the last model turn as the template's suffix for them (ending
        with the next assistant turn's header)."""
        if self._pending is None:
            raise ValueError("add_messages follows a model turn")
        assistant = {"role": "assistant", "content": self._pending}
        full = render(self.tokenizer, [*self.messages, assistant, *messages])
        before = self.rendered + self._pending
        if not full.startswith(before):
            raise RlvrError(
                "the chat template rewrote the conversation's history between turns; the ledger cannot "
                "stay token-exact (see rlvr.rollout.chat_ledger.check_template)"
            )
        images = _images_in(messages, self.tokenizer)
        suffix = self._encode(full[len(before) :], images)
        placeholders = list(suffix)
        if isinstance(suffix, VisionPrompt):
            self.response_images.append(ImageSet(suffix.inputs, suffix.images, list(images)))
            placeholders, suffix = suffix.source[0], list(suffix)
        if self._ended_by is not None:
            # The model sampled the end-of-turn token the template writes after its message: the
            # suffix starts with that token's text, which the ledger already holds as sampled.
            if not suffix or suffix[0] != self._ended_by:
                raise RlvrError(
                    "the chat template does not end an assistant turn with the model's end-of-turn token "
                    f"(id {self._ended_by}); multi-turn ledgers cannot be built with it"
                )
            suffix, placeholders = suffix[1:], placeholders[1:]
        if suffix:
            self.segments.append(Segment(CONTEXT, suffix))
        self.placeholder_ids += placeholders
        self.pictures += images
        self.messages += [assistant, *messages]
        self.rendered = full
        self._pending, self._ended_by = None, None
