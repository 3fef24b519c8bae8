"""JSON tensors (v2 `data` + `shape` + `datatype`) to NumPy and back."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from sluice.codecs.casts import cast_exact, whole_numbers
from sluice.codecs.datatypes import FLOAT_TYPES, V2_TO_NUMPY, holds_bool, v2_of_numpy
from sluice.domain.errors import BadRequest, InvalidInput


def decode_tensor(
    name: str, datatype: str, shape: list[int], data: Any, *, field: str, bools: bool = True, exact: bool = False, role: str = "input"
) -> np.ndarray:
    """Row-major `data` (flat, or nested as a convenience) into an array of `shape`, its errors
    naming it as the `role` it plays (a request's input, a function's output). `bools`:
    False where the request's JSON holds no true/false (nothing to look for in `data`).
    `exact`: a value past FP16's or FP32's range is refused, not read as an infinity (a
    function's answer: a request's infinity is refused as the caller's anyway, by the model's
    input check, so its numbers are read in one pass)."""
    dtype = V2_TO_NUMPY.get(datatype)
    if dtype is None:
        raise InvalidInput(
            f"datatype {datatype!r} is not one of {', '.join(V2_TO_NUMPY)}", field=f"{field}.datatype"
        )
    if any((not isinstance(d, int)) or isinstance(d, bool) or d < 0 for d in shape):  # JSON's true is no size
        raise InvalidInput("shape must be a list of non-negative integers", field=f"{field}.shape")
    if data is None:
        raise InvalidInput(
            f"{role} '{name}' has no data (binary data needs parameters.binary_data_size and the"
            " Inference-Header-Content-Length header)",
            field=f"{field}.data",
        )
    if isinstance(data, np.ndarray) and data.dtype == dtype and datatype != "BYTES" and data.size == math.prod(shape):
        return shaped(data, shape, name=name, field=field, role=role)  # decoded already (gRPC's contents): taken as it is, not copied
    if not isinstance(data, list):
        data = [data]
    if bools and datatype not in ("BOOL", "BYTES") and holds_bool(data):
        raise InvalidInput(f"data of {role} '{name}' holds true/false, which are not {datatype} values", field=f"{field}.data")
    try:
        if datatype == "BYTES":
            array = np.empty(len(data), dtype=object) if data and not isinstance(data[0], list) else None
            array = np.asarray(data, dtype=object) if array is None else _fill(array, data)
        else:
            array = _numbers(data, datatype, dtype, exact=exact)
    except (ValueError, TypeError, OverflowError):
        raise InvalidInput(
            f"data of {role} '{name}' is not a list of {datatype} values", field=f"{field}.data"
        ) from None
    expected = math.prod(shape)
    if array.size != expected:
        raise InvalidInput(
            f"{role} '{name}' has {array.size} values but shape {shape} needs {expected}",
            field=f"{field}.data",
        )
    return shaped(array, shape, name=name, field=field, role=role)


def _numbers(data: list[Any], datatype: str, dtype: np.dtype, *, exact: bool = False) -> np.ndarray:
    """JSON numbers as `dtype` where no value changes, as simple JSON's are (`cast_exact`):
    never text read as a number ("6.7" as FP32) nor a fraction truncated (1.5 as INT64).
    `sum` tells in one pass in C that a flat list holds numbers only (text, null or an object
    raises TypeError) and, by its type, whether all are integers: those are read straight into
    an integer or float dtype, as quick as before; the rest are read as they are, then cast."""
    if data and type(data[0]) is not list:
        total = sum(data)
        if exact and dtype.kind == "f" and dtype.itemsize < 8:
            return cast_exact(np.asarray(data, dtype=np.float64), datatype, dtype)  # 1e300: OverflowError, not FP32's infinity
        if dtype.kind == "f" or (dtype.kind in "iu" and type(total) is int):
            return np.asarray(data, dtype=dtype)  # a number past an integer's range: OverflowError
    array = np.asarray(data)
    if dtype.kind in "iu" and array.dtype.kind == "f":  # integers beside a float: each kept whole, never through float64
        return whole_numbers(data, dtype)
    return array if array.dtype == dtype else cast_exact(array, datatype, dtype)


def shaped(array: np.ndarray, shape: list[int], *, name: str, field: str, role: str = "input") -> np.ndarray:
    """`array` (of the size `shape` needs) in `shape`; InvalidInput naming the shape where no
    array can have it: more than 64 dimensions, or sizes past NumPy's index range even where
    one of them is 0 (`[0, 2**63]`)."""
    try:
        return array.reshape(shape)
    except (ValueError, OverflowError):
        raise InvalidInput(
            f"{role} '{name}' has shape {shape!s:.80}, which no array can have: at most 64 dimensions, whose sizes"
            " (zeros left out) multiply to under 2**63 bytes",
            field=f"{field}.shape",
        ) from None


def _fill(array: np.ndarray, data: list[Any]) -> np.ndarray:
    for i, item in enumerate(data):
        array[i] = item.decode() if isinstance(item, bytes) else item
    return array


def encode_tensor(name: str, array: np.ndarray) -> dict[str, Any]:
    """An array as a v2 response output; `data` stays an array for the JSON encoder."""
    datatype = v2_of_numpy(array.dtype)
    data: Any = array.reshape(-1)
    if datatype == "BYTES":
        data = [x.decode() if isinstance(x, bytes) else str(x) for x in data.tolist()]
    return {"name": name, "datatype": datatype, "shape": list(array.shape), "data": data}


_FEW = 64  # values looked at one by one in Python: NumPy's elementwise test and reduction cost more in a request


def json_data(name: str, datatype: str, data: Any) -> Any:
    """An output's flat `data` as a JSON answer writes it, as Triton does: BF16 refused (JSON
    has no form for it: binary has), and a float output holding NaN or ±Inf written with the
    tokens `NaN`, `Infinity`, `-Infinity`, which Python's `json` and tritonclient read (orjson
    would write null). Only float outputs are looked at: a few values one by one, more with
    NumPy (whose call overheads cost a small answer more than the values do)."""
    if datatype == "BF16":
        raise BadRequest(
            f"output '{name}' is BF16, which JSON cannot carry: ask for it in binary (parameters.binary_data: true)",
            field=f"outputs.{name}",
        )
    if datatype not in FLOAT_TYPES:
        return data
    if data.size <= _FEW and all(map(math.isfinite, data.tolist())):
        return data
    finite = np.isfinite(data)
    if finite.all():
        return data
    import orjson

    texts = orjson.dumps(data, option=orjson.OPT_SERIALIZE_NUMPY)[1:-1].split(b",")
    for i in np.flatnonzero(~finite).tolist():
        texts[i] = b"NaN" if np.isnan(data[i]) else b"Infinity" if data[i] > 0 else b"-Infinity"
    return orjson.Fragment(b"[" + b",".join(texts) + b"]")
