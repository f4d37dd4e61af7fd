"""What may cross the sandbox's process boundary, and which test statements count (no sandbox needed).

The codec is the trust boundary of function tests: whatever bytes the candidate's process writes,
the harness must get back plain data of exactly the built-in types, or a ``WireError``.
"""

from __future__ import annotations

import json
import math
import os
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlvr.rewards._sandbox_codec import MAX_DEPTH, MAX_MESSAGE, WireError, decode, encode, receive, send
from rlvr.rewards._sandbox_functions import split_tests

PLAIN_TYPES = (type(None), bool, int, float, str, bytes, list, tuple, set, frozenset, dict)

hashable = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text() | st.binary(),
    lambda inner: st.tuples(inner, inner) | st.frozensets(inner, max_size=3),
    max_leaves=8,
)
plain = st.recursive(
    hashable,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.tuples(inner, inner)
        | st.dictionaries(hashable, inner, max_size=3)
        | st.sets(hashable, max_size=3)
    ),
    max_leaves=20,
)


def body(message: bytes) -> bytes:
    assert int.from_bytes(message[:4], "big") == len(message) - 4
    return message[4:]


def shape(value: object) -> object:
    """The value's exact types all the way down (NaN-safe), for comparing round trips."""
    kind = type(value)
    if kind is float:
        return (kind, "nan" if math.isnan(value) else value)
    if kind in (list, tuple):
        return (kind, [shape(v) for v in value])
    if kind in (set, frozenset):
        return (kind, sorted(repr(shape(v)) for v in value))
    if kind is dict:
        return (kind, [(shape(k), shape(v)) for k, v in value.items()])
    return (kind, value)


@given(plain)
@settings(max_examples=300, deadline=None)
def test_plain_data_round_trips_with_its_exact_types(value):
    assert shape(decode(body(encode(value)))) == shape(value)


def all_types(value: object) -> set[type]:
    found = {type(value)}
    if type(value) in (list, tuple, set, frozenset):
        for item in value:
            found |= all_types(item)
    elif type(value) is dict:
        for key, item in value.items():
            found |= all_types(key) | all_types(item)
    return found


@given(st.binary(max_size=200) | st.text(max_size=200).map(str.encode))
@settings(max_examples=300, deadline=None)
def test_arbitrary_bytes_decode_to_plain_data_or_fail(data):
    try:
        value = decode(data)
    except WireError:
        return
    assert all_types(value) <= set(PLAIN_TYPES)


class AlwaysEqual:
    def __eq__(self, other):
        return True

    __hash__ = object.__hash__


class LyingFloat(float):
    def __eq__(self, other):
        return True

    __hash__ = float.__hash__


class ClaimsToBeInt:
    __class__ = int  # isinstance(x, int) is True; type(x) is not


@pytest.mark.parametrize(
    "value",
    [
        AlwaysEqual(),
        LyingFloat(1.0),
        mock.ANY,
        ClaimsToBeInt(),
        type("Str", (str,), {})("x"),
        type("Int", (int,), {})(3),
        type("Dict", (dict,), {})(),
        [1, 2, AlwaysEqual()],
        {"key": (1, mock.ANY)},
        {LyingFloat(2.0): 1},
        iter([1, 2]),
        (x for x in range(3)),
        print,
        Exception("x"),
        1j,
    ],
    ids=lambda v: type(v).__name__,
)
def test_values_that_are_not_plain_data_cannot_cross(value):
    with pytest.raises(WireError):
        encode(value)


def test_nesting_and_size_are_bounded():
    deep: list = []
    for _ in range(MAX_DEPTH + 5):
        deep = [deep]
    with pytest.raises(WireError):
        encode(deep)
    loop: list = []
    loop.append(loop)
    with pytest.raises(WireError):
        encode(loop)
    with pytest.raises(WireError):
        encode("x" * (MAX_MESSAGE + 1))
    tagged = '["L",' * (MAX_DEPTH + 5) + "1" + "]" * (MAX_DEPTH + 5)
    with pytest.raises(WireError):
        decode(tagged.encode())


@pytest.mark.parametrize(
    "text",
    [
        '{"a": 1}',  # JSON objects never appear on the wire
        '["X", 1]',  # unknown tag
        '["D", 1]',  # dict with a key but no value
        '["S", ["L"]]',  # a list is not hashable: cannot be a set member
        '["B", "zz"]',  # not hex
        "[]",
        "[1, 2]",
        "",
        "nul",
    ],
)
def test_malformed_messages_fail_cleanly(text):
    with pytest.raises(WireError):
        decode(text.encode())


def test_framing_over_a_pipe_and_its_failures():
    read_fd, write_fd = os.pipe()
    try:
        send(write_fd, encode({"k": [1, 2.5, None]}))
        assert decode(receive(read_fd)) == {"k": [1, 2.5, None]}
        os.write(write_fd, (MAX_MESSAGE + 1).to_bytes(4, "big"))
        with pytest.raises(WireError, match="over the limit"):
            receive(read_fd)
        with pytest.raises(WireError, match="timeout"):
            receive(read_fd, deadline=0.0)
    finally:
        os.close(write_fd)
        with pytest.raises(WireError, match="end of file"):
            receive(read_fd)
        os.close(read_fd)


def counting(test_code: str, entry_point: str | None = "f") -> list[tuple[str, bool]]:
    return [(s["source"], s["counts"]) for s in split_tests(test_code, entry_point)["statements"]]


def test_only_asserts_that_involve_the_candidate_count():
    tests = (
        "def check(candidate):\n"
        "    assert True\n"
        "    assert True, 'This prints if this assert fails'\n"
        "    x = candidate(2)\n"
        "    y = x + 1\n"
        "    assert y == 5\n"
        "    assert candidate(1) == 2\n"
        "    z = 3\n"
        "    assert z == 3\n"
    )
    assert [c for _, c in counting(tests)] == [False, False, False, False, True, True, False, False]


def test_top_level_tests_call_the_names_they_use_but_do_not_define():
    tests = "import math\nfrom fractions import Fraction as F\nk = 2\n"
    tests += "assert sq(k) == 4\nassert abs(cube(-1)) == 1\n"
    split = split_tests(tests, None)
    assert split["candidate_names"] == {"cube": "cube", "sq": "sq"}  # not math, F, k, abs
    assert [s["counts"] for s in split["statements"]] == [False, False, False, True, True]


def test_humaneval_check_binds_candidate_to_the_entry_point():
    tests = "METADATA = {}\n\ndef check(candidate):\n    assert candidate(1) == 2\n\ncheck(inc)\n"
    split = split_tests(tests, "inc", prelude="def inc(x):\n    '''doc'''\n")
    assert split["candidate_names"] == {"candidate": "inc", "inc": "inc"}
    assert [s["source"] for s in split["statements"]] == ["METADATA = {}", "assert candidate(1) == 2"]
    assert split["prelude"].startswith("def inc")
    assert json.dumps(split)  # plain data: it crosses into the sandbox as a message
