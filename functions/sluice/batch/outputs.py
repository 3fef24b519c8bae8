"""A version's answer as output columns, the way plain JSON predictions present one row, but
a column at a time: `prediction`; for classifiers one `probability_<class>` column per class
and `confidence` (the top probability)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import pyarrow as pa

    from sluice.domain.results import InferenceResult
    from sluice.domain.signature import Signature


def prediction_columns(
    signature: Signature, result: InferenceResult, *, flat: bool
) -> dict[str, pa.Array]:
    """Columns for every row of `result`. `flat` spreads a vector per row over numbered
    columns (`prediction_0`, …), for formats without lists (CSV)."""
    import pyarrow as pa

    outputs = result.outputs
    label_spec = signature.output_with_role("label")
    prob_spec = signature.output_with_role("probabilities")
    label = outputs.get(label_spec.name) if label_spec else None
    probs = outputs.get(prob_spec.name) if prob_spec else None
    values = [
        spec.name
        for spec in signature.outputs
        if spec.name in outputs and spec.role not in ("label", "probabilities")
    ]
    classes: list[Any] | None = None
    if probs is not None and probs.ndim == 2:
        classes = result.classes.get(prob_spec.name) if prob_spec else None
        if classes is None:
            classes = list(range(probs.shape[1]))
    columns: dict[str, pa.Array] = {}
    if label is not None:
        columns.update(_value("prediction", label, flat=flat))
    elif probs is not None and classes is not None and not values:
        picked = np.asarray(classes, dtype=object)[np.argmax(probs, axis=1)] if len(probs) else []
        columns["prediction"] = pa.array([_scalar(c) for c in picked])
    elif len(values) == 1:
        columns.update(_value("prediction", outputs[values[0]], flat=flat))
    else:
        for name in values:
            columns.update(_value(f"prediction_{name}", outputs[name], flat=flat))
    if probs is not None and classes is not None and probs.ndim == 2:
        for j, cls in enumerate(classes):
            columns[f"probability_{_scalar(cls)}"] = pa.array(probs[:, j])
        top = probs.max(axis=1) if probs.shape[1] else np.full(len(probs), np.nan, dtype=probs.dtype)
        columns["confidence"] = pa.array(top)
    return columns


def _value(name: str, array: np.ndarray, *, flat: bool) -> dict[str, pa.Array]:
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
        return pa.array([_scalar(v) for v in array])
    return pa.array(array)


def _scalar(value: Any) -> Any:
    item = value.item() if isinstance(value, np.generic) else value
    return item.decode() if isinstance(item, bytes) else item
