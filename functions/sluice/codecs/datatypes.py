"""The Open Inference Protocol v2 datatypes and their NumPy and ONNX counterparts."""

from __future__ import annotations

from functools import cache
from itertools import chain

import numpy as np

# v2 name -> NumPy dtype. BF16 is left out: NumPy has no native bfloat16 (an answer's BF16 is
# `ml_dtypes.bfloat16`, which `v2_of_numpy` names; inputs stay refused).
V2_TO_NUMPY: dict[str, np.dtype] = {
    "BOOL": np.dtype(np.bool_),
    "UINT8": np.dtype(np.uint8),
    "UINT16": np.dtype(np.uint16),
    "UINT32": np.dtype(np.uint32),
    "UINT64": np.dtype(np.uint64),
    "INT8": np.dtype(np.int8),
    "INT16": np.dtype(np.int16),
    "INT32": np.dtype(np.int32),
    "INT64": np.dtype(np.int64),
    "FP16": np.dtype(np.float16),
    "FP32": np.dtype(np.float32),
    "FP64": np.dtype(np.float64),
    "BYTES": np.dtype(np.object_),
}

NUMPY_TO_V2: dict[np.dtype, str] = {dt: name for name, dt in V2_TO_NUMPY.items()}

# ONNX Runtime's element type names ("tensor(float)") -> v2 name.
ONNX_TO_V2: dict[str, str] = {
    "bool": "BOOL",
    "uint8": "UINT8",
    "uint16": "UINT16",
    "uint32": "UINT32",
    "uint64": "UINT64",
    "int8": "INT8",
    "int16": "INT16",
    "int32": "INT32",
    "int64": "INT64",
    "float16": "FP16",
    "float": "FP32",
    "double": "FP64",
    "string": "BYTES",
}

FLOAT_TYPES = frozenset({"FP16", "FP32", "FP64"})
INT32_MAX = 2**31 - 1  # the largest INT32 (Triton's config numbers: max_batch_size, a count)
UINT64_MAX = 2**64 - 1
# What a classification can rank: the numbers.
RANKED_TYPES = frozenset({"UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64", "BF16", *FLOAT_TYPES})


def integer_range(datatype: str) -> tuple[int, int]:
    """The integers an integer datatype holds: from the first, up to (not with) the second."""
    info = np.iinfo(V2_TO_NUMPY[datatype])
    return int(info.min), int(info.max) + 1


def exact_integers_below(dtype: np.dtype) -> float:
    """Where a float type stops holding every whole number: below it in magnitude each is one of
    its values (FP16 2,048; FP32 2**24; FP64 2**53), past it two may be one."""
    return float(2 ** (np.finfo(dtype).nmant + 1))


def v2_of_numpy(dtype: np.dtype) -> str:
    if dtype.kind in "US":
        return "BYTES"
    try:
        return NUMPY_TO_V2[np.dtype(dtype)]
    except KeyError:
        if dtype.kind == "V" and _is_bfloat16(dtype):
            return "BF16"
        raise TypeError(f"no v2 datatype for numpy dtype {dtype}") from None


def _is_bfloat16(dtype: np.dtype) -> bool:
    """Whether `dtype` is `ml_dtypes.bfloat16` (a Triton answer's BF16), imported only here:
    ml_dtypes comes with tritonclient, and only such an answer needs it."""
    try:
        import ml_dtypes
    except ImportError:
        return False
    return dtype == ml_dtypes.bfloat16


def numpy_of_v2(datatype: str) -> np.dtype:
    return V2_TO_NUMPY[datatype]


@cache
def answer_dtypes() -> dict[str, np.dtype]:
    """The NumPy dtype each v2 datatype of an answer is held as: the table's, and BF16 as
    `ml_dtypes.bfloat16` where ml_dtypes is installed (it comes with tritonclient); without
    it, BF16 stays out, as an unusable datatype. Imported on first use."""
    try:
        import ml_dtypes
    except ImportError:
        return dict(V2_TO_NUMPY)
    return {**V2_TO_NUMPY, "BF16": np.dtype(ml_dtypes.bfloat16)}


def past_range(low: np.generic, high: np.generic, dtype: np.dtype) -> bool:
    """Whether values from `low` to `high` fall outside the integer `dtype`'s range. Compared
    as Python numbers, which compare a float with an integer exactly: NumPy compares them in
    float, where INT32's and INT64's largest values round up to 2**31 and 2**63, which pass."""
    info = np.iinfo(dtype)
    return low.item() < info.min or high.item() > info.max


def holds_bool(data: object) -> bool:
    """Whether JSON values (a scalar, or lists nested any way) hold a true or false. JSON
    booleans are not numbers: NumPy would quietly read them as 1 and 0."""
    kind = type(data)
    if kind is bool:
        return True
    if kind is not list:
        return False
    kinds = set(map(type, data))  # one pass in C over a row or a flat tensor
    if bool in kinds:
        return True
    if kinds == {list}:  # rows: one pass in C over all their values
        kinds = set(map(type, chain.from_iterable(data)))
        if bool in kinds:
            return True
        if list not in kinds:
            return False
        data = list(chain.from_iterable(data))
    return list in kinds and any(holds_bool(item) for item in data if type(item) is list)
