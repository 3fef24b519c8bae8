"""Plain predictions in: rows, feature dicts and batches of them (the simple JSON API, stream
records) as the signature's arrays, each input's values read as JSON gave them (numbers for a
float input straight into its dtype; integers beside a whole float kept exact)."""

from __future__ import annotations

import contextlib
from itertools import chain
from operator import itemgetter
from typing import TYPE_CHECKING, Any

import numpy as np

from sluice.codecs.casts import whole_numbers
from sluice.codecs.datatypes import FLOAT_TYPES, V2_TO_NUMPY, holds_bool
from sluice.domain.errors import InvalidInput

if TYPE_CHECKING:
    from sluice.domain.signature import Signature, TensorSpec


INTEGER_TYPES = frozenset(("INT8", "INT16", "INT32", "INT64", "UINT8", "UINT16", "UINT32", "UINT64"))
ALIKE_ROWS = 8  # from this many rows of objects, a column at a time (`_columns_of_alike`) costs less than the loop


def _row_array(spec: TensorSpec, rows: list[Any], *, field: str, bools: bool = True) -> np.ndarray:
    """`bools`: whether the JSON may hold true/false at all (False: the body was seen to hold
    none, so the values need not be looked at one by one for them). Rows of no values (`[[]]`,
    `[]`) for an input that takes some are refused as empty (`_empty`)."""
    if not bools:
        try:
            array = np.asarray(rows, dtype=object if spec.datatype == "BYTES" else None)
        except (ValueError, TypeError):
            raise InvalidInput(f"rows of input '{spec.name}' are ragged or not numbers", field=field) from None
        array = _whole(spec, rows, array)
    elif spec.datatype in FLOAT_TYPES and type(rows) is list and _all_floats(rows):
        # Floats only, for a float input: read straight into its dtype (the same values as
        # reading them as float64 and casting), with no float64 copy on the way.
        try:
            array = np.asarray(rows, dtype=V2_TO_NUMPY[spec.datatype])
        except (ValueError, TypeError):
            raise InvalidInput(f"rows of input '{spec.name}' are ragged or not numbers", field=field) from None
    else:
        if spec.datatype not in ("BOOL", "BYTES") and holds_bool(rows):
            raise InvalidInput(f"rows of input '{spec.name}' hold true/false, which are not {spec.datatype} values", field=field)
        try:
            array = np.asarray(rows, dtype=object if spec.datatype == "BYTES" else None)
        except (ValueError, TypeError):
            raise InvalidInput(f"rows of input '{spec.name}' are ragged or not numbers", field=field) from None
        array = _whole(spec, rows, array)
    if not array.size:
        _empty(spec, field)
    return array


def _empty(spec: TensorSpec, field: str) -> None:
    """Refuses rows of no values for an input whose rows hold some (a size its shape fixes): said
    as empty, naming the field the rows came in, rather than by a shape the caller never sent
    (`[[]]` reads as [1, 0]). An input whose every size is open may take them."""
    fixed = [size for size in spec.shape[1:] if size != -1]
    if fixed and 0 not in fixed:
        per_row = int(np.prod(fixed))
        raise InvalidInput(f"input '{spec.name}' is empty: its rows hold no values, and it takes {per_row} a row", field=field)


def _whole(spec: TensorSpec, rows: Any, array: np.ndarray) -> np.ndarray:
    """Integers beside a whole float (`2.0`) for an integer input, each kept exact (float64
    would round one past 2**53), as v2 JSON reads them; anything else as it was read, for the
    check to refuse naming the input."""
    if array.dtype.kind == "f" and spec.datatype in INTEGER_TYPES:
        with contextlib.suppress(ValueError, TypeError, OverflowError):
            return whole_numbers(rows, V2_TO_NUMPY[spec.datatype])
    if array.dtype == object and spec.datatype in FLOAT_TYPES and array.size and all(type(v) in (int, float) for v in array.ravel().tolist()):
        # An integer past 64 bits made the array one of Python's numbers: read as a float, as v2
        # JSON's `data` is (2**70 is an FP32 value like any other); one past a double's range stays
        # as it was, for the check to refuse.
        with contextlib.suppress(OverflowError):
            return array.astype(np.float64)
    return array


def _all_floats(rows: list[Any]) -> bool:
    """Whether `rows` (a row, or a list of rows) holds Python floats and nothing else."""
    kinds = set(map(type, rows))
    if kinds == {list}:
        kinds = set(map(type, chain.from_iterable(rows)))
    return kinds == {float}


def _feature_row(spec: TensorSpec, features: Any, *, field: str) -> list[Any]:
    if not isinstance(features, dict):
        raise InvalidInput("features must be an object of name: value", field=field)
    names = spec.feature_names or ()
    missing = [n for n in names if n not in features]
    if missing:
        raise InvalidInput(f"missing feature '{missing[0]}'; this version takes {list(names)}", field=f"{field}.{missing[0]}")
    extra = sorted(set(features) - set(names))
    if extra:
        raise InvalidInput(f"unknown feature '{extra[0]}'; this version takes {list(names)}", field=f"{field}.{extra[0]}")
    return [features[n] for n in names]


def arrays_from_request(
    signature: Signature,
    *,
    inputs: Any = None,
    features: dict[str, Any] | None = None,
    batch: list[Any] | None = None,
    bools: bool = True,
) -> dict[str, np.ndarray]:
    """Build named arrays (batch axis first) from exactly one of inputs, features or batch.
    `bools`: False where the request's JSON holds no true/false (see `_row_array`)."""
    given = [n for n, v in (("inputs", inputs), ("features", features), ("batch", batch)) if v is not None]
    if len(given) != 1:
        raise InvalidInput("give exactly one of 'inputs', 'features' or 'batch'", field="inputs")
    if isinstance(inputs, dict):
        return {name: _row_array(_spec(signature, name, "inputs"), value, field=f"inputs.{name}", bools=bools) for name, value in inputs.items()}
    only = signature.inputs[0] if len(signature.inputs) == 1 else None
    if inputs is not None:
        if only is None:
            raise InvalidInput("this version takes several inputs; give 'inputs' as an object of name: rows", field="inputs")
        if not isinstance(inputs, list):
            raise InvalidInput("inputs must be a list of rows or an object of name: rows", field="inputs")
        if not inputs:  # no row at all (it read as one row of no values: "got [1, 0]", a shape never sent)
            raise InvalidInput("inputs must hold a row: one row, or a non-empty list of rows", field="inputs")
        array = _row_array(only, inputs, field="inputs", bools=bools)
        if array.ndim == len(only.shape) - 1:  # one row given without its batch axis
            array = array[np.newaxis, ...]
        return {only.name: array}
    items = [features] if features is not None else batch
    where = "features" if features is not None else "batch"
    if not isinstance(items, list) or not items:
        raise InvalidInput("batch must be a non-empty list of rows or feature objects", field="batch")
    if only is not None and only.feature_names:
        rows = [
            item if isinstance(item, list) else _feature_row(only, item, field=where if features is not None else f"batch.{i}")
            for i, item in enumerate(items)
        ]
        return {only.name: _row_array(only, rows, field=where, bools=bools)}
    if only is not None and all(isinstance(item, list) for item in items):
        return {only.name: _row_array(only, items, field=where, bools=bools)}
    # Multi-input models: each feature names an input and holds one row of it.
    columns: dict[str, list[Any]] = {spec.name: [] for spec in signature.inputs}
    alike = _columns_of_alike(items, columns) if len(items) >= ALIKE_ROWS else None
    if alike is not None:
        return {
            spec.name: _shaped_column(spec, column, field=f"{where}.{spec.name}")
            for spec in signature.inputs
            if (column := alike.get(spec.name))
        }
    for i, item in enumerate(items):  # a row's field is named only when it is refused
        if not isinstance(item, dict):
            raise InvalidInput("each row must be an object of input name: value", field=where if features is not None else f"batch.{i}")
        for name, value in item.items():
            column = columns.get(name)
            if column is None:
                at = where if features is not None else f"batch.{i}"
                raise InvalidInput(f"unknown input '{name}'; this version takes {list(columns)}", field=f"{at}.{name}")
            column.append(value)
    return {
        spec.name: _shaped_column(spec, columns[spec.name], field=f"{where}.{spec.name}")
        for spec in signature.inputs
        if columns[spec.name]
    }


def _columns_of_alike(items: list[Any], inputs: dict[str, list[Any]]) -> dict[str, list[Any]] | None:
    """Each input's column where every row is an object with the same keys, each an input's
    name (what a client sends, row after row): a pass in C per input rather than a Python
    loop per row and value. None otherwise: the loop over the rows then names what is wrong.
    A row with as many keys as the first's that holds each of the first's has the same keys."""
    if set(map(type, items)) != {dict}:
        return None
    names = list(items[0])
    if not all(map(inputs.__contains__, names)) or set(map(len, items)) != {len(names)}:
        return None
    try:
        return {name: list(map(itemgetter(name), items)) for name in names}
    except KeyError:  # a row without one of them
        return None


def _shaped_column(spec: TensorSpec, values: list[Any], *, field: str) -> np.ndarray:
    array = _row_array(spec, values, field=field)
    # A scalar per row for an input shaped [batch, 1] gains its trailing axis.
    if array.ndim == len(spec.shape) - 1:
        array = array[..., np.newaxis]
    return array


def _spec(signature: Signature, name: str, field: str) -> TensorSpec:
    spec = signature.input(name)
    if spec is None:
        raise InvalidInput(
            f"unexpected input '{name}'; this version takes {[s.name for s in signature.inputs]}",
            field=f"{field}.{name}",
        )
    return spec
