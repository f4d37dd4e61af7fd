"""Train/eval splitting and overlap removal."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rlvr.data import Example, build_messages, drop_overlap, split_train_eval
from rlvr.errors import RlvrError


def _examples(questions: list[str]) -> list[Example]:
    return [Example(id=f"q-{i}", prompt=build_messages(q, None, None)) for i, q in enumerate(questions)]


def test_split_is_deterministic_and_disjoint() -> None:
    examples = _examples([f"question {i}" for i in range(50)])
    train, held_out = split_train_eval(examples, eval_size=10, seed=3)
    again_train, again_eval = split_train_eval(examples, eval_size=10, seed=3)
    assert [e.id for e in train] == [e.id for e in again_train]
    assert [e.id for e in held_out] == [e.id for e in again_eval]
    assert len(held_out) == 10 and len(train) == 40
    assert not {e.id for e in train} & {e.id for e in held_out}
    assert {e.id for e in train} | {e.id for e in held_out} == {e.id for e in examples}


def test_split_depends_on_seed_and_keeps_order() -> None:
    examples = list(range(100))
    _, eval_a = split_train_eval(examples, eval_size=10, seed=0)
    _, eval_b = split_train_eval(examples, eval_size=10, seed=1)
    assert eval_a != eval_b
    assert eval_a == sorted(eval_a)
    # not simply the first or last examples
    assert eval_a != examples[:10] and eval_a != examples[-10:]


def test_split_edges() -> None:
    assert split_train_eval([1, 2, 3], eval_size=0, seed=0) == ([1, 2, 3], [])
    assert split_train_eval([1, 2, 3], eval_size=3, seed=0) == ([], [1, 2, 3])


def test_split_eval_size_too_large() -> None:
    with pytest.raises(RlvrError, match=r"eval size 4 .*3 examples"):
        split_train_eval([1, 2, 3], eval_size=4, seed=0)
    with pytest.raises(RlvrError, match="eval size"):
        split_train_eval([1, 2, 3], eval_size=-1, seed=0)


@given(st.integers(0, 60).flatmap(lambda n: st.tuples(st.just(n), st.integers(0, n), st.integers(0, 9))))
def test_split_partitions(case: tuple[int, int, int]) -> None:
    n, eval_size, seed = case
    train, held_out = split_train_eval(list(range(n)), eval_size, seed)
    assert len(held_out) == eval_size
    assert sorted(train + held_out) == list(range(n))


def test_drop_overlap_by_question() -> None:
    train = _examples(["a", "b", "c", "b"])
    held_out = _examples(["b", "z"])
    kept, removed = drop_overlap(train, held_out)
    assert removed == 2
    assert [e.question for e in kept] == ["a", "c"]
    assert [e.question for e in held_out] == ["b", "z"]


def test_drop_overlap_custom_key() -> None:
    kept, removed = drop_overlap([1, 2, 3, 4], [12, 14], key=lambda x: x % 10)
    assert kept == [1, 3] and removed == 2
    assert drop_overlap([1, 2], [], key=lambda x: x) == ([1, 2], 0)
