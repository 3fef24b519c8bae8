"""The events a Lambda `function` step is invoked with, and its answers: tensors as JSON, or
as one Arrow IPC stream (base64 in the JSON event) for large batches.

    {"format": "json",  "inputs": [{"name": "x", "datatype": "FP32", "shape": [2, 3], "data": [...]}]}
    {"format": "arrow", "arrow": "<base64 of an Arrow IPC stream>"}

In Arrow each tensor is a column, one row per row: a `[rows]` tensor a plain column, a
`[rows, k]` one a fixed-size list of k. A function answers in either form (`outputs` for
JSON), whichever it was sent.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import numpy as np

from sluice.codecs.arrow_numbers import from_numbers, text_column, to_numbers
from sluice.codecs.tensors import decode_tensor, encode_tensor
from sluice.domain.errors import BackendError, InvalidInput


def _json_default(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"{type(value).__name__} is not JSON")


def encode_event(arrays: dict[str, np.ndarray], *, arrow: bool) -> bytes:
    if arrow:
        return json.dumps({"format": "arrow", "arrow": base64.b64encode(to_arrow(arrays)).decode()}).encode()
    tensors = [encode_tensor(name, array) for name, array in arrays.items()]
    return json.dumps({"format": "json", "inputs": tensors}, default=_json_default).encode()


def to_arrow(arrays: dict[str, np.ndarray]) -> bytes:
    """The tensors as one Arrow IPC stream, a column each."""
    import pyarrow as pa

    columns = {}
    for name, array in arrays.items():
        flat = array.reshape(-1)
        values = text_column(flat.tolist()) if array.dtype == object else from_numbers(flat)
        if array.ndim == 1:
            columns[name] = values
        else:
            columns[name] = pa.FixedSizeListArray.from_arrays(values, int(np.prod(array.shape[1:])))
    table = pa.table(columns)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def from_arrow(data: bytes) -> dict[str, np.ndarray]:
    """An Arrow IPC stream's columns as arrays: `[rows]`, or `[rows, k]` for a list column."""
    import pyarrow as pa

    table = pa.ipc.open_stream(data).read_all()
    out: dict[str, np.ndarray] = {}
    for name in table.column_names:
        column = table.column(name).combine_chunks()
        if pa.types.is_fixed_size_list(column.type):
            values = column.flatten()
            flat = np.asarray(values.to_pylist(), dtype=object) if _text(values.type) else to_numbers(values)
            out[name] = flat.reshape(len(column), column.type.list_size)
        elif pa.types.is_list(column.type) or pa.types.is_large_list(column.type):
            rows = column.to_pylist()
            if any(r is None for r in rows) or len({len(r) for r in rows}) > 1:
                raise ValueError(f"column '{name}' has rows of different lengths")
            out[name] = np.asarray(rows, dtype=object if _text(column.type.value_type) else None)
        elif _text(column.type):
            out[name] = np.asarray(column.to_pylist(), dtype=object)
        else:
            out[name] = to_numbers(column)
    return out


def _text(kind: Any) -> bool:
    import pyarrow as pa

    return bool(pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_binary(kind))


def decode_answer(raw: bytes, *, what: str) -> dict[str, np.ndarray]:
    """A function's answer as arrays; BackendError saying what is wrong with it (`what` names
    the function) where it is not one of the two forms."""
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        raise BackendError(f"{what} answered something that is not JSON") from None
    except RecursionError:  # nested deeper than the parser's stack: no tensor nests so
        raise BackendError(f"{what} answered JSON nested too deep to read") from None
    if not isinstance(body, dict):
        raise BackendError(f"{what} answered {type(body).__name__}, not an object with 'outputs' (or 'arrow')")
    if "arrow" in body:
        try:
            return from_arrow(base64.b64decode(body["arrow"], validate=True))
        except Exception as exc:  # pyarrow's and base64's errors alike: a malformed answer
            raise BackendError(f"{what} answered an 'arrow' that is not a base64 Arrow IPC stream of tensors ({type(exc).__name__})") from None
    outputs = body.get("outputs")
    if not isinstance(outputs, list):
        raise BackendError(f"{what} answered no 'outputs' list (nor 'arrow')")
    arrays: dict[str, np.ndarray] = {}
    for i, tensor in enumerate(outputs):
        if not isinstance(tensor, dict) or not isinstance(tensor.get("name"), str) or not isinstance(tensor.get("shape"), list):
            raise BackendError(f"{what} answered outputs[{i}], which is not a tensor {{name, datatype, shape, data}}")
        name = tensor["name"]
        try:
            arrays[name] = decode_tensor(name, str(tensor.get("datatype")), tensor["shape"], tensor.get("data"), field=f"outputs.{name}", exact=True, role="output")
        except InvalidInput as exc:
            raise BackendError(f"{what} answered a malformed output: {exc.message}") from None
        except RecursionError:
            raise BackendError(f"{what} answered output '{name}' nested too deep to read") from None
    return arrays
