"""Inference messages read and written around their tensors' bytes, never through them.

Parsed whole, a `ModelInferRequest` copies each raw input into the parsed message and again
into a Python `bytes` when the field is read (a 1 MiB tensor: two more megabytes moved, and
~0.5 ms, before the model sees it). Here the message's top-level fields are walked instead:
`raw_input_contents` (field 7) become views of the bytes gRPC handed over, and the rest, a
few hundred bytes, is parsed as usual. An answer's raw outputs are written once, straight from
the arrays into the message's bytes (`InferReply`), not copied into a message and out again.
Anything this walk does not expect (a group, a truncated field) is left to protobuf's own
parser, which raises as before.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np
from tritonclient.grpc import service_pb2 as pb

from sluice.codecs.binary import to_bytes
from sluice.codecs.protobuf_fields import LENGTH_DELIMITED, fields
from sluice.domain.errors import BadRequest

RAW_INPUT_CONTENTS = 7  # ModelInferRequest
RAW_OUTPUT_CONTENTS_TAG = b"\x32"  # ModelInferResponse field 6, length-delimited
INFER_RESPONSE_TAG = b"\x12"  # ModelStreamInferResponse field 2, length-delimited


def not_a(kind: str, exc: Exception) -> BadRequest:
    """Bytes that are no `kind` message: INVALID_ARGUMENT naming the body, on every RPC alike
    (grpcio left alone would answer UNKNOWN, naming its exception)."""
    return BadRequest(f"the request is not a {kind}: {str(exc)[:200] or 'it does not parse'}", field="body")


def too_large(size: int, limit: int) -> Any:
    from sluice.domain.errors import PayloadTooLarge

    return PayloadTooLarge(f"the request is {size} bytes, over the {limit} a request may be (SLUICE_MAX_REQUEST_BYTES)", field="body")


def read_request(message_type: Any, limit: int | None = None) -> Any:
    """The deserializer of a call whose request is a `message_type`: one that does not parse
    is `not_a` it (the server answers it as the call's error)."""
    from google.protobuf.message import DecodeError

    def read(data: bytes) -> Any:
        if limit is not None and len(data) > limit:
            raise too_large(len(data), limit)
        try:
            return message_type.FromString(data)
        except DecodeError as exc:
            raise not_a(message_type.DESCRIPTOR.name, exc) from None

    return read


class InferRequest:
    """A `ModelInferRequest` whose `raw_input_contents` are views of the bytes it came in;
    every other field is the parsed message's."""

    __slots__ = ("malformed", "message", "raw_input_contents")

    def __init__(self, message: Any, raw_input_contents: list[memoryview], malformed: BadRequest | None = None) -> None:
        self.message = message
        self.raw_input_contents = raw_input_contents
        # Why the bytes are no ModelInferRequest (then `message` is an empty one): each of a
        # stream's messages is answered alone, so this is its answer, not the call's.
        self.malformed = malformed

    def __getattr__(self, name: str) -> Any:
        return getattr(self.message, name)


def read_infer_request(data: bytes, limit: int | None = None) -> InferRequest:
    """The request's deserializer (unary and stream): raw contents left in place."""
    from google.protobuf.message import DecodeError

    if limit is not None and len(data) > limit:  # unparsed: only its names, for the answer
        said = pb.ModelInferRequest()
        try:
            for number, wire, start, _value, end in fields(data):
                if number in (1, 2, 3) and wire == LENGTH_DELIMITED:
                    said.MergeFromString(bytes(memoryview(data)[start:end]))
        except (IndexError, ValueError, DecodeError):
            pass
        return InferRequest(said, [], malformed=too_large(len(data), limit))
    try:
        try:
            rest, raws = _split(data)
        except (IndexError, ValueError):  # not what the walk expects: protobuf says what is wrong
            message = pb.ModelInferRequest.FromString(data)
            return InferRequest(message, [memoryview(raw) for raw in message.raw_input_contents])
        return InferRequest(pb.ModelInferRequest.FromString(rest), raws)
    except DecodeError as exc:  # answered by the handler, as that request's error
        return InferRequest(pb.ModelInferRequest(), [], malformed=not_a("ModelInferRequest", exc))


def _split(data: bytes) -> tuple[bytes, list[memoryview]]:
    """The message's bytes less its raw contents (fields in their order: parsing them is
    parsing the message), and the raw contents as views, in their order."""
    view = memoryview(data)
    raws: list[memoryview] = []
    kept: list[memoryview] = []
    for number, wire, start, value, end in fields(data):
        if number == RAW_INPUT_CONTENTS and wire == LENGTH_DELIMITED:
            raws.append(view[value:end])
        else:
            kept.append(view[start:end])
    if not raws:
        return data, raws
    return b"".join(kept), raws


def _length(size: int) -> bytes:
    out = bytearray()
    while size >= 0x80:
        out.append((size & 0x7F) | 0x80)
        size >>= 7
    out.append(size)
    return bytes(out)


class InferReply:
    """A `ModelInferResponse` without its raw outputs, and those outputs as buffers: written
    into the answer's bytes once, as gRPC sends it."""

    __slots__ = ("_parts", "message", "raws")

    def __init__(self, message: Any, arrays: list[Any]) -> None:
        self.message = message
        self.raws = [_buffer(array) for array in arrays]
        self._parts: list[Any] | None = None

    def byte_size(self) -> int:
        return sum(len(part) for part in self.parts())

    def parts(self) -> list[Any]:
        """The answer's bytes in pieces (the message's own fields, then each raw output with its
        tag and length), made once: the message is not to change after."""
        if self._parts is None:
            parts: list[Any] = [self.message.SerializeToString()]
            for raw in self.raws:
                parts += (RAW_OUTPUT_CONTENTS_TAG, _length(len(raw)), raw)
            self._parts = parts
        return self._parts

    def serialize(self) -> bytes:
        return b"".join(self.parts())

    def as_message(self) -> Any:
        """The whole `ModelInferResponse` (a copy of every output: for callers that want one)."""
        message = pb.ModelInferResponse()
        message.CopyFrom(self.message)
        message.raw_output_contents.extend(bytes(raw) for raw in self.raws)
        return message


def _buffer(array: Any) -> Any:
    """An output's raw bytes as a buffer: a little-endian contiguous array is its own."""
    if isinstance(array, np.ndarray) and array.dtype.kind in "biuf" and array.flags.c_contiguous and _little(array.dtype):
        return memoryview(array.reshape(-1)).cast("B")
    return to_bytes(array)


def _little(dtype: np.dtype) -> bool:
    order = dtype.byteorder
    return order in "<|" or (order == "=" and sys.byteorder == "little")


def write_infer_response(reply: InferReply) -> bytes:
    """The unary answer's serializer."""
    return reply.serialize()


def write_stream_response(item: Any) -> bytes:
    """A stream's answer: an `InferReply` inside `ModelStreamInferResponse.infer_response`, or
    a message (an error) as it is."""
    if not isinstance(item, InferReply):
        return item.SerializeToString()
    parts = item.parts()
    size = sum(len(part) for part in parts)
    return b"".join([INFER_RESPONSE_TAG, _length(size), *parts])
