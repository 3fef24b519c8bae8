"""The binary tensor extension of the Open Inference Protocol's REST API (Triton's, and what
`tritonclient.http` speaks by default): a JSON header, then raw tensor bytes.

A request says its JSON header's length in the `Inference-Header-Content-Length` header; each
binary input says its byte count in `parameters.binary_data_size`, and its bytes follow the
header in the order of `inputs`. Numbers are little-endian and row-major; a BYTES element is a
4-byte little-endian length, then its bytes. A response does the same for the outputs a request
asked to have in binary (`parameters.binary_data` per output, `parameters.binary_data_output`
for all of them).
"""

from __future__ import annotations

import math
import struct
from typing import TYPE_CHECKING, Any

import numpy as np

from sluice.codecs.datatypes import V2_TO_NUMPY
from sluice.codecs.tensors import decode_tensor, shaped
from sluice.domain.errors import BadRequest, InvalidInput
from sluice.domain.requests import Tensor
from sluice.domain.values import decimal

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

HEADER = "inference-header-content-length"
_LENGTH = struct.Struct("<I")


def split_body(raw: bytes, declared: str) -> tuple[bytes, memoryview]:
    """The JSON header and the binary tail of a body whose header length is `declared`: a
    count of 1 or more. 0 is refused naming the header: a header of no bytes holds no request
    (Triton reads 0 as its raw binary form, the whole body one input's bytes with no JSON at
    all, which is not served here)."""
    length = decimal(declared)
    if length is None:
        raise BadRequest("Inference-Header-Content-Length must be a non-negative integer", field=HEADER)
    if not length:
        raise BadRequest(
            "Inference-Header-Content-Length is 0: it is the JSON header's length in bytes, 1 or more"
            " (a body of raw bytes with no JSON header is not taken; leave the header out for a body of JSON alone)",
            field=HEADER,
        )
    if length > len(raw):
        raise BadRequest(
            f"Inference-Header-Content-Length is {length} but the body has {len(raw)} bytes", field=HEADER
        )
    view = memoryview(raw)
    return raw[:length], view[length:]


def json_tensors(inputs: Sequence[Any]) -> tuple[Tensor, ...]:
    """A v2 request of JSON alone: its inputs as tensors whose data is their JSON `data`, each
    refused where it says `binary_data_size` (`json_alone`)."""
    for tensor in inputs:
        json_alone(tensor.name, tensor.parameters)
    return tuple(Tensor(t.name, t.datatype, tuple(t.shape), t.data) for t in inputs)


def json_alone(name: Any, parameters: Any) -> None:
    """An input of a v2 request of JSON alone (a body without Inference-Header-Content-Length, a
    WebSocket message, a stream's record): one that says `parameters.binary_data_size` is
    refused naming it (its bytes would follow a binary request's JSON header, which such a
    request has none of; Triton refuses it too), never read from its `data` as if the parameter
    were not there."""
    if type(parameters) is dict and parameters.get("binary_data_size") is not None:
        raise InvalidInput(
            f"input '{name}' says binary_data_size, but the request is JSON alone: binary data follows a JSON "
            "header whose length the Inference-Header-Content-Length header gives",
            field=f"inputs.{name}.parameters.binary_data_size",
        )


def decode_inputs(inputs: Sequence[Any], tail: memoryview) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """Arrays (and the datatypes their senders declared) from the inputs of a binary request:
    each with `binary_data_size` takes its bytes from `tail` in turn, the rest carry JSON data."""
    arrays: dict[str, np.ndarray] = {}
    datatypes: dict[str, str] = {}
    offset = 0
    for tensor in inputs:
        name, where = tensor.name, f"inputs.{tensor.name}"
        if name in arrays:
            raise InvalidInput(f"input '{name}' is given twice", field=where)
        size = (tensor.parameters or {}).get("binary_data_size")
        if size is None:
            arrays[name] = decode_tensor(name, tensor.datatype, tensor.shape, tensor.data, field=where)
        else:
            if type(size) is not int or size < 0:
                raise InvalidInput(
                    f"binary_data_size of input '{name}' must be a non-negative integer",
                    field=f"{where}.parameters.binary_data_size",
                )
            if tensor.data is not None:
                raise InvalidInput(f"input '{name}' has both data and binary_data_size", field=f"{where}.data")
            left = len(tail) - offset
            if size > left:
                raise InvalidInput(
                    f"input '{name}' says binary_data_size {size} but only {left} bytes of the body remain",
                    field=f"{where}.parameters.binary_data_size",
                )
            arrays[name] = from_bytes(name, tensor.datatype, tensor.shape, tail[offset : offset + size], field=where)
            offset += size
        datatypes[name] = tensor.datatype
    if offset != len(tail):
        raise BadRequest(
            f"{len(tail) - offset} bytes follow the last binary input: binary_data_size and the body disagree",
            field="body",
        )
    return arrays, datatypes


def from_bytes(name: str, datatype: str, shape: list[int], chunk: memoryview, *, field: str) -> np.ndarray:
    """One input's raw bytes as an array of `shape`; the byte count must be what the shape needs."""
    dtype = V2_TO_NUMPY.get(datatype)
    if dtype is None:
        raise InvalidInput(f"datatype {datatype!r} is not one of {', '.join(V2_TO_NUMPY)}", field=f"{field}.datatype")
    if any(type(d) is not int or d < 0 for d in shape):
        raise InvalidInput("shape must be a list of non-negative integers", field=f"{field}.shape")
    count = math.prod(shape)
    if datatype == "BYTES":
        return shaped(_strings(name, chunk, count, field=field), shape, name=name, field=field)
    if len(chunk) != count * dtype.itemsize:
        raise InvalidInput(
            f"input '{name}' has {len(chunk)} bytes but shape {shape} of {datatype} needs {count * dtype.itemsize}",
            field=f"{field}.parameters.binary_data_size",
        )
    return shaped(raw_values(name, datatype, chunk, field=field), shape, name=name, field=field)


def raw_values(name: str, datatype: str, raw: bytes | memoryview, *, field: str) -> np.ndarray:
    """Little-endian numbers as a flat array: a view of `raw` where aligned (`aligned`), else a
    copy. A BOOL byte must be 0 or 1, as JSON's must: NumPy would take 2 as a bool that a
    model's `Not` turns into 3, still true."""
    dtype = V2_TO_NUMPY[datatype]
    array = aligned(np.frombuffer(raw, dtype=dtype.newbyteorder("<")).astype(dtype, copy=False))
    if datatype == "BOOL" and array.size and array.view(np.uint8).max() > 1:
        raise InvalidInput(f"BOOL input '{name}' holds bytes other than 0 (false) and 1 (true)", field=field)
    return array


def aligned(array: np.ndarray) -> np.ndarray:
    """`array`, copied where its values are not aligned to their size: where a tensor's raw
    bytes sit in a body or a message decides, and tritonclient's gRPC messages put them off by
    a byte or two as often as not. ONNX Runtime reads a misaligned 1 MiB FP32 tensor in ~250 µs
    against ~60 µs aligned; the copy takes ~25 µs (from the heap: `sluice.cli.malloc`)."""
    return array if array.flags.aligned else array.copy()


def _strings(name: str, chunk: memoryview, count: int, *, field: str) -> np.ndarray:
    if count * _LENGTH.size > len(chunk):  # each element takes its length's 4 bytes: nothing made for a shape the bytes cannot hold
        raise InvalidInput(f"BYTES input '{name}' of {count} elements needs at least {count * _LENGTH.size} bytes; it has {len(chunk)}", field=field)
    out = np.empty(count, dtype=object)
    at, end = 0, len(chunk)
    for i in range(count):
        if at + 4 > end:
            raise InvalidInput(f"BYTES input '{name}' ends after {i} of {count} elements", field=field)
        (length,) = _LENGTH.unpack_from(chunk, at)
        at += 4
        if at + length > end:
            raise InvalidInput(f"element {i} of BYTES input '{name}' runs past its binary_data_size", field=field)
        try:
            # JSON strings reach a model as str: the same for binary ones.
            out[i] = str(chunk[at : at + length], "utf-8")
        except UnicodeDecodeError:
            raise InvalidInput(f"element {i} of BYTES input '{name}' is not UTF-8", field=field) from None
        at += length
    if at != end:
        raise InvalidInput(f"BYTES input '{name}' has {end - at} bytes after its {count} elements", field=field)
    return out


def to_bytes(array: np.ndarray | list[Any]) -> bytes:
    """An output's raw bytes: little-endian row-major numbers, or length-prefixed strings (from
    an array, or the flat list of strings a BYTES output's JSON `data` is)."""
    if isinstance(array, list) or array.dtype == object or array.dtype.kind in "US":
        parts = []
        for item in array if isinstance(array, list) else array.reshape(-1).tolist():
            data = item if isinstance(item, bytes) else str(item).encode()
            parts += (_LENGTH.pack(len(data)), data)
        return b"".join(parts)
    return np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<")).tobytes()


def _flag(value: Any, field: str, unset: bool | None = False) -> bool | None:
    """A boolean parameter: JSON true or false (`unset` where absent); anything else, such as
    the text "false" (which would read as true), is refused naming it."""
    if value is None:
        return unset
    if type(value) is not bool:
        raise BadRequest(f"{field.rpartition('.')[2]} is true or false, not {value!r:.40}", field=field)
    return value


def binary_outputs(parameters: dict[str, Any] | None, outputs: Iterable[Any] | None) -> set[str] | bool:
    """Which outputs a request wants in binary: True for all of them, else a set of names
    (empty for none). A requested output's own `binary_data` overrides `binary_data_output`."""
    every = _flag((parameters or {}).get("binary_data_output"), "parameters.binary_data_output")
    named: set[str] = set()
    off: set[str] = set()
    for out in outputs or ():
        flag = _flag((out.parameters or {}).get("binary_data"), f"outputs.{out.name}.parameters.binary_data", unset=None)
        if flag is None:
            if every:
                named.add(out.name)
        elif flag:
            named.add(out.name)
        else:
            off.add(out.name)
    if every and not off:
        return True
    return named
