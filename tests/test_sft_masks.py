"""SFT masks: conversations become ledgers whose trained tokens are the assistant's text and its
end-of-turn token, token by token; templates that drift or drop the end-of-turn token are refused."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from rlvr.data.chat_data import ChatExample, load_chat_file
from rlvr.data.demonstrations import check_demonstrations, end_of_turn_ids, to_demonstration
from rlvr.errors import RlvrError
from rlvr.models import SMOLLM2, load_tokenizer

CALL = '<tool_call>{"name": "add", "arguments": {"a": 2, "b": 2}}</tool_call>'
CHAT = [
    {"role": "system", "content": "You add numbers."},
    {"role": "user", "content": "What is 2+2? Use the tool."},
    {"role": "assistant", "content": CALL},
    {"role": "tool", "name": "add", "tool_call_id": "call_1", "content": "4"},
    {"role": "assistant", "content": "2 + 2 = 4."},
    {"role": "user", "content": "Thanks!"},
    {"role": "assistant", "content": "You're welcome."},
]
ASSISTANT = [m["content"] for m in CHAT if m["role"] == "assistant"]
# SmolLM2's template, plus structured tool calls rendered as Hermes-style text
TOOL_TEMPLATE = (
    "{% if tools %}{{ '<|im_start|>system\\nTools: ' + tools | tojson + '<|im_end|>\\n' }}{% endif %}"
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' }}"
    "{% if message['content'] %}{{ message['content'] }}{% endif %}"
    "{% for call in message.get('tool_calls') or [] %}"
    "{{ '<tool_call>' + call['function'] | tojson + '</tool_call>' }}{% endfor %}"
    "{{ '<|im_end|>\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


@pytest.fixture(scope="module")
def smol():
    return load_tokenizer(SMOLLM2)


def with_template(tokenizer, template: str):
    other = copy.copy(tokenizer)
    other.chat_template = template
    return other


def example(messages, origin: str = "chat.jsonl line 4", tools=None) -> ChatExample:
    return ChatExample(messages, tools, origin, 3)


def oracle_mask(tokenizer, messages, turns: list[int]) -> tuple[list[int], list[int]]:
    """Independently of the ledger code: tokens of the whole render, and 1 on each token whose
    characters lie in the content + ``<|im_end|>`` of the assistant messages numbered ``turns``."""
    text = tokenizer.apply_chat_template(messages, tokenize=False)
    spans, at = [], 0
    for i, message in enumerate(messages):
        block = f"<|im_start|>{message['role']}\n{message['content']}<|im_end|>\n"
        at = text.index(block, at)
        if i in turns:
            start = at + len(f"<|im_start|>{message['role']}\n")
            spans.append((start, start + len(message["content"]) + len("<|im_end|>")))
        at += len(block)
    encoded = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    mask = [int(any(s <= a and b <= e for s, e in spans)) for a, b in encoded["offset_mapping"]]
    return encoded["input_ids"], mask


@pytest.mark.parametrize("train_on", ["last_assistant", "all_assistant", "all"])
def test_masks_token_by_token(smol, train_on: str) -> None:
    traj = to_demonstration(smol, example(CHAT), train_on)
    ledger = traj.prompt_ids + traj.response_ids
    mask = [0.0] * len(traj.prompt_ids) + traj.loss_mask
    assistant_at = [i for i, m in enumerate(CHAT) if m["role"] == "assistant"]
    turns = assistant_at[-1:] if train_on == "last_assistant" else assistant_at
    ids, expected = oracle_mask(smol, CHAT, turns)
    assert ledger == ids
    if train_on == "all":
        assert len(traj.prompt_ids) == 1 and mask == [0.0] + [1.0] * (len(ids) - 1)
    else:
        assert mask == expected
        assert traj.prompt_ids == ids[: expected.index(1)]
        given = [smol.decode(s.token_ids) for s in traj.segments if s.kind == "given"]
        wanted = ASSISTANT[-1:] if train_on == "last_assistant" else ASSISTANT
        assert given == [content + "<|im_end|>" for content in wanted]
        for segment in traj.segments:  # every trained turn ends with the end-of-turn token
            if segment.kind == "given":
                assert segment.token_ids[-1] == smol.convert_tokens_to_ids("<|im_end|>")
    assert traj.is_given and traj.num_sampled == 0 and traj.text == "You're welcome."
    assert traj.finish_reason == "stop" and traj.reward is None and traj.example_index == 3


def test_end_of_turn_ids(smol) -> None:
    assert end_of_turn_ids(smol) == {smol.convert_tokens_to_ids("<|im_end|>")}


def test_smollm2_ignores_tools(smol) -> None:
    tools = [{"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}]
    plain, with_tools = (to_demonstration(smol, example(CHAT, tools=t)) for t in (None, tools))
    assert (plain.prompt_ids, plain.segments) == (with_tools.prompt_ids, with_tools.segments)


def test_smollm2_ignores_tool_calls_so_they_are_refused(smol) -> None:
    calls = [{"type": "function", "function": {"name": "add", "arguments": {"a": 2, "b": 2}}}]
    chat = [CHAT[1], {"role": "assistant", "content": "Calling.", "tool_calls": calls}, *CHAT[3:5]]
    with pytest.raises(RlvrError, match=r"chat.jsonl line 4: message 2 has 'tool_calls', but the chat"):
        to_demonstration(smol, example(chat))
    chat[1] = {"role": "assistant", "content": None, "tool_calls": calls}
    with pytest.raises(RlvrError, match=r"chat.jsonl line 4: .*message 2 has 'tool_calls'"):
        to_demonstration(smol, example(chat))


def test_a_template_that_renders_tool_calls_trains_on_them(smol) -> None:
    calls = [{"type": "function", "function": {"name": "add", "arguments": {"a": 2, "b": 2}}}]
    chat = [CHAT[1], {"role": "assistant", "content": None, "tool_calls": calls}, *CHAT[3:5]]
    tools = [{"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}]
    traj = to_demonstration(with_template(smol, TOOL_TEMPLATE), example(chat, tools=tools))
    assert smol.decode(traj.prompt_ids).startswith(f"<|im_start|>system\nTools: {json.dumps(tools)}")
    given = [smol.decode(s.token_ids) for s in traj.segments if s.kind == "given"]
    call = json.dumps(calls[0]["function"])
    assert given == [f"<tool_call>{call}</tool_call><|im_end|>", "2 + 2 = 4.<|im_end|>"]


@pytest.mark.parametrize(
    "template, message",
    [
        (  # numbers the turns out of a total: every earlier turn changes when one is added
            "{% for m in messages %}<|im_start|>{{ m.role }} ({{ loop.index }}/{{ messages|length }})\n"
            "{{ m.content }}<|im_end|>\n{% endfor %}"
            "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}",
            "drifts at message 2",
        ),
        (  # strips the content of assistant turns before the last message (like reasoning stripping)
            "{% for m in messages %}<|im_start|>{{ m.role }}\n"
            "{% if m.role == 'assistant' and not loop.last %}[...]{% else %}{{ m.content }}{% endif %}"
            "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}",
            "drifts at message 3",
        ),
        (  # a header ending in a space: " Sure" merges across the turn boundary when rendered whole
            "{% for m in messages %}<|im_start|>{{ m.role }}: {{ m.content }}<|im_end|>\n{% endfor %}"
            "{% if add_generation_prompt %}<|im_start|>assistant: {% endif %}",
            "tokenizes differently turn by turn than whole",
        ),
    ],
)
def test_a_drifting_template_is_refused_naming_the_row(smol, template: str, message: str) -> None:
    chat = [CHAT[1], {"role": "assistant", "content": "Sure, 2 plus 2 is 4."}, *CHAT[5:]]
    with pytest.raises(RlvrError, match=f"chat.jsonl line 4: the chat template.* {message}"):
        to_demonstration(with_template(smol, template), example(chat))


def test_a_template_without_the_end_of_turn_token_is_refused(smol) -> None:
    template = (
        "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}"
        "{% if m.role != 'assistant' %}<|im_end|>{% endif %}\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    with pytest.raises(
        RlvrError, match=r"chat.jsonl line 4: .* does not end assistant message 3 .*<\|im_end\|>"
    ):
        to_demonstration(with_template(smol, template), example(CHAT))
    # only trained turns must end with it: train_on=last_assistant checks the last one alone
    with pytest.raises(RlvrError, match="does not end assistant message 7"):
        to_demonstration(with_template(smol, template), example(CHAT), "last_assistant")


def test_an_end_of_turn_token_inside_the_content_is_refused(smol) -> None:
    chat = [CHAT[1], {"role": "assistant", "content": "4<|im_end|> and more"}]
    with pytest.raises(RlvrError, match="chat.jsonl line 4: assistant message 2 contains an end-of-turn"):
        to_demonstration(smol, example(chat))


def test_too_long_is_refused_naming_the_row_length_and_key(smol) -> None:
    length = len(to_demonstration(smol, example(CHAT)).prompt_ids) + 5
    with pytest.raises(
        RlvrError, match=r"chat.jsonl line 4: the conversation is \d+ tokens, more than sft.max_len"
    ):
        to_demonstration(smol, example(CHAT), max_length=length, max_length_key="sft.max_len")
    with pytest.raises(RlvrError, match="characters, more than max_length=2 tokens"):
        to_demonstration(smol, example(CHAT), max_length=2)
    assert to_demonstration(smol, example(CHAT), max_length=10_000).num_trained > 0


def test_prompt_completion_and_messages_give_the_same_ledger(smol, tmp_path: Path) -> None:
    rows = [
        {"messages": CHAT},
        {"prompt": CHAT[:4], "completion": CHAT[4:]},
        {"messages": CHAT[1:3]},
        {"prompt": CHAT[1]["content"], "completion": CHAT[2]["content"]},
    ]
    path = tmp_path / "chat.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    a, b, c, d = (to_demonstration(smol, e) for e in load_chat_file(path))
    for one, other in ((a, b), (c, d)):
        assert (one.prompt_ids, one.segments) == (other.prompt_ids, other.segments)
    assert a.example_id == "chat.jsonl line 1" and b.example_index == 1


def test_check_demonstrations_lists_the_first_failures(smol) -> None:
    good = example(CHAT, "d.jsonl line 1")
    bad = [
        example([CHAT[1], {"role": "assistant", "content": f"<|im_end|>{n}"}], f"d.jsonl line {n}")
        for n in range(2, 7)
    ]
    assert len(check_demonstrations(smol, [good])) == 1
    with pytest.raises(RlvrError) as info:
        check_demonstrations(smol, [good, *bad], show=2)
    text = str(info.value)
    assert text.startswith("5 of 6 demonstrations are refused")
    assert "d.jsonl line 2:" in text and "d.jsonl line 3:" in text and "line 4:" not in text
    assert "(and 3 more)" in text


def test_bad_arguments(smol) -> None:
    with pytest.raises(RlvrError, match="train_on='assistant'"):
        to_demonstration(smol, example(CHAT), "assistant")
    with pytest.raises(RlvrError, match="opens with an assistant message"):
        to_demonstration(smol, example(CHAT[2:3]))
    with pytest.raises(RlvrError, match="has none"):
        to_demonstration(with_template(smol, None), example(CHAT))
