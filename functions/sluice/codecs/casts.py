"""The one rule a value takes into a tensor's datatype, for a request's inputs on every door
(`sluice.validation`, the v2 decoders) and a function step's answers: where no value changes."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from sluice.codecs.datatypes import past_range


def cast_exact(array: np.ndarray, datatype: str, dtype: np.dtype, *, answer: bool = False) -> np.ndarray:
    """`array` in `dtype` where no value changes; else TypeError, ValueError or OverflowError.
    A request's numbers for a BYTES input are taken as they are (as an object array of them is,
    on every door); a function's `answer` for a BYTES output holds text only."""
    if datatype == "BYTES":
        if array.dtype.kind in "US":
            return array.astype(object)
        if array.dtype == object:
            if not holds_text(array, numbers=not answer):
                raise TypeError("not text")
            return array
        if not answer and array.dtype.kind in "iuf":
            if array.dtype.kind == "f" and not np.isfinite(array).all():
                raise ValueError("a number that is not finite")  # 1e400 read as infinity would reach the model as "inf"
            return array.astype(object)
        raise TypeError("not text")
    if array.dtype.kind not in "biuf":  # text, objects, and numbers of no tensor type: complex (its imaginary part would be dropped), dates, durations
        raise TypeError("not numeric")
    if datatype == "BOOL" and not np.isin(array, (0, 1)).all():
        raise TypeError("not a boolean")  # 0.25 is no more true than false; 1.0 is true
    # Refuse silent truncation of 1.5 into an integer input.
    if dtype.kind in "iu" and array.dtype.kind == "f" and not np.array_equal(array, np.trunc(array)):
        raise ValueError("fractional value for an integer input")
    if dtype.kind in "iu" and array.size and past_range(array.min(), array.max(), dtype):
        raise OverflowError("out of range")
    with np.errstate(over="ignore"):  # an overflow is refused below, not warned of
        cast = array.astype(dtype, copy=False)
    if dtype.kind == "f" and (np.isinf(cast) > np.isinf(array)).any():
        raise OverflowError("past the float type's range")  # 1e300 is not FP32's infinity, nor 70000 FP16's
    return cast


def holds_text(array: np.ndarray, *, numbers: bool) -> bool:
    """Whether an object array holds text only (str or bytes), or numbers too where `numbers`:
    never null, true/false, an object or a list, which a model would read as their Python
    spelling ("None", "{'a': 1}"). Text alone, the common case, is told by one pass in C."""
    values = array.ravel().tolist()
    try:
        "".join(values)
        return True
    except TypeError:
        pass
    kinds = (str, bytes, int, float, np.number) if numbers else (str, bytes)
    return all(
        isinstance(v, kinds) and not isinstance(v, bool) and not (isinstance(v, float | np.floating) and not math.isfinite(v))
        for v in values
    )  # a number that is not finite (1e400 read as infinity) would reach the model as "inf"


def whole_numbers(data: list[Any], dtype: np.dtype) -> np.ndarray:
    """JSON numbers for an integer dtype where some are written as floats (`2.0`): each float
    whole (a fraction: ValueError), each integer exact (past 2**53 a float64 would round it);
    past the dtype's range, OverflowError."""
    exact = np.asarray(data, dtype=object)  # Python's own numbers, nested lists as NumPy shapes them
    values = []
    for value in exact.reshape(-1).tolist():
        if type(value) is float:
            if not value.is_integer():
                raise ValueError("a fraction for an integer type")
            value = int(value)
        elif type(value) is not int:
            raise TypeError("not a number")
        values.append(value)
    return np.asarray(values, dtype=dtype).reshape(exact.shape)
