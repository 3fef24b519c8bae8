"""Triton's HTTP/REST inference bodies: v2 JSON, or a JSON header followed by raw tensor bytes.

The same bytes go to Triton's own HTTP endpoint (the header size in the
`Inference-Header-Content-Length` header) and to a SageMaker endpoint running the Triton
container, where the header size rides in the content type:
`application/vnd.sagemaker-triton.binary+json;json-header-size=N`. Pure functions: the
runtimes and the batch scorer share them.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import orjson

from sluice.codecs.datatypes import V2_TO_NUMPY, v2_of_numpy
from sluice.domain.errors import BackendError, InvalidInput
from sluice.domain.signature import DYNAMIC

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from sluice.domain.signature import Signature

JSON_CONTENT_TYPE = "application/json"
BINARY_JSON_CONTENT_TYPE = "application/vnd.sagemaker-triton.binary+json"
HEADER_SIZE_PARAMETER = "json-header-size"
# Datatypes Triton only takes as binary data (JSON has no half-precision numbers).
_BINARY_ONLY = frozenset({"FP16", "BF16"})
_LENGTH = struct.Struct("<I")


@dataclass(frozen=True, slots=True)
class TritonBody:
    """An encoded request: the bytes, and how many of them are the JSON header."""

    body: bytes
    header_size: int | None  # None: the whole body is JSON

    @property
    def content_type(self) -> str:
        if self.header_size is None:
            return JSON_CONTENT_TYPE
        return binary_json_type(self.header_size)


def binary_json_type(header_size: int | str) -> str:
    """SageMaker's Triton content type of a binary body whose JSON header is `header_size` bytes."""
    return f"{BINARY_JSON_CONTENT_TYPE};{HEADER_SIZE_PARAMETER}={header_size}"


def _bytes_element(value: Any) -> bytes:
    if isinstance(value, bytes):
        return value
    return str(value).encode("utf-8")


def serialize_bytes_tensor(array: np.ndarray) -> bytes:
    """BYTES elements as Triton sends them: a little-endian uint32 length, then the bytes."""
    parts = []
    for item in array.reshape(-1).tolist():
        data = _bytes_element(item)
        parts.append(_LENGTH.pack(len(data)))
        parts.append(data)
    return b"".join(parts)


def deserialize_bytes_tensor(data: bytes, count: int) -> np.ndarray:
    if count * _LENGTH.size > len(data):  # each element takes its length's 4 bytes: nothing made for a shape the bytes cannot hold
        raise BackendError("a BYTES output is shorter than its element count")
    out = np.empty(count, dtype=object)
    offset = 0
    for i in range(count):
        if offset + 4 > len(data):
            raise BackendError("a BYTES output is shorter than its element count")
        (length,) = _LENGTH.unpack_from(data, offset)
        offset += 4
        out[i] = data[offset : offset + length].decode("utf-8", errors="replace")
        offset += length
    return out


def _raw(array: np.ndarray, datatype: str) -> bytes | np.ndarray:
    """A tensor's bytes on the wire: for numbers, the little-endian row-major array itself (no
    copy when it already is one), which the body's one join copies."""
    if datatype == "BYTES":
        return serialize_bytes_tensor(array)
    return np.ascontiguousarray(array, dtype=V2_TO_NUMPY[datatype].newbyteorder("<"))


def _json_data(array: np.ndarray, datatype: str) -> Any:
    if datatype == "BYTES":
        return [
            item.decode("utf-8") if isinstance(item, bytes) else str(item)
            for item in array.reshape(-1).tolist()
        ]
    # orjson writes C-contiguous NumPy arrays natively, far faster than .tolist().
    return np.ascontiguousarray(array.reshape(-1), dtype=V2_TO_NUMPY[datatype])


def encode_request(
    inputs: Mapping[str, np.ndarray],
    *,
    outputs: Sequence[str] | None = None,
    binary_inputs: bool = False,
    binary_outputs: bool = False,
    binary_min_bytes: int | None = None,
) -> TritonBody:
    """A v2 inference request; tensors as raw bytes after the JSON header when `binary_inputs`,
    or, given `binary_min_bytes`, each tensor of at least that many bytes (`nbytes`).

    FP16 always travels as binary data. `binary_outputs` asks the server to answer the same way.
    """
    entries: list[dict[str, Any]] = []
    chunks: list[bytes | np.ndarray] = []
    for name, array in inputs.items():
        try:
            datatype = v2_of_numpy(array.dtype)
        except TypeError:
            raise InvalidInput(f"input '{name}' has dtype {array.dtype}, which Triton cannot take", field=f"inputs.{name}") from None
        entry: dict[str, Any] = {"name": name, "shape": list(array.shape), "datatype": datatype}
        if (
            binary_inputs
            or datatype in _BINARY_ONLY
            or (binary_min_bytes is not None and array.nbytes >= binary_min_bytes)
        ):
            raw = _raw(array, datatype)
            entry["parameters"] = {"binary_data_size": raw.nbytes if isinstance(raw, np.ndarray) else len(raw)}
            chunks.append(raw)
        else:
            entry["data"] = _json_data(array, datatype)
        entries.append(entry)
    request: dict[str, Any] = {"inputs": entries}
    if outputs:
        request["outputs"] = [
            {"name": name, "parameters": {"binary_data": binary_outputs}} for name in outputs
        ]
    elif binary_outputs:
        request["parameters"] = {"binary_data_output": True}
    header = orjson.dumps(request, option=orjson.OPT_SERIALIZE_NUMPY)
    if not chunks:
        return TritonBody(header, None)
    return TritonBody(b"".join([header, *chunks]), len(header))  # the tensors' one copy


def header_size_of(content_type: str | None) -> int | None:
    """The JSON header size a binary+json content type names; None for plain JSON."""
    if not content_type:
        return None
    media, _, params = content_type.partition(";")
    if media.strip().lower() != BINARY_JSON_CONTENT_TYPE:
        return None
    for param in params.split(";"):
        key, _, value = param.partition("=")
        if key.strip().lower() == HEADER_SIZE_PARAMETER:
            try:
                return int(value.strip())
            except ValueError:
                break
    raise BackendError(f"the endpoint answered {BINARY_JSON_CONTENT_TYPE} without a valid {HEADER_SIZE_PARAMETER}")


def _output_array(
    entry: dict[str, Any], binary: memoryview, offset: int, *, copy: bool, dtypes: Mapping[str, np.dtype]
) -> tuple[np.ndarray, int]:
    name = entry.get("name")
    datatype = entry.get("datatype")
    shape = entry.get("shape")
    if not isinstance(name, str) or datatype not in dtypes or not isinstance(shape, list):
        raise BackendError("the server answered an output without a usable name, datatype or shape")
    if not all(type(d) is int and d >= 0 for d in shape):
        raise BackendError(f"output '{name}' has shape {str(shape)[:80]}, not a list of sizes")
    count = math.prod(shape)
    size = (entry.get("parameters") or {}).get("binary_data_size")
    if size is not None:
        raw = binary[offset : offset + size]
        if len(raw) != size:
            raise BackendError(f"output '{name}' is shorter than its binary_data_size")
        offset += size
        if datatype == "BYTES":
            array = deserialize_bytes_tensor(bytes(raw), count)
        else:
            if size % dtypes[datatype].itemsize:
                raise BackendError(f"output '{name}' has {size} bytes, not a whole number of {datatype} values")
            wire = np.frombuffer(raw, dtype=dtypes[datatype].newbyteorder("<"))
            if copy:
                # One copy out of the body, into a writable array in native byte order.
                array = wire.astype(dtypes[datatype], copy=True)
            else:
                array = _view(wire, dtypes[datatype])
    else:
        data = entry.get("data")
        if data is None:
            raise BackendError(f"output '{name}' came back without data")
        if datatype == "BYTES":
            array = np.array(data, dtype=object).reshape(-1)
        else:
            array = np.asarray(data, dtype=dtypes[datatype])
    if array.size != count:
        raise BackendError(f"output '{name}' has {array.size} values for shape {shape}")
    return array.reshape(shape), offset


def _view(wire: np.ndarray, native: np.dtype) -> np.ndarray:
    """The output's numbers read in place in the body, read-only; copied (and then made read-only
    too, so every output behaves alike) only where the bytes sit at an offset their type cannot
    be read at, or are not in the machine's byte order."""
    array = wire if wire.flags.aligned and wire.dtype == native else wire.astype(native, copy=True)
    array.flags.writeable = False  # a view over bytes already is; over a bytearray it would not be
    return array


def decode_response(
    body: bytes,
    *,
    header_size: int | None = None,
    copy: bool = True,
    dtypes: Mapping[str, np.dtype] = V2_TO_NUMPY,
) -> dict[str, np.ndarray]:
    """Named arrays from a v2 response, JSON or JSON header + binary outputs.

    `copy`: binary numeric outputs are copied into writable arrays (the default), or, False,
    read in place as read-only views over `body` (see `_view`). `dtypes`: the datatypes taken
    and their NumPy dtypes (a caller that has `ml_dtypes` may add BF16)."""
    end = len(body) if header_size is None else header_size
    if end > len(body) or end < 0:
        raise BackendError("the response's JSON header size exceeds its body")
    try:
        header = orjson.loads(body[:end])
    except orjson.JSONDecodeError:
        header = _with_non_finite(bytes(body[:end]))
    if not isinstance(header, dict) or not isinstance(header.get("outputs"), list):
        raise BackendError("the server answered without an 'outputs' list")
    binary = memoryview(body)[end:]
    offset = 0
    result: dict[str, np.ndarray] = {}
    for entry in header["outputs"]:
        if not isinstance(entry, dict):
            raise BackendError("the server answered an output that is not an object")
        array, offset = _output_array(entry, binary, offset, copy=copy, dtypes=dtypes)
        result[entry["name"]] = array
    return result


def _with_non_finite(text: bytes) -> Any:
    """A v2 answer orjson refuses: one holding NaN, Infinity or -Infinity as Triton writes them
    in JSON (a model's log(0), an overflow), read by a parser that takes those tokens. Such an
    answer was a 502, and an asynchronous one's result failed."""
    from sluice.codecs.json_text import NestedTooDeep, loads_as_python

    if not any(token in text for token in (b"NaN", b"Infinity")):
        raise BackendError("the server answered with a body that is not v2 JSON")
    try:
        return loads_as_python(text)
    except (ValueError, NestedTooDeep, RecursionError):
        raise BackendError("the server answered with a body that is not v2 JSON") from None


def decode_sagemaker_response(body: bytes, content_type: str | None) -> dict[str, np.ndarray]:
    """A SageMaker Triton endpoint's answer, in either form its content type says."""
    return decode_response(body, header_size=header_size_of(content_type))


# Shapes on the wire ------------------------------------------------------------------------
# Triton cannot declare a batched tensor without dimensions beyond the batch axis, so a
# tensor the model sees as [batch] is declared `dims: [1]` with `reshape: { shape: [] }` and
# travels as [batch, 1]. Repositories sluice builds follow this rule; these helpers undo it.


def batchable(signature: Signature) -> bool:
    """Whether every tensor has a leading dynamic axis Triton can batch on."""
    specs = (*signature.inputs, *signature.outputs)
    return bool(specs) and all(len(s.shape) >= 1 and s.shape[0] == DYNAMIC for s in specs)


def config_dims(shape: Sequence[int], *, batched: bool) -> tuple[tuple[int, ...], tuple[int, ...] | None]:
    """A tensor's `dims` in config.pbtxt, and its `reshape` when the model sees other dims."""
    dims = tuple(shape[1:]) if batched else tuple(shape)
    if batched and not dims:
        return (1,), ()
    return dims, None


def inputs_for_wire(
    inputs: Mapping[str, np.ndarray], signature: Signature, *, batched: bool
) -> dict[str, np.ndarray]:
    """Give [batch] inputs the trailing axis their `dims: [1]` declaration expects."""
    if not batched:
        return dict(inputs)
    out = {}
    for name, array in inputs.items():
        spec = signature.input(name)
        if spec is not None and len(spec.shape) == 1 and array.ndim == 1:
            array = array[:, np.newaxis]
        out[name] = array
    return out


def outputs_from_wire(outputs: Mapping[str, np.ndarray], signature: Signature) -> dict[str, np.ndarray]:
    """Drop the trailing axis of outputs the signature declares one rank lower."""
    out = {}
    for name, array in outputs.items():
        spec = signature.output(name)
        if spec is not None and array.ndim == len(spec.shape) + 1 and array.shape[-1] == 1:
            array = array.reshape(array.shape[:-1])
        out[name] = array
    return out
