"""Plain predictions out: labels, probabilities and values, as JSON rows (the simple JSON API,
stream outputs) or as Arrow columns (batch parts), decided once. Rows and feature dicts in:
`sluice.codecs.plain_inputs`."""

from __future__ import annotations

from itertools import repeat
from typing import TYPE_CHECKING, Any

import numpy as np

from sluice.caching import keep
from sluice.codecs.arrow_numbers import from_numbers, from_text, take, text_column
from sluice.domain.errors import ModelFailed
from sluice.domain.results import InferenceResult, as_rows
from sluice.domain.signature import DYNAMIC

if TYPE_CHECKING:
    import pyarrow as pa

    from sluice.domain.results import Prediction
    from sluice.domain.signature import Signature, TensorSpec


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


_ROLES: dict[int, tuple[Signature, str | None, str | None, tuple[str, ...], dict[str, tuple[int, ...]]]] = {}  # by signature (held: its id stays its own)
MAX_ROLES = 64


def _roles(signature: Signature) -> tuple[str | None, str | None, tuple[str, ...]]:
    """The names of a signature's label and probabilities outputs and of its other outputs,
    worked out once per signature object (a version's, a sequence's answer: the same object
    request after request)."""
    return _read(signature)[1:4]  # type: ignore[return-value]


def _read(signature: Signature) -> tuple[Signature, str | None, str | None, tuple[str, ...], dict[str, tuple[int, ...]]]:
    found = _ROLES.get(id(signature))
    if found is None or found[0] is not signature:
        label = signature.output_with_role("label")
        probs = signature.output_with_role("probabilities")
        values = tuple(spec.name for spec in signature.outputs if spec.role not in ("label", "probabilities"))
        # Outputs declared without a batch dimension (a scalar, a constant [3]), by their shapes.
        fixed = {spec.name: tuple(spec.shape) for spec in signature.outputs if not spec.shape or spec.shape[0] != DYNAMIC}
        found = keep(_ROLES, id(signature), (signature, label.name if label else None, probs.name if probs else None, values, fixed), MAX_ROLES)
    return found


def by_row(signature: Signature, result: InferenceResult, rows: int | None = None) -> InferenceResult:
    """`result` as `rows` rows (None: the leading dimension of its first output that has one
    and is not whole; a scalar answer is one row, `as_rows`). An output that is not one value
    per row is given whole to every row, never split across them: a scalar, or one the
    signature declares without a batch dimension that came as declared (a constant [3], even
    to 3 rows). A leading 1 declared is a batch of one (an exporter that left the batch axis out
    declares [1, …]; a model of batch 1): such an output is the rows'. Any output of another
    length than the rows is the model's fault (ModelFailed: a 502; a bulk call splits until
    each record is asked alone). `result` itself is left as it is."""
    outputs = result.outputs
    fixed = _read(signature)[4]
    if not fixed:  # the usual answer, every output one value per row: as it is (a loop, not a generator: every request's)
        n = rows
        for a in outputs.values():
            shape = a.shape
            if not shape or (n is not None and shape[0] != n):
                break
            n = shape[0]
        else:
            return result
    if not outputs:
        return result

    def whole(name: str, array: np.ndarray) -> bool:
        if not getattr(array, "ndim", 0):
            return True
        declared = fixed.get(name)
        return declared is not None and len(declared) == array.ndim and declared[0] != 1 and array.shape[0] == declared[0]

    if rows is None:
        if not any(getattr(a, "ndim", 0) for a in outputs.values()):
            return as_rows(result)
        sized = [a for name, a in outputs.items() if getattr(a, "ndim", 0) and not whole(name, a)]
        rows = int((sized or [a for a in outputs.values() if getattr(a, "ndim", 0)])[0].shape[0])
    changed = {}
    for name, array in outputs.items():
        if whole(name, array):
            changed[name] = np.broadcast_to(array, (rows, *np.shape(array)))
        elif array.shape[0] != rows:
            raise ModelFailed(f"output '{name}' has {array.shape[0]} rows for {rows} asked")
    if not changed:
        return result
    return InferenceResult({**outputs, **changed}, result.classes, result.maps, result.loaded)


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
    result = by_row(signature, result)
    outputs = result.outputs
    n = len(next(iter(outputs.values()))) if outputs else 0
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

    result = by_row(signature, result)  # a scalar answer: one row; an output not per row, whole on each
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
        columns.update(_value_columns("prediction", outputs[values[0]], flat=flat, spec=signature.output(values[0])))
    else:
        for name in values:
            columns.update(_value_columns(f"prediction_{name}", outputs[name], flat=flat, spec=signature.output(name)))
    if probs is not None and classes is not None:
        for j, cls in enumerate(classes):
            columns[f"probability_{_scalar(cls)}"] = from_numbers(probs[:, j])
        top = probs.max(axis=1) if probs.shape[1] else np.full(len(probs), np.nan, dtype=probs.dtype)
        columns["confidence"] = from_numbers(top)
    return columns


def _value_columns(name: str, array: np.ndarray, *, flat: bool, spec: TensorSpec | None = None) -> dict[str, pa.Array]:
    """An output's column(s); an output whose NaN is no value (`TensorSpec.nan_missing`: a
    lookup's event times) has nulls there, in every format (Parquet's NaN, CSV's `nan` were
    numbers where JSON Lines said null)."""
    import pyarrow as pa

    if array.ndim == 2 and array.shape[1] == 1:
        array = array[:, 0]
    if array.ndim == 1:
        if spec is not None and spec.nan_missing and array.dtype.kind == "f":
            return {name: pa.array(array, mask=np.isnan(array))}
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
    return any(isinstance(who.get(part), list) for part in ("case", "models", "source", "computed_at"))


def who_of_rows(who: dict[str, Any], rows: slice) -> dict[str, Any]:
    """`who_answered` for some rows of an answer (a stream record's), as a request of those
    rows alone says it: where rows took different switch cases, the case and model of these
    rows; where some were answered from a precomputed table, their source and times; each
    named once when these rows share it (no `computed_at` where every row was live)."""
    out = dict(who)
    cases = who.get("case")
    if isinstance(cases, list):
        out["case"] = cases[rows]
        if len(set(out["case"])) == 1:  # these rows took one case (or none: a precomputed table's rows)
            out["case"] = out["case"][0]
            if out["case"] is None:
                out.pop("case")
    models = who.get("models")
    if isinstance(models, list):
        out["models"] = models[rows]
        if out["models"]:  # these rows' first version names them
            model, _, version = out["models"][0].rpartition(":")
            out["model"], out["version"] = model, int(version)
        if len(set(out["models"])) <= 1:  # one version answered these rows
            out.pop("models")
    for part in ("source", "computed_at"):
        said = who.get(part)
        if isinstance(said, list):
            mine = said[rows]
            if part == "computed_at" and all(at is None for at in mine):
                out.pop(part)
            else:
                out[part] = mine[0] if len(set(mine)) == 1 else mine
    return out

