"""Plain predictions: rows and feature dicts in; labels, probabilities and values out, as JSON
rows (the simple JSON API, stream outputs) or as Arrow columns (batch parts), decided once."""

from __future__ import annotations

import contextlib
from itertools import chain, repeat
from operator import itemgetter
from typing import TYPE_CHECKING, Any

import numpy as np

from sluice.caching import keep
from sluice.codecs.arrow_numbers import from_numbers, from_text, take, text_column
from sluice.codecs.casts import whole_numbers
from sluice.codecs.datatypes import FLOAT_TYPES, V2_TO_NUMPY, holds_bool
from sluice.domain.errors import InvalidInput

if TYPE_CHECKING:
    import pyarrow as pa

    from sluice.domain.results import InferenceResult, Prediction
    from sluice.domain.signature import Signature, TensorSpec


INTEGER_TYPES = frozenset(("INT8", "INT16", "INT32", "INT64", "UINT8", "UINT16", "UINT32", "UINT64"))
ALIKE_ROWS = 8  # from this many rows of objects, a column at a time (`_columns_of_alike`) costs less than the loop


def _row_array(spec: TensorSpec, rows: list[Any], *, field: str, bools: bool = True) -> np.ndarray:
    """`bools`: whether the JSON may hold true/false at all (False: the body was seen to hold
    none, so the values need not be looked at one by one for them)."""
    if not bools:
        try:
            array = np.asarray(rows, dtype=object if spec.datatype == "BYTES" else None)
        except (ValueError, TypeError):
            raise InvalidInput(f"rows of input '{spec.name}' are ragged or not numbers", field=field) from None
        return _whole(spec, rows, array)
    if spec.datatype in FLOAT_TYPES and type(rows) is list and _all_floats(rows):
        # Floats only, for a float input: read straight into its dtype (the same values as
        # reading them as float64 and casting), with no float64 copy on the way.
        try:
            return np.asarray(rows, dtype=V2_TO_NUMPY[spec.datatype])
        except (ValueError, TypeError):
            raise InvalidInput(f"rows of input '{spec.name}' are ragged or not numbers", field=field) from None
    if spec.datatype not in ("BOOL", "BYTES") and holds_bool(rows):
        raise InvalidInput(f"rows of input '{spec.name}' hold true/false, which are not {spec.datatype} values", field=field)
    try:
        array = np.asarray(rows, dtype=object if spec.datatype == "BYTES" else None)
    except (ValueError, TypeError):
        raise InvalidInput(f"rows of input '{spec.name}' are ragged or not numbers", field=field) from None
    return _whole(spec, rows, array)


def _whole(spec: TensorSpec, rows: Any, array: np.ndarray) -> np.ndarray:
    """Integers beside a whole float (`2.0`) for an integer input, each kept exact (float64
    would round one past 2**53), as v2 JSON reads them; anything else as it was read, for the
    check to refuse naming the input."""
    if array.dtype.kind == "f" and spec.datatype in INTEGER_TYPES:
        with contextlib.suppress(ValueError, TypeError, OverflowError):
            return whole_numbers(rows, V2_TO_NUMPY[spec.datatype])
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


_PLAIN = {str, int, float, bool, type(None)}  # what an object array may hold that JSON takes as it is


def _scalar(value: Any) -> Any:
    item = value.item() if isinstance(value, np.generic) else value
    return item.decode() if isinstance(item, bytes) else item


def _column(array: np.ndarray, n: int) -> list[Any]:
    """Each row's value as plain JSON: a scalar where the row holds one element, else a list.
    One `tolist()` for the whole array rather than one NumPy call per row."""
    if array.size != n:
        array.reshape(n, -1)  # refuses a size that is not a whole number of rows, as it always did
        return array.reshape(n, *array.shape[1:]).tolist()
    column = (array if array.ndim == 1 else array.reshape(n)).tolist()
    if array.dtype != object or set(map(type, column)) <= _PLAIN:  # a set of types, built in C
        return column
    return [_scalar(x) for x in column]


_ROLES: dict[int, tuple[Signature, str | None, str | None, tuple[str, ...]]] = {}  # by signature (held: its id stays its own)
MAX_ROLES = 64


def _roles(signature: Signature) -> tuple[str | None, str | None, tuple[str, ...]]:
    """The names of a signature's label and probabilities outputs and of its other outputs,
    worked out once per signature object (a version's, a sequence's answer: the same object
    request after request)."""
    found = _ROLES.get(id(signature))
    if found is None or found[0] is not signature:
        label = signature.output_with_role("label")
        probs = signature.output_with_role("probabilities")
        values = tuple(spec.name for spec in signature.outputs if spec.role not in ("label", "probabilities"))
        found = keep(_ROLES, id(signature), (signature, label.name if label else None, probs.name if probs else None, values), MAX_ROLES)
    return found[1:]  # type: ignore[return-value]


class _Plain:
    """What plain predictions present of a version's answer, decided once for rows and columns
    alike: the `prediction` (a label, the most probable class, one value or several named
    values) and, for classifiers, each class's probability and the top one (`confidence`)."""

    __slots__ = ("classes", "label", "probs", "probs_name", "values")

    def __init__(self, signature: Signature, result: InferenceResult) -> None:
        outputs = result.outputs
        label_name, probs_name, values = _roles(signature)
        self.label = outputs.get(label_name) if label_name is not None else None
        self.probs = outputs.get(probs_name) if probs_name is not None else None
        self.probs_name = probs_name
        self.values = [name for name in values if name in outputs]
        self.classes: list[Any] | None = None
        if self.probs is not None and self.probs.ndim == 2:
            self.classes = result.classes.get(self.probs_name) if self.probs_name else None
            if self.classes is None:
                self.classes = list(range(self.probs.shape[1]))

    @property
    def top_class(self) -> bool:
        """The prediction is the most probable class (no label output, no values)."""
        return self.label is None and self.classes is not None and not self.values


def present_rows(
    signature: Signature,
    result: InferenceResult,
    *,
    return_probabilities: bool = True,
) -> list[dict[str, Any]]:
    """One plain-JSON dict per input row: `prediction`, and for classifiers
    `probabilities` ({label: p}) and `confidence` (the top probability)."""
    outputs = result.outputs
    try:
        n = len(next(iter(outputs.values()))) if outputs else 0
    except TypeError:  # a scalar answer (a 0-d output, as a server may give): one row
        outputs = {k: np.reshape(v, (1,)) if np.ndim(v) == 0 else v for k, v in outputs.items()}
        from sluice.domain.results import InferenceResult

        result = InferenceResult(outputs, result.classes, result.maps)
        n = 1
    if n == 0:
        return []
    plain = _Plain(signature, result)
    label, probs, classes, values = plain.label, plain.probs, plain.classes, plain.values
    if label is not None:
        predictions: list[Any] = _column(label, n)
    elif plain.top_class:
        predictions = [_scalar(classes[i]) for i in probs.argmax(axis=1).tolist()]  # type: ignore[index,union-attr]
    elif len(values) == 1:
        predictions = _column(outputs[values[0]], n)
    elif values:
        columns = {name: _column(outputs[name], n) for name in values}
        predictions = [{name: column[i] for name, column in columns.items()} for i in range(n)]
    else:
        predictions = [None] * n
    if classes is None:
        return [{"prediction": p} for p in predictions]
    keys = [str(_scalar(c)) for c in classes]
    width = probs.shape[1]  # type: ignore[union-attr]
    confidence = (probs[:, 0] if width == 1 else probs.max(axis=1)).tolist() if width else [None] * n  # type: ignore[index,union-attr]
    if not return_probabilities:
        return [{"prediction": p, "confidence": c} for p, c in zip(predictions, confidence, strict=True)]
    maps = result.maps.get(plain.probs_name) if plain.probs_name else None
    if maps is not None and len(maps) == n and list(maps[0]) == keys:
        # The runtime's own {label: probability} rows (string labels, in the classes' order):
        # the same values as the array's, with no dict built per row.
        return [{"prediction": p, "probabilities": row, "confidence": c} for p, row, c in zip(predictions, maps, confidence, strict=True)]
    table = _table(keys, probs, confidence)  # type: ignore[arg-type]
    return [{"prediction": p, "probabilities": row, "confidence": c} for p, row, c in zip(predictions, table, confidence, strict=True)]


def _table(keys: list[str], probs: np.ndarray, confidence: list[Any]) -> Any:
    """{class: probability} a row: one class's probability is the row's confidence (a
    calibrated score), two classes a dict display (built without a call), else `zip` mapped,
    as a call without keywords (the faster call, once a row)."""
    if len(keys) == 1 and probs.shape[1] == 1:
        key = keys[0]
        return [{key: c} for c in confidence]
    if len(keys) == 2 and probs.shape[1] == 2:
        first, second = keys
        return [{first: a, second: b} for a, b in probs.tolist()]
    return map(dict, map(zip, repeat(keys), probs.tolist()))


def present_columns(signature: Signature, result: InferenceResult, *, flat: bool) -> dict[str, pa.Array]:
    """What `present_rows` gives, a column at a time (Arrow, for batch parts): `prediction`
    (`prediction_<name>` per value when there are several), and for classifiers one
    `probability_<class>` column per class and `confidence`. `flat` spreads a vector per row
    over numbered columns (`prediction_0`, …), for formats without lists (CSV)."""
    import pyarrow as pa

    outputs = result.outputs
    plain = _Plain(signature, result)
    label, probs, classes, values = plain.label, plain.probs, plain.classes, plain.values
    columns: dict[str, pa.Array] = {}
    if label is not None:
        columns.update(_value_columns("prediction", label, flat=flat))
    elif plain.top_class:
        assert probs is not None and classes is not None  # a top class is one of the probabilities' classes
        names = [_scalar(c) for c in classes]
        text = from_text(names) if len(probs) and len(names) >= probs.shape[1] else None
        if text is not None:  # the usual labels: each row's taken from the classes' own
            columns["prediction"] = take(text, np.argmax(probs, axis=1))
        else:
            picked = np.asarray(classes, dtype=object)[np.argmax(probs, axis=1)] if len(probs) else []  # type: ignore[arg-type]
            columns["prediction"] = pa.array([_scalar(c) for c in picked])
    elif len(values) == 1:
        columns.update(_value_columns("prediction", outputs[values[0]], flat=flat))
    else:
        for name in values:
            columns.update(_value_columns(f"prediction_{name}", outputs[name], flat=flat))
    if probs is not None and classes is not None:
        for j, cls in enumerate(classes):
            columns[f"probability_{_scalar(cls)}"] = from_numbers(probs[:, j])
        top = probs.max(axis=1) if probs.shape[1] else np.full(len(probs), np.nan, dtype=probs.dtype)
        columns["confidence"] = from_numbers(top)
    return columns


def _value_columns(name: str, array: np.ndarray, *, flat: bool) -> dict[str, pa.Array]:
    import pyarrow as pa

    if array.ndim == 2 and array.shape[1] == 1:
        array = array[:, 0]
    if array.ndim == 1:
        return {name: _arrow(array)}
    rows = array.reshape(len(array), -1)
    if flat:
        return {f"{name}_{j}": _arrow(rows[:, j]) for j in range(rows.shape[1])}
    width = rows.shape[1]
    return {name: pa.FixedSizeListArray.from_arrays(_arrow(rows.reshape(-1)), width)}


def _arrow(array: np.ndarray) -> pa.Array:
    import pyarrow as pa

    if array.dtype == object:
        values = array.tolist()
        if values and type(values[0]) is str:  # labels: text, typed as such
            try:
                return text_column(values)
            except (pa.ArrowTypeError, pa.ArrowInvalid):  # not all text after all
                pass
        if set(map(type, values)) <= _PLAIN:  # labels and other text as they are: converted in C
            return pa.array(values)
        return pa.array([_scalar(v) for v in values])
    return from_numbers(array)


# What an answer says of who made it, where it says: a split's variant, an ensemble's members, a
# switch's case (with each row's model where rows took different cases), a sequence's steps, a
# precomputed node's source and when its stored answers were computed.
_WHO = ("variant", "members", "case", "models", "steps", "source", "computed_at")


def who_answered(prediction: Prediction) -> dict[str, Any]:
    """The model, version, variant, members, switch case (per row, with each row's model, where
    rows took different cases), sequence steps or precomputed source that answered, and how fast: every door that
    presents a prediction says it (simple JSON, the Open Inference Protocol's parameters,
    stream outputs)."""
    answer = prediction.answer
    who: dict[str, Any] = {
        "model": answer.version.model,
        "version": answer.version.version,
        "latency_ms": prediction.latency_ms,
    }
    for part in _WHO:
        value = getattr(answer, part)
        if value is not None:
            who[part] = value
    if prediction.cached:
        who["cached"] = True
    return who


def said_per_row(who: dict[str, Any]) -> bool:
    """Whether `who_answered` says something row by row (switch cases, a precomputed node's
    sources or times), so that some rows of the answer say it apart (`who_of_rows`)."""
    return any(isinstance(who.get(part), list) for part in ("case", "source", "computed_at"))


def who_of_rows(who: dict[str, Any], rows: slice) -> dict[str, Any]:
    """`who_answered` for some rows of an answer (a stream record's), as a request of those
    rows alone says it: where rows took different switch cases, the case and model of these
    rows; where some were answered from a precomputed table, their source and times; each
    named once when these rows share it (no `computed_at` where every row was live)."""
    out = dict(who)
    cases = who.get("case")
    if isinstance(cases, list):
        out["case"] = cases[rows]
        models = who.get("models")
        if models is not None:
            out["models"] = models[rows]
            if out["models"]:
                model, _, version = out["models"][0].rpartition(":")
                out["model"], out["version"] = model, int(version)
        if len(set(out["case"])) == 1:  # these rows took one case
            out["case"] = out["case"][0]
            out.pop("models", None)
    for part in ("source", "computed_at"):
        said = who.get(part)
        if isinstance(said, list):
            mine = said[rows]
            if part == "computed_at" and all(at is None for at in mine):
                out.pop(part)
            else:
                out[part] = mine[0] if len(set(mine)) == 1 else mine
    return out

