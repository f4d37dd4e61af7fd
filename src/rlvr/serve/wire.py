"""The Tinker SDK's wire formats: its protobuf messages in, numpy arrays out, and back.

The message classes are the SDK's own generated module (``tinker.proto.tinker_public_pb2``), so the
server speaks exactly the version of the protocol that the pinned SDK speaks (docs/interop.md).
Everything arriving here is untrusted: sizes, dtypes, shapes and token ids are checked, and a
violation is a :class:`WireError` naming the datum and the field, answered to the client as a
request-level error (never a crash of the server, never a silent truncation).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np


class WireError(ValueError):
    """A request the server refuses: the message reaches the client as the request's error."""


def _pb() -> Any:
    try:
        from tinker.proto import tinker_public_pb2
    except ImportError as err:  # pragma: no cover - the serve extra installs it
        raise WireError(
            "rlvr serve needs the Tinker SDK's message definitions: pip install 'rlvr[serve]'"
        ) from err
    return tinker_public_pb2


_NUMPY_OF = {1: np.float32, 2: np.int64, 3: np.int32}  # DType enum → numpy (BFLOAT16 is never sent)


@dataclass
class Datum:
    """One training sequence: input tokens [N] and its loss inputs, each [N] (or [N, K])."""

    tokens: np.ndarray
    inputs: dict[str, np.ndarray] = field(default_factory=dict)


@dataclass
class ForwardBackward:
    model_id: str
    seq_id: int
    loss_fn: str
    loss_fn_config: dict[str, float | str]
    forward_only: bool
    data: list[Datum]


def _tensor(msg: Any, where: str, max_elements: int) -> np.ndarray:
    dtype = _NUMPY_OF.get(int(msg.dtype))
    if dtype is None:
        raise WireError(f"{where}: unsupported tensor dtype {int(msg.dtype)} (float32, int64 or int32)")
    shape = [int(d) for d in msg.shape]
    if any(d < 0 for d in shape) or int(np.prod(shape or [0])) > max_elements:
        raise WireError(f"{where}: shape {shape} is negative or over {max_elements} elements")
    kind = msg.WhichOneof("encoding")
    if kind == "dense":
        raw = msg.dense
        if len(raw) % np.dtype(dtype).itemsize or len(raw) // np.dtype(dtype).itemsize > max_elements:
            raise WireError(
                f"{where}: {len(raw)} bytes are not a whole number of {np.dtype(dtype).name} values"
            )
        arr = np.frombuffer(raw, dtype=dtype)
        if shape:
            if int(np.prod(shape)) != arr.size:
                raise WireError(f"{where}: shape {shape} does not hold its {arr.size} values")
            arr = arr.reshape(shape)
        return arr
    if kind == "sparse_csr":
        csr = msg.sparse_csr
        if len(shape) != 2:
            raise WireError(f"{where}: a sparse tensor needs a 2-D shape, got {shape}")
        values = np.frombuffer(csr.values, dtype=dtype)
        crow = np.frombuffer(csr.crow_indices, dtype=np.int64)
        col = np.frombuffer(csr.col_indices, dtype=np.int64)
        rows, cols = shape
        bad = (
            crow.size != rows + 1
            or col.size != values.size
            or (crow.size and (crow[0] != 0 or crow[-1] != values.size or np.any(np.diff(crow) < 0)))
            or (col.size and (col.min() < 0 or col.max() >= cols))
        )
        if bad:
            raise WireError(f"{where}: inconsistent sparse CSR indices")
        dense = np.zeros(shape, dtype=dtype)
        row_of = np.repeat(np.arange(rows), np.diff(crow))
        dense[row_of, col] = values
        return dense
    raise WireError(f"{where}: a tensor without data")


def decode_forward_backward(body: bytes, max_tokens: int) -> ForwardBackward:
    """A ``ForwardBackwardRequest`` (protobuf) as plain arrays; ``max_tokens`` bounds the request's
    total input tokens (and so every tensor in it)."""
    pb = _pb()
    msg = pb.ForwardBackwardRequest()
    try:
        msg.ParseFromString(body)
    except Exception as err:  # protobuf's DecodeError and friends
        raise WireError(f"forward_backward: not a ForwardBackwardRequest message ({err})") from err
    config: dict[str, float | str] = {key: float(value) for key, value in msg.loss_fn_config.items()}
    for key, value in msg.loss_fn_config_v2.items():
        config[key] = value.text if value.WhichOneof("value") == "text" else float(value.number)
    data, total = [], 0
    for i, datum in enumerate(msg.data):
        tokens = []
        for chunk in datum.model_input:
            kind = chunk.WhichOneof("chunk")
            if kind != "encoded_text":
                raise WireError(f"datum {i}: model_input chunk of type {kind!r} is not supported (text only)")
            raw = chunk.encoded_text.tokens
            if len(raw) % 4:
                raise WireError(f"datum {i}: token bytes are not whole int32 values")
            tokens.append(np.frombuffer(raw, dtype=np.int32))
        ids = np.concatenate(tokens).astype(np.int64) if tokens else np.zeros(0, dtype=np.int64)
        total += ids.size
        if total > max_tokens:
            raise WireError(f"forward_backward: more than {max_tokens} input tokens in one request")
        inputs = {
            name: _tensor(tensor, f"datum {i}: loss_fn_inputs[{name!r}]", max_tokens)
            for name, tensor in datum.loss_fn_inputs.items()
        }
        data.append(Datum(ids, inputs))
    return ForwardBackward(msg.model_id, int(msg.seq_id), msg.loss_fn, config, bool(msg.forward_only), data)


def _batched(values: list[np.ndarray], dtype: Any) -> Any:
    pb = _pb()
    arrays = [np.ascontiguousarray(v, dtype=dtype) for v in values]
    offsets = np.cumsum([0] + [a.nbytes for a in arrays]).astype(np.int64)
    proto_dtype = {np.float32: pb.DTYPE_FLOAT32, np.int64: pb.DTYPE_INT64}[dtype]
    return pb.BatchedTensor(
        data=b"".join(a.tobytes() for a in arrays), offsets=offsets.tobytes(), dtype=proto_dtype
    )


def encode_forward_backward_output(
    outputs: dict[str, list[np.ndarray]], metrics: dict[str, float], loss_fn: str
) -> bytes:
    """Per-datum outputs (each name → one 1-D float32 array per datum) and ``name:reduction``
    metrics as a ``ForwardBackwardOutput`` message."""
    pb = _pb()
    counts = {len(v) for v in outputs.values()}
    record = pb.ArrayRecord(type_tag="dict", num_datums=counts.pop() if counts else 0)
    for name, values in outputs.items():
        record.fields[name].CopyFrom(_batched(values, np.float32))
    msg = pb.ForwardBackwardOutput(loss_fn_output_type=loss_fn, loss_fn_outputs=[record])
    for key, value in metrics.items():
        msg.metrics[key] = float(value)
    return msg.SerializeToString()


@dataclass
class Sequence:
    tokens: list[int]
    logprobs: list[float]
    stopped: bool  # ended at a stop token or string (else: at max_tokens)


def encode_sample_response(sequences: list[Sequence], prompt_logprobs: list[float] | None = None) -> bytes:
    """Sampled sequences (and the prompt's logprobs, NaN where there is none) as a ``SampleResponse``."""
    pb = _pb()
    msg = pb.SampleResponse()
    for seq in sequences:
        msg.sequences.add(
            stop_reason=pb.STOP_REASON_STOP if seq.stopped else pb.STOP_REASON_LENGTH,
            tokens=np.asarray(seq.tokens, dtype=np.int32).tobytes(),
            logprobs=np.asarray(seq.logprobs, dtype=np.float32).tobytes(),
        )
    if prompt_logprobs is not None:
        msg.prompt_logprobs = np.asarray(prompt_logprobs, dtype=np.float32).tobytes()
    return msg.SerializeToString()


def prompt_tokens(prompt: Any, max_tokens: int) -> list[int]:
    """The token ids of a JSON ``ModelInput``:
    ``{"chunks": [{"type": "encoded_text", "tokens": [...]}]}``."""
    if not isinstance(prompt, dict) or not isinstance(prompt.get("chunks"), list):
        raise WireError("sample: prompt must be an object with a 'chunks' list")
    ids: list[int] = []
    for i, chunk in enumerate(prompt["chunks"]):
        if not isinstance(chunk, dict) or chunk.get("type", "encoded_text") != "encoded_text":
            kind = chunk.get("type") if isinstance(chunk, dict) else type(chunk).__name__
            raise WireError(f"sample: prompt chunk {i} of type {kind!r} is not supported (text only)")
        tokens = chunk.get("tokens")
        if not isinstance(tokens, list) or not all(
            isinstance(t, int) and not isinstance(t, bool) for t in tokens
        ):
            raise WireError(f"sample: prompt chunk {i} needs a list of integer 'tokens'")
        ids.extend(tokens)
        if len(ids) > max_tokens:
            raise WireError(f"sample: prompt longer than {max_tokens} tokens")
    return ids
