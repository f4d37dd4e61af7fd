"""Turn a bare question into the chat messages a policy is prompted with.

Every source (reasoning-gym, files, HF datasets) goes through :func:`build_messages`, so the
system prompt and the answer-format instruction are worded the same way whatever the data came
from; the verifier that parses answers can then rely on one instruction.
"""

from __future__ import annotations

ANSWER_TAG_INSTRUCTION = "Give your final answer inside <answer></answer> tags."
BOXED_INSTRUCTION = "Put your final answer within \\boxed{}."

# Short names a config can use instead of spelling the instruction out. Any other string is taken
# as the literal instruction text, so a user can word their own without registering it.
ANSWER_FORMATS: dict[str, str | None] = {
    "answer_tag": ANSWER_TAG_INSTRUCTION,
    "boxed": BOXED_INSTRUCTION,
    "none": None,
}


def resolve_answer_format(answer_format: str | None) -> str | None:
    """Return the instruction text for a format name (see ``ANSWER_FORMATS``) or literal text.

    ``None``, ``""`` and ``"none"`` all mean "append no instruction".
    """
    if not answer_format:
        return None
    if answer_format in ANSWER_FORMATS:
        return ANSWER_FORMATS[answer_format]
    return answer_format


def build_messages(
    question: str, system_prompt: str | None, answer_format: str | None
) -> list[dict[str, str]]:
    """Build ``[system?, user]`` messages for one question.

    The user message is the question, then (on a new line) the answer-format instruction. The
    system message is included only when ``system_prompt`` is non-empty, because an empty system
    turn still changes what a chat template renders (and so what the model sees).
    """
    instruction = resolve_answer_format(answer_format)
    content = question if instruction is None else f"{question.rstrip()}\n{instruction}"
    messages: list[dict[str, str]] = []
    if system_prompt:
        messages.append({"role": "system", "content": system_prompt})
    messages.append({"role": "user", "content": content})
    return messages


def demonstration_turns(shots: list[tuple[str, str]], answer_format: str | None) -> list[dict[str, str]]:
    """Few-shot demonstrations as chat turns: each question (worded like real prompts) and its reply.

    Small instruct models rarely follow a format from an instruction alone; one worked example in
    the conversation shows it (SmolLM2-135M uses <answer> tags in ~1% of samples zero-shot, ~16%
    with one demonstration).
    """
    turns: list[dict[str, str]] = []
    for question, reply in shots:
        turns.extend(build_messages(question, None, answer_format))
        turns.append({"role": "assistant", "content": reply})
    return turns


def insert_demonstrations(
    messages: list[dict[str, str]], turns: list[dict[str, str]]
) -> list[dict[str, str]]:
    """``messages`` with ``turns`` placed after any system message and before the conversation."""
    head = [m for m in messages[:1] if m.get("role") == "system"]
    return [*head, *turns, *messages[len(head) :]]
