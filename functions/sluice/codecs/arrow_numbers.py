"""Arrow arrays from NumPy arrays and Python text, and NumPy arrays from Arrow arrays, without
pyarrow's pandas shim.

pyarrow's `to_numpy`, `numpy.asarray(array)`, `pyarrow.array(...)` and `pyarrow.scalar` import
pandas the first time any of them runs where pandas is installed (to look for its types):
0.2-0.3 CPU seconds that a `sluice batch run` would pay at start-up for columns that need none
of it (and `Array.take` imports `pyarrow.compute`, ~30 ms: `take` here does without). Numbers
are their values buffer, read or wrapped as it is; booleans and nulls their bitmaps; text its
UTF-8 bytes and their offsets (a column of a few distinct values, a classifier's labels,
encoded once per value) or, read, `to_pylist`. Anything else (other types, objects that are not
text) goes to pyarrow as before."""

from __future__ import annotations

import sys
from functools import cache
from typing import Any

import numpy as np

_DTYPES = {
    "halffloat": np.float16, "float": np.float32, "double": np.float64,
    "int8": np.int8, "int16": np.int16, "int32": np.int32, "int64": np.int64,
    "uint8": np.uint8, "uint16": np.uint16, "uint32": np.uint32, "uint64": np.uint64,
}  # fmt: skip  (Arrow's names of its primitive numeric types)
_MAX_OFFSET = 2**31 - 1  # a string array's offsets are 32-bit
_TEXT = {str, type(None)}
FEW_TEXTS = 1024  # encoded here whatever they hold (under half a millisecond): a small answer imports nothing


def to_numbers(array: Any, *, null_slots: bool = False) -> np.ndarray:
    """The values of an Arrow array or chunked array of numbers or booleans as NumPy: a view of
    the buffer (one chunk of numbers) or one copy. A null is pyarrow's to say (`to_numpy`: NaN,
    or objects), unless `null_slots`: then each null reads as 0 (False), for rows the caller
    has failed already. Any other type is pyarrow's `to_numpy`."""
    import pyarrow as pa

    name = str(array.type)
    dtype = np.bool_ if name == "bool" else _DTYPES.get(name)
    if dtype is None or (array.null_count and not null_slots):
        return array.to_numpy(zero_copy_only=False) if isinstance(array, pa.Array) else array.to_numpy()
    chunks = array.chunks if isinstance(array, pa.ChunkedArray) else [array]
    parts = [_chunk(c, dtype) for c in chunks if len(c)]
    if not parts:
        return np.empty(0, dtype)
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def _chunk(array: Any, dtype: Any) -> np.ndarray:
    validity, data = array.buffers()[:2]
    n, offset = len(array), array.offset
    if dtype is np.bool_:
        values = _bits(data, offset, n)
    else:
        values = np.frombuffer(data, dtype, count=n, offset=offset * np.dtype(dtype).itemsize)
    if array.null_count:
        values = np.where(_bits(validity, offset, n), values, values.dtype.type(0))
    return values


def _bits(buffer: Any, offset: int, n: int) -> np.ndarray:
    """A bitmap's bits `offset` to `offset + n` (Arrow's: least significant first) as booleans."""
    return np.unpackbits(np.frombuffer(buffer, np.uint8), count=offset + n, bitorder="little")[offset:].astype(bool)


def to_text(array: Any, *, null: str | None = None) -> np.ndarray:
    """The values of an Arrow array of text as a NumPy array of `str` objects (`null` where
    a value is missing)."""
    values = array.to_pylist()
    if null is not None and array.null_count:
        values = [null if v is None else v for v in values]
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out


def from_numbers(values: np.ndarray) -> Any:
    """An Arrow array of a one-dimensional NumPy array of numbers (zero-copy where it is
    contiguous) or booleans, else `pyarrow.array`."""
    import pyarrow as pa

    if values.ndim != 1:
        return pa.array(values)
    if values.dtype.kind == "b":  # Arrow's booleans are bits, least significant first
        return pa.Array.from_buffers(pa.bool_(), len(values), [None, pa.py_buffer(np.packbits(values, bitorder="little"))])
    if values.dtype.kind in "iuf" and values.dtype.isnative:
        flat = np.ascontiguousarray(values)
        return pa.Array.from_buffers(pa.from_numpy_dtype(flat.dtype), len(flat), [None, pa.py_buffer(flat)])
    return pa.array(values)


def pyarrow_would_import_pandas() -> bool:
    """Whether `pyarrow.array` would import pandas now: pandas is installed and not imported
    yet (in Lambda's layers it is not installed; once imported, it is paid for)."""
    return "pandas" not in sys.modules and _pandas_installed()


@cache
def _pandas_installed() -> bool:
    from importlib.util import find_spec

    return find_spec("pandas") is not None


def from_text(values: list[Any]) -> Any | None:
    """A string array of `values` (None: a null), or None where one is neither `str` nor None
    (or cannot be encoded, a lone surrogate): the caller asks pyarrow. Where `pyarrow.array`
    would not import pandas it is pyarrow's own (faster); else, where they hold few distinct
    values (labels, a variant's or an object's name a row), each distinct value is encoded once
    and the rows taken by index, as are up to FEW_TEXTS values of any kind; where more are mostly
    distinct, None too: pyarrow converts many distinct strings an order of magnitude faster than
    they are encoded here, and its one import of pandas costs less than that from about a
    million of them."""
    if not pyarrow_would_import_pandas():
        import pyarrow as pa

        if set(map(type, values)) - _TEXT:
            return None
        try:
            return pa.array(values, type=pa.string())
        except (pa.ArrowInvalid, pa.ArrowTypeError, UnicodeEncodeError):
            return None
    try:
        distinct = list(dict.fromkeys(values))
    except TypeError:  # unhashable: not text
        return None
    if set(map(type, distinct)) - _TEXT or (len(values) > FEW_TEXTS and len(distinct) * 2 > len(values)):
        return None
    try:
        strings = _strings(distinct)
    except UnicodeEncodeError:
        return None
    if strings is None:
        return None
    place = dict(zip(distinct, range(len(distinct)), strict=True))
    return take(strings, np.fromiter(map(place.__getitem__, values), np.int64, len(values)))


def take(array: Any, positions: np.ndarray) -> Any:
    """`array.take(positions)` (a NumPy array of integers) by Arrow's kernel, called through
    pyarrow's compiled compute core: `Array.take` imports `pyarrow.compute`, which wraps every
    kernel in Python on its first import (~30 ms of a process), where its core alone costs ~5."""
    indices = from_numbers(positions.astype(np.int64, copy=False))
    try:
        from pyarrow._compute import call_function
    except ImportError:  # a pyarrow that keeps its core elsewhere: the public path
        return array.take(indices)
    return call_function("take", [array, indices])


def _strings(values: list[str | None]) -> Any | None:
    import pyarrow as pa

    encoded = [b"" if v is None else v.encode() for v in values]
    offsets = np.zeros(len(encoded) + 1, np.int64)
    np.cumsum(np.fromiter(map(len, encoded), np.int64, len(encoded)), out=offsets[1:])
    if offsets[-1] > _MAX_OFFSET:  # past a string array's offsets: pyarrow's own answer
        return None
    valid = np.fromiter((v is not None for v in values), bool, len(values))
    validity = None if valid.all() else pa.py_buffer(np.packbits(valid, bitorder="little"))
    return pa.Array.from_buffers(pa.string(), len(encoded), [validity, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(b"".join(encoded))])


def repeated_text(value: str, count: int) -> Any:
    """A string array of `value` `count` times (each row's object or variant name, every
    inference call of a batch job): a slice of one array kept for the value, made anew only
    for a value not kept or a longer count (arrays are immutable: the slices share it)."""
    kept = _REPEATED.get(value)
    if kept is not None and len(kept) >= count:
        return kept.slice(0, count)
    made = _repeated(value, count)
    if made.nbytes <= MAX_KEPT_BYTES:  # a larger one (a long value, many rows a call) is not kept
        if len(_REPEATED) >= MAX_REPEATED:
            _REPEATED.clear()
        _REPEATED[value] = made
    return made


def _repeated(value: str, count: int) -> Any:
    """The array from its two buffers: the value's bytes `count` times, and their offsets."""
    import pyarrow as pa

    try:
        raw = value.encode()
    except UnicodeEncodeError:  # a lone surrogate (a file name's undecodable byte): as pyarrow says
        return text_column([value] * count)
    if len(raw) * count > _MAX_OFFSET:  # past a string array's offsets: pyarrow's own answer
        return text_column([value] * count)
    offsets = np.arange(count + 1, dtype=np.int32) * np.int32(len(raw))
    return pa.Array.from_buffers(pa.string(), count, [None, pa.py_buffer(offsets), pa.py_buffer(raw * count)])


MAX_REPEATED = 16  # values kept: a job's objects and a split's variants go by a few at a time
MAX_KEPT_BYTES = 1 << 20  # each (4,096 rows a call, the default, of a 256-character name)
_REPEATED: dict[str, Any] = {}


def text_column(values: list[str]) -> Any:
    """A string array of `values`: `from_text`'s, else pyarrow's."""
    import pyarrow as pa

    text = from_text(values)
    return text if text is not None else pa.array(values, type=pa.string())
