"""A conversation as a demonstration: the token ledger of :class:`~rlvr.trajectory.Trajectory` with
the assistant's turns ``given`` (trained on) and everything else ``context``.

The ledger is built turn by turn, as :mod:`rlvr.rollout.chat_ledger` builds a live conversation,
so SFT trains on the tokens the model sees when it generates: for message ``i`` the chat template
renders ``messages[:i]`` and ``messages[:i + 1]`` and the difference is that message's text. Before
an assistant message the first render asks for the generation prompt, so the assistant header
(``<|im_start|>assistant\\n``) is context and the assistant's text up to and including the
template's end-of-turn token is trained; what the template writes after that token (ChatML's
newline) is context, as the model never samples it.

Two ways SFT masks go wrong silently are refused, each with an :class:`RlvrError` naming the row
(docs/design.md, "Known traps"):

- template drift: a template that renders a conversation differently turn by turn than whole
  (one that strips earlier reasoning, numbers turns, or moves a system prompt) would train on
  tokens the model never sees; every prefix render must be a string prefix of the next, and the
  turn pieces, tokenized apart, must equal the whole render tokenized at once;
- a missing end-of-turn token: an assistant turn whose trained tokens do not end with it never
  teaches the model to stop.

What the bundled SmolLM2 template does (checked by tests/test_sft_masks.py): it renders every
message as ``<|im_start|>{role}\\n{content}<|im_end|>\\n`` (``tool`` messages included, with their
``name`` and ``tool_call_id`` dropped), prepends a default system message when the conversation has
none (the same in every prefix, so no drift), and ignores ``tools`` and ``tool_calls``. A
``tool_calls`` field the template does not render is refused here, rather than trained as a turn
that calls nothing: write the call into the content as the model should emit it, or use a template
that renders tool calls.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rlvr.data.chat_data import ChatExample
from rlvr.errors import RlvrError
from rlvr.trajectory import CONTEXT, GIVEN, Segment, Trajectory

TRAIN_ON = ("last_assistant", "all_assistant", "all")
# End-of-turn tokens of common template families, used when the template's text names them.
_TURN_END_TOKENS = ("<|im_end|>", "<|eot_id|>", "<end_of_turn>", "<|end|>", "<|endoftext|>")
_EXCERPT = 60


def end_of_turn_ids(tokenizer: Any) -> set[int]:
    """The ids that may end an assistant turn: the tokenizer's EOS, and the turn-end token of a
    ChatML-like (``<|im_end|>``) or similar template when its chat template writes it."""
    ids: set[int] = set()
    eos = getattr(tokenizer, "eos_token_id", None)
    ids.update(eos if isinstance(eos, list) else [] if eos is None else [eos])
    template = getattr(tokenizer, "chat_template", None) or ""
    for token in _TURN_END_TOKENS:
        if token in template:
            token_id = tokenizer.convert_tokens_to_ids(token)
            if isinstance(token_id, int) and token_id != tokenizer.unk_token_id:
                ids.add(token_id)
    return ids


def to_demonstration(
    tokenizer: Any,
    example: ChatExample,
    train_on: str = "all_assistant",
    max_length: int | None = None,
    max_length_key: str = "max_length",
) -> Trajectory:
    """The trajectory of ``example`` with the tokens ``train_on`` selects given, the rest context.

    ``train_on``: ``last_assistant`` (the final assistant turn only), ``all_assistant`` (every
    assistant turn) or ``all`` (every token after the first, prompts and headers included). The
    prompt is the ledger before the first trained token. A ledger longer than ``max_length`` tokens
    is refused, naming ``max_length_key`` as the setting that would admit it.
    """
    if train_on not in TRAIN_ON:
        raise RlvrError(f"train_on={train_on!r}: expected one of {', '.join(TRAIN_ON)}")
    if not getattr(tokenizer, "chat_template", None):
        raise RlvrError(
            "SFT on conversations needs a chat template: this tokenizer has none (use an instruct "
            "model's tokenizer, or set tokenizer.chat_template)"
        )
    messages, where = example.messages, example.origin
    assistant = [i for i, m in enumerate(messages) if m["role"] == "assistant" and i >= example.first_trained]
    if not assistant:
        raise RlvrError(f"{where}: the conversation has no assistant message: there is nothing to train on.")
    if assistant[0] == 0:
        raise RlvrError(f"{where}: the conversation opens with an assistant message; nothing precedes it.")
    _check_chars(example, max_length, max_length_key)
    stop = end_of_turn_ids(tokenizer)
    pieces: list[tuple[str, list[int]]] = []  # (kind, tokens) in ledger order
    owner: list[int] = []  # the message each token of the ledger came from (for errors)
    before = ""  # the render of messages[:i]
    for i, message in enumerate(messages):
        if message["role"] != "assistant":
            after = _render(tokenizer, example, i + 1, False)
            _check_prefix(before, after, where, i, "the render with the message")
            pieces.append((CONTEXT, _tokens(tokenizer, after[len(before) :])))
            owner += [i] * len(pieces[-1][1])
            before = after
            continue
        if "tool_calls" in message:
            _check_tool_calls_rendered(tokenizer, example, i)
        header = _render(tokenizer, example, i, True)
        after = _render(tokenizer, example, i + 1, False)
        _check_prefix(before, header, where, i, "its generation prompt")
        _check_prefix(header, after, where, i, "the render with the message")
        header_ids = _tokens(tokenizer, header[len(before) :])
        pieces.append((CONTEXT, header_ids))
        turn = _tokens(tokenizer, after[len(header) :])
        if (train_on == "last_assistant" and i != assistant[-1]) or i < example.first_trained:
            pieces.append((CONTEXT, turn))  # an earlier turn, context: not checked for its ending
        else:
            body, tail = _split_turn(tokenizer, turn, after[len(header) :], stop, where, i)
            pieces += [(GIVEN, body), (CONTEXT, tail)]
        owner += [i] * (len(header_ids) + len(turn))
        before = after
    ledger = [t for _, tokens in pieces for t in tokens]
    _check_whole(tokenizer, ledger, before, owner, where)
    if train_on == "all":
        pieces = [(GIVEN, tokens) for _, tokens in pieces]
    if max_length is not None and len(ledger) > max_length:
        raise RlvrError(
            f"{where}: the conversation is {len(ledger):,} tokens, more than "
            f"{max_length_key}={max_length:,}; shorten or drop the row, or raise {max_length_key}."
        )
    return _trajectory(pieces, example, train_on)


def check_demonstrations(
    tokenizer: Any,
    examples: Sequence[ChatExample],
    train_on: str = "all_assistant",
    max_length: int | None = None,
    max_length_key: str = "max_length",
    show: int = 3,
) -> list[Trajectory]:
    """Convert every example; if any fails, raise one :class:`RlvrError` listing the first ``show``
    failures (and how many there are), so a bad template or data set is seen whole at start-up."""
    trajectories, failures = [], []
    for example in examples:
        try:
            trajectories.append(to_demonstration(tokenizer, example, train_on, max_length, max_length_key))
        except RlvrError as error:
            failures.append(str(error))
    if failures:
        listed = "\n".join(f"- {f}" for f in failures[:show])
        more = f"\n(and {len(failures) - show} more)" if len(failures) > show else ""
        raise RlvrError(f"{len(failures)} of {len(examples)} demonstrations are refused:\n{listed}{more}")
    return trajectories


# --------------------------------------------------------------------------------------- helpers
def _render(tokenizer: Any, example: ChatExample, upto: int, generation_prompt: bool) -> str:
    if upto == 0 and not generation_prompt:
        return ""  # some templates cannot render an empty conversation; it is empty text
    try:
        return tokenizer.apply_chat_template(
            example.messages[:upto],
            tools=example.tools,
            add_generation_prompt=generation_prompt,
            tokenize=False,
        )
    except Exception as error:  # a Jinja error, raised from the template's own code
        role = example.messages[upto - 1]["role"] if upto else "-"
        raise RlvrError(
            f"{example.origin}: the chat template failed on message {upto} ({role}): "
            f"{type(error).__name__}: {error}"
        ) from error


def _tokens(tokenizer: Any, text: str) -> list[int]:
    return tokenizer(text, add_special_tokens=False)["input_ids"] if text else []


def _excerpt(text: str, at: int) -> str:
    return repr(text[max(0, at - _EXCERPT // 2) : at + _EXCERPT // 2])


def _check_prefix(shorter: str, longer: str, where: str, i: int, what: str) -> None:
    if longer.startswith(shorter):
        return
    at = next((k for k, (a, b) in enumerate(zip(shorter, longer)) if a != b), min(len(shorter), len(longer)))
    raise RlvrError(
        f"{where}: the chat template drifts at message {i + 1}: the conversation before it does not "
        f"render as the beginning of {what} (they differ at character {at}: "
        f"{_excerpt(shorter, at)} vs {_excerpt(longer, at)}). SFT would train on text the model never "
        "sees when it generates; use a template that renders history unchanged (e.g. one that does not "
        "strip earlier reasoning or number the turns), or set tokenizer.chat_template to one."
    )


def _check_tool_calls_rendered(tokenizer: Any, example: ChatExample, i: int) -> None:
    """Refuse an assistant message whose ``tool_calls`` the template drops (or cannot render)."""
    message = example.messages[i]
    plain = {k: v for k, v in message.items() if k != "tool_calls"}
    plain["content"] = plain.get("content") or ""
    stripped = ChatExample([*example.messages[:i], plain], example.tools, example.origin, example.index)
    remedy = (
        "Write the call into the message's content as the model should emit it, or use a chat template "
        "that renders tool calls."
    )
    try:
        rendered = _render(tokenizer, example, i + 1, False)
    except RlvrError as error:
        raise RlvrError(f"{error} (message {i + 1} has 'tool_calls'.) {remedy}") from error
    if _render(tokenizer, stripped, i + 1, False) == rendered:
        raise RlvrError(
            f"{example.origin}: message {i + 1} has 'tool_calls', but the chat template renders the turn "
            f"without them, so the model would be trained on a turn that calls nothing. {remedy}"
        )


def _check_chars(example: ChatExample, max_length: int | None, key: str) -> None:
    """Refuse a conversation too long in characters for ``max_length`` tokens before rendering or
    tokenizing it (which would take minutes for a hostile row of millions of characters)."""
    from rlvr.models.chat import MAX_CHARS_PER_TOKEN

    if max_length is None:
        return
    chars = sum(len(m.get("content") or "") for m in example.messages)
    if chars > max_length * MAX_CHARS_PER_TOKEN:
        raise RlvrError(
            f"{example.origin}: the conversation has {chars:,} characters, more than {key}={max_length:,} "
            f"tokens hold even at {MAX_CHARS_PER_TOKEN} characters a token; shorten or drop the row."
        )


def _split_turn(
    tokenizer: Any, tokens: list[int], text: str, stop: set[int], where: str, i: int
) -> tuple[list[int], list[int]]:
    """``(trained, after)``: the assistant turn up to its last end-of-turn token, and the template's
    text after it (a newline; context). An end-of-turn token inside the content is refused."""
    if not stop:
        raise RlvrError("the tokenizer has no eos_token, so the end of an assistant turn cannot be checked")
    ends = [k for k, t in enumerate(tokens) if t in stop]
    names = sorted(tokenizer.convert_ids_to_tokens(sorted(stop)))
    if not ends:
        raise RlvrError(
            f"{where}: the chat template does not end assistant message {i + 1} with an end-of-turn token "
            f"({', '.join(names)}): the turn renders as {text[-_EXCERPT:]!r}. A model "
            "trained on it never learns to stop; use a template that closes assistant turns with one."
        )
    last = ends[-1]
    first_of_run = last
    while first_of_run > 0 and tokens[first_of_run - 1] in stop:
        first_of_run -= 1
    if ends[0] < first_of_run:
        raise RlvrError(
            f"{where}: assistant message {i + 1} contains an end-of-turn token ({', '.join(names)}) inside "
            "its text; the model would learn to end its turn there. Remove it from the content."
        )
    return tokens[: last + 1], tokens[last + 1 :]


def _check_whole(tokenizer: Any, ledger: list[int], whole: str, owner: list[int], where: str) -> None:
    """The turn-by-turn tokens must be the tokens of the whole conversation rendered at once."""
    expected = _tokens(tokenizer, whole)
    if ledger == expected:
        return
    at = next(
        (k for k, (a, b) in enumerate(zip(ledger, expected)) if a != b), min(len(ledger), len(expected))
    )
    window = slice(max(0, at - 2), at + 3)
    pieces, whole_pieces = (tokenizer.convert_ids_to_tokens(ids[window]) for ids in (ledger, expected))
    raise RlvrError(
        f"{where}: the chat template's text tokenizes differently turn by turn than whole at message "
        f"{owner[min(at, len(owner) - 1)] + 1} ({len(ledger)} vs {len(expected)} tokens; from token "
        f"{window.start}: {pieces} vs {whole_pieces}). "
        "A token spans a turn boundary of this template, so the model would train on tokens it never "
        "sees; use a template whose turns end at a special token."
    )


def _trajectory(pieces: list[tuple[str, list[int]]], example: ChatExample, train_on: str) -> Trajectory:
    ids = [t for _, tokens in pieces for t in tokens]
    kinds = [kind for kind, tokens in pieces for _ in tokens]
    first = 1 if train_on == "all" else kinds.index(GIVEN)
    segments: list[Segment] = []
    for token, kind in zip(ids[first:], kinds[first:]):
        if segments and segments[-1].kind == kind:
            segments[-1].token_ids.append(token)
        else:
            segments.append(Segment(kind, [token]))
    last = next(m for m in reversed(example.messages) if m["role"] == "assistant")
    return Trajectory(
        prompt_ids=ids[:first],
        segments=segments,
        finish_reason="stop",
        text=last.get("content") or "",
        example_index=example.index,
        example_id=example.origin,
    )
