"""reasoning-gym examples: content, determinism, picklability and config errors."""

from __future__ import annotations

import pickle

import pytest

from rlvr.data import ANSWER_TAG_INSTRUCTION, list_reasoning_gym_tasks, load_reasoning_gym
from rlvr.errors import RlvrError

CHAIN_SUM = {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 2}


def test_chain_sum_examples() -> None:
    examples = load_reasoning_gym("chain_sum", 5, 7, CHAIN_SUM, "Be brief.", ANSWER_TAG_INSTRUCTION)
    assert [e.id for e in examples] == [f"chain_sum-7-{i}" for i in range(5)]
    for e in examples:
        entry = e.metadata["rg_entry"]
        assert e.prompt == [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": f"{entry['question']}\n{ANSWER_TAG_INSTRUCTION}"},
        ]
        assert e.reference == str(entry["answer"])
        assert e.data_source == "chain_sum"
        assert e.verifier == "reasoning_gym"
        # two terms of 1-2 digits, answer is their sum or difference
        left, op, right = entry["metadata"]["expression"].split()
        expected = int(left) + int(right) if op == "+" else int(left) - int(right)
        assert e.reference == str(expected)
        assert max(len(left), len(right)) <= 2
    assert pickle.loads(pickle.dumps(examples)) == examples


def test_chain_sum_is_deterministic_per_seed() -> None:
    first = [e.question for e in load_reasoning_gym("chain_sum", 20, 1, CHAIN_SUM, None, None)]
    again = [e.question for e in load_reasoning_gym("chain_sum", 20, 1, CHAIN_SUM, None, None)]
    other = [e.question for e in load_reasoning_gym("chain_sum", 20, 2, CHAIN_SUM, None, None)]
    assert first == again
    assert first != other


def test_no_system_prompt_and_custom_verifier() -> None:
    (example,) = load_reasoning_gym("chain_sum", 1, 0, CHAIN_SUM, "", None, verifier="math")
    assert [m["role"] for m in example.prompt] == ["user"]
    assert example.prompt[0]["content"] == example.metadata["rg_entry"]["question"]
    assert example.verifier == "math"


def test_task_without_single_answer_has_no_reference() -> None:
    (example,) = load_reasoning_gym("graph_color", 1, 0, {}, None, None)
    assert example.reference is None  # not the string "None"


def test_unknown_task_suggests_close_names() -> None:
    with pytest.raises(RlvrError) as info:
        load_reasoning_gym("chain_summ", 3, 0, {}, None, None)
    message = str(info.value)
    assert "'chain_summ'" in message and "chain_sum" in message and "rlvr tasks" in message


def test_bad_config_key_names_task_and_key() -> None:
    with pytest.raises(RlvrError) as info:
        load_reasoning_gym("chain_sum", 3, 0, {"min_term": 2}, None, None)
    message = str(info.value)
    assert "'chain_sum'" in message and "'min_term'" in message and "min_terms" in message


def test_bad_config_value_names_task_and_reason() -> None:
    with pytest.raises(RlvrError) as info:
        load_reasoning_gym("chain_sum", 3, 0, {"min_terms": 0}, None, None)
    assert "'chain_sum'" in str(info.value) and "min_terms" in str(info.value)


def test_seed_in_config_is_rejected() -> None:
    with pytest.raises(RlvrError, match="'seed'"):
        load_reasoning_gym("chain_sum", 3, 0, {"seed": 1}, None, None)


def test_list_tasks() -> None:
    tasks = list_reasoning_gym_tasks()
    assert "chain_sum" in tasks and "graph_color" in tasks
    assert tasks == sorted(tasks) and len(tasks) > 100
