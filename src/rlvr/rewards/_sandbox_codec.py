"""Plain data across the sandbox's process boundary (stdlib only; runs inside the sandbox).

Only these values cross, and only with exactly these types (no subclasses): ``None``, ``bool``,
``int``, ``float``, ``str``, ``bytes``, and ``list``, ``tuple``, ``set``, ``frozenset`` and
``dict`` of them. Everything else — a ``float`` subclass, an object whose ``__eq__`` always holds,
``unittest.mock.ANY``, a generator — cannot be encoded, so a call that returns one is a failed
test. Deliberately not pickle: unpickling runs code chosen by whoever wrote the bytes.

The wire format is JSON text in which every JSON array is a tagged container (its first element
names the type: ``"L"`` list, ``"T"`` tuple, ``"S"`` set, ``"F"`` frozenset, ``"D"`` dict with keys
and values alternating, ``"B"`` bytes as hex); strings, numbers, ``true``/``false``/``null`` stand for
themselves; JSON objects never appear. Messages are framed by a 4-byte big-endian length.
"""

import json
import os
import select
import time

MAX_MESSAGE = 16 << 20  # bytes in one message; a larger reply is a failed call
MAX_DEPTH = 100  # nesting of containers

_SCALARS = (type(None), bool, int, float, str)
_SEQUENCE_TAGS = {list: "L", tuple: "T", set: "S", frozenset: "F"}
_BUILDERS = {"L": list, "T": tuple, "S": set, "F": frozenset}


class WireError(Exception):
    """A value that is not plain data, or a message that does not decode."""


def encode(value: object) -> bytes:
    """``value`` as one framed message; :class:`WireError` if it is not plain data."""
    try:
        text = json.dumps(_to_tree(value, 0), ensure_ascii=False, separators=(",", ":"))
    except RecursionError as exc:
        raise WireError("value nested too deeply") from exc
    data = text.encode("utf-8", "surrogatepass")
    if len(data) > MAX_MESSAGE:
        raise WireError(f"value larger than {MAX_MESSAGE} bytes")
    return len(data).to_bytes(4, "big") + data


def decode(data: bytes) -> object:
    """The plain value of one message body; :class:`WireError` for anything malformed."""
    try:
        tree = json.loads(data.decode("utf-8", "surrogatepass"))
        return _from_tree(tree, 0)
    except WireError:
        raise
    except (ValueError, TypeError, RecursionError, UnicodeDecodeError) as exc:
        raise WireError(f"malformed message: {type(exc).__name__}") from exc


def _to_tree(value: object, depth: int) -> object:
    kind = type(value)
    if kind in _SCALARS:
        return value
    if depth >= MAX_DEPTH:
        raise WireError("value nested too deeply")
    if kind is bytes:
        return ["B", value.hex()]
    if kind is dict:
        tree = ["D"]
        for key, item in value.items():
            tree.append(_to_tree(key, depth + 1))
            tree.append(_to_tree(item, depth + 1))
        return tree
    tag = _SEQUENCE_TAGS.get(kind)
    if tag is None:
        raise WireError(f"not plain data: a value of type {_type_name(value)}")
    return [tag, *(_to_tree(item, depth + 1) for item in value)]


def _from_tree(tree: object, depth: int) -> object:
    kind = type(tree)
    if kind in _SCALARS:
        return tree
    if kind is not list or not tree or type(tree[0]) is not str or depth >= MAX_DEPTH:
        raise WireError("malformed message: not a tagged container")
    tag, items = tree[0], tree[1:]
    if tag == "B":
        if len(items) != 1 or type(items[0]) is not str:
            raise WireError("malformed message: bad bytes")
        return bytes.fromhex(items[0])
    values = [_from_tree(item, depth + 1) for item in items]
    if tag == "D":
        if len(values) % 2:
            raise WireError("malformed message: odd dict")
        return dict(zip(values[::2], values[1::2]))
    builder = _BUILDERS.get(tag)
    if builder is None:
        raise WireError(f"malformed message: unknown tag {tag[:8]!r}")
    return builder(values)


def _type_name(value: object) -> str:
    # type(value).__name__ is a str set by the class's author; take it from the type's slot, capped.
    name = type.__dict__["__name__"].__get__(type(value))
    return name[:60]


def send(fd: int, message: bytes) -> None:
    """Write a whole framed message to a blocking pipe."""
    view = memoryview(message)
    while view:
        view = view[os.write(fd, view) :]


def receive(fd: int, deadline: float | None = None) -> bytes:
    """One message body from ``fd``; :class:`WireError` on end of file, a bad length or the
    deadline (``time.monotonic()`` value) passing first."""
    header = _read_exactly(fd, 4, deadline)
    size = int.from_bytes(header, "big")
    if size > MAX_MESSAGE:
        raise WireError(f"message of {size} bytes is over the limit")
    return _read_exactly(fd, size, deadline)


def _read_exactly(fd: int, size: int, deadline: float | None) -> bytes:
    chunks = []
    while size:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise WireError("timeout")
        chunk = os.read(fd, min(size, 1 << 20))
        if not chunk:
            raise WireError("end of file")
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)
