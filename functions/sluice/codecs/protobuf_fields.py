"""Protobuf's wire format walked field by field, without the message's schema: for what reads
a few fields of large serialized messages in place (an inference request's raw tensor
contents, an ONNX model's graph inputs) and skips the rest by their lengths, never copying it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterator

LENGTH_DELIMITED = 2  # wire type of strings, bytes and nested messages


def fields(data: bytes, start: int = 0, end: int | None = None) -> Iterator[tuple[int, int, int, int, int]]:
    """Each field of the message at data[start:end], in order: (number, wire type, where the
    field starts, where its value starts, where it ends). A length-delimited value's span is
    its bytes (after the length); another's, its encoding. A group, a field running past the
    message or a varint past 64 bits: ValueError; one cut short inside a varint: IndexError."""
    at, end = start, len(data) if end is None else end
    while at < end:
        begin = at
        key, at = varint(data, at)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, (_, at) = at, varint(data, at)
        elif wire == 1:
            value, at = at, at + 8
        elif wire == 5:
            value, at = at, at + 4
        elif wire == LENGTH_DELIMITED:
            size, value = varint(data, at)
            at = value + size
        else:
            raise ValueError(f"wire type {wire}: a group, or no field at all")
        if at > end:
            raise ValueError("a field past its message")
        yield number, wire, begin, value, at


def varint(data: bytes, at: int) -> tuple[int, int]:
    """The base-128 varint at `at`, and where it ends."""
    value = shift = 0
    while True:
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, at
        shift += 7
        if shift > 63:
            raise ValueError("a varint past 64 bits")
