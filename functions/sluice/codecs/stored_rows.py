"""One row of an answer as a table of precomputed answers keeps it: compact JSON of
`{output: the row's value}` (`encode_rows`), and rows read back as the arrays of an answer
(`decode_rows`), typed by the specs of the outputs the publication names."""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any

import numpy as np
import orjson

from sluice.codecs.datatypes import V2_TO_NUMPY

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from sluice.domain.signature import TensorSpec


def _plain(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"not JSON: {type(value).__name__}")


def encode_rows(outputs: Mapping[str, np.ndarray], rows: int) -> list[bytes]:
    """Each of the first `rows` rows of `outputs` as its own JSON document."""
    lists = {name: array.tolist() for name, array in outputs.items() if array.ndim > 0}
    return [
        json.dumps({name: values[i] for name, values in lists.items()}, separators=(",", ":"), default=_plain, allow_nan=True).encode()
        for i in range(rows)
    ]


# A number whose whole part has 19 digits or more: maybe an integer beyond 64 bits, which orjson
# reads as a float where json keeps it exact. A float's repr has at most 16 digits before its
# point (an exponent from 1e16 on), any number after its point; digits in a string only send
# a row to json. A row's first byte is `{`: never a digit.
_LONG_DIGITS = re.compile(rb"[^.0-9][0-9]{19}")
# Outputs whose values become floats whichever way a long integer is read (NumPy makes a
# Python int a double before a narrower float, as orjson does).
_FLOATS = frozenset({"FP16", "FP32", "FP64"})


def _loads(body: bytes, exact: bool = True) -> Any:
    """One row's JSON as `json.loads` reads it: by orjson (ten times json's speed), or by json
    where the row holds what orjson reads otherwise (a long integer, when `exact`) or refuses
    (`NaN`, `Infinity`: `encode_rows` writes a float that is not finite so; a lone surrogate;
    an integer beyond a double's range)."""
    if not exact or _LONG_DIGITS.search(body) is None:
        try:
            return orjson.loads(body)
        except orjson.JSONDecodeError:
            pass
    return json.loads(body)


def decode_rows(specs: Sequence[TensorSpec], bodies: Sequence[bytes]) -> dict[str, np.ndarray]:
    """The rows as arrays, one per output spec, in the rows' order."""
    exact = not all(spec.datatype in _FLOATS for spec in specs)  # a long integer matters beyond floats
    return rows_as_arrays(specs, [_loads(body, exact) for body in bodies])


def rows_as_arrays(specs: Sequence[TensorSpec], rows: Sequence[dict[str, Any]]) -> dict[str, np.ndarray]:
    """Rows read from their JSON as arrays, one per output spec, in the rows' order."""
    out: dict[str, np.ndarray] = {}
    for spec in specs:
        values = [row[spec.name] for row in rows]
        if spec.datatype != "BYTES":
            array = np.asarray(values, dtype=V2_TO_NUMPY[spec.datatype])
        elif any(isinstance(v, list) for v in values):
            array = np.array(values, dtype=object)
        else:  # one string a row: a 1-D array of objects (NumPy would make fixed-width strings)
            array = np.empty(len(values), dtype=object)
            array[:] = values
        out[spec.name] = array
    return out

