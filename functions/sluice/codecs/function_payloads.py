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


def from_arrow(data: bytes, rows: int | None = None) -> dict[str, np.ndarray]:
    """An Arrow IPC stream's columns as arrays: `[rows]`, or `[rows, k]` for a list column.

    Read as sent, never made larger than it came: a stream whose buffers are compressed (LZ4,
    ZSTD: a few kilobytes may unpack to gigabytes) or a column dictionary- or run-end-encoded
    (a few values repeated into any number of rows) is refused before anything is unpacked or
    expanded, as is one of other than `rows` rows where the caller knows how many it sent."""
    import pyarrow as pa

    if compressed_ipc(data):
        raise ValueError("the stream's buffers are compressed: answer an uncompressed stream")
    table = pa.ipc.open_stream(data).read_all()
    if rows is not None and table.num_rows != rows:
        raise ValueError(f"the stream holds {table.num_rows} rows for the {rows} sent")
    for field in table.schema:
        if not _plain(field.type):
            raise ValueError(f"column '{field.name}' is {field.type}: answer numbers, booleans or text, or lists of them, as they are")
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


def compressed_ipc(data: bytes) -> bool:
    """Whether any record batch of an Arrow IPC stream (a dictionary's included) says its body is
    compressed, read from each message's metadata alone (a flatbuffer: `Message.header` a
    `RecordBatch`, or a `DictionaryBatch` holding one, whose field 3 is `compression`), before
    any body is unpacked."""
    import pyarrow as pa

    reader = pa.ipc.MessageReader.open_stream(pa.BufferReader(data))
    while True:
        try:
            message = reader.read_next_message()
        except StopIteration:
            return False
        if message is None:
            return False
        meta = message.metadata.to_pybytes()
        root = _u32(meta, 0)
        kind = meta[root + _slot(meta, root, 1)] if _slot(meta, root, 1) else 0  # Message.header_type
        batch = _table(meta, root, 2) if kind in (2, 3) else None  # 2: DictionaryBatch, 3: RecordBatch
        if kind == 2 and batch is not None:
            batch = _table(meta, batch, 1)  # DictionaryBatch.data
        if batch is not None and _slot(meta, batch, 3):
            return True


def _plain(kind: Any, top: bool = True) -> bool:
    """A type whose values take the bytes they are sent in: numbers, booleans, text, and plain
    lists of them (not a dictionary, a run-end encoding, a list view or a struct, whose few
    values may stand for any number of rows; nor nulls in a list, which take no bytes at all:
    a column of nulls alone is one a row, its rows checked)."""
    import pyarrow as pa

    types = pa.types
    if types.is_list(kind) or types.is_large_list(kind) or types.is_fixed_size_list(kind):
        return _plain(kind.value_type, top=False)
    return bool(types.is_integer(kind) or types.is_floating(kind) or types.is_boolean(kind) or (top and types.is_null(kind)) or _text(kind))


def _u32(buf: bytes, at: int) -> int:
    return int.from_bytes(buf[at : at + 4], "little")


def _slot(buf: bytes, table: int, field: int) -> int:
    """The offset of a flatbuffer table's `field` from the table (0: absent)."""
    vtable = table - int.from_bytes(buf[table : table + 4], "little", signed=True)
    size = int.from_bytes(buf[vtable : vtable + 2], "little")
    entry = 4 + 2 * field
    return int.from_bytes(buf[vtable + entry : vtable + entry + 2], "little") if entry + 2 <= size else 0


def _table(buf: bytes, table: int, field: int) -> int | None:
    """Where the table a flatbuffer table's `field` points at lies (None: absent)."""
    slot = _slot(buf, table, field)
    return table + slot + _u32(buf, table + slot) if slot else None


def _text(kind: Any) -> bool:
    import pyarrow as pa

    return bool(pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_binary(kind))


def decode_answer(raw: bytes, *, what: str, rows: int | None = None) -> dict[str, np.ndarray]:
    """A function's answer as arrays; BackendError saying what is wrong with it (`what` names
    the function) where it is not one of the two forms (`rows`: how many were sent)."""
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
            return from_arrow(base64.b64decode(body["arrow"], validate=True), rows)
        except Exception as exc:  # pyarrow's and base64's errors alike: a malformed answer
            why = str(exc)[:200] if isinstance(exc, ValueError) and not isinstance(exc, UnicodeError) else type(exc).__name__
            raise BackendError(f"{what} answered an 'arrow' that is not a base64 Arrow IPC stream of tensors ({why})") from None
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
