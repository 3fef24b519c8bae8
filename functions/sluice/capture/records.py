"""One captured request as a JSON record."""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import TYPE_CHECKING, Any

import numpy as np

from sluice.codecs.datatypes import v2_of_numpy
from sluice.domain.results import InferenceResult, rows_of

if TYPE_CHECKING:
    from collections.abc import Sequence

    from sluice.domain import Deployment
    from sluice.domain.results import Answer
    from sluice.domain.signature import TensorSpec


def _plain(array: np.ndarray) -> Any:
    """Flat, row-major data: numbers stay an array (the sink's JSON encoder writes it, float32
    in its shortest form, 5.1 not 5.099999904632568), text becomes a list of str."""
    if array.dtype.kind in "OSU":
        return [x.decode("utf-8", "replace") if isinstance(x, bytes) else str(x) for x in array.reshape(-1).tolist()]
    return np.ascontiguousarray(array).reshape(-1)


def encode_inputs(
    arrays: dict[str, np.ndarray], answer: Answer, redact: tuple[str, ...], inputs: Sequence[TensorSpec] | None = None
) -> tuple[dict[str, Any], list[str]]:
    """Each input as `{datatype, shape, data}` (data flat, row-major). A redacted feature is
    a column of `null`s; a redacted input tensor keeps its datatype and shape only. `inputs`:
    what the request's inputs were read as (their feature names), which for a graph is not
    what its last model takes; the answer's signature where not given."""
    hidden = set(redact)
    names = {spec.name: spec.feature_names for spec in (answer.signature.inputs if inputs is None else inputs)}
    # A name to redact that no input here carries, as a tensor or as a column (a request pinning
    # a version skips the transform whose features the setting names: the model's inputs are
    # named otherwise, or not at all): nothing can tell which values are its, so no input's
    # values are written. It was written in clear.
    found = set(arrays)
    for name, array in arrays.items():
        features = names.get(name) or ()
        if array.ndim == 2 and len(features) == array.shape[1]:  # the columns `redact` can name
            found.update(features)
    whole = bool(hidden - found)
    out: dict[str, Any] = {}
    redacted: list[str] = []
    for name, array in arrays.items():
        item: dict[str, Any] = {"datatype": v2_of_numpy(array.dtype), "shape": list(array.shape)}
        if whole or name in hidden:
            redacted.append(name)
            out[name] = item
            continue
        features = names.get(name) or ()
        columns = [j for j, f in enumerate(features) if f in hidden]
        if columns and array.ndim == 2 and array.shape[1] == len(features):
            # Python floats for float32 values as their shortest text reads them (5.1, as an
            # array of them is written, not 5.099999904632568), then the redacted nulls among them.
            plain = array.astype(str).astype(np.float64) if array.dtype.kind == "f" and array.dtype.itemsize < 8 else _plain(array)
            data = np.asarray(plain.tolist() if isinstance(plain, np.ndarray) else plain, dtype=object).reshape(array.shape)
            data[:, columns] = None
            item["data"] = data.reshape(-1).tolist()
            redacted += [features[j] for j in columns]
        else:
            item["data"] = _plain(array)
        out[name] = item
    return out, redacted


def to_record(
    dep: Deployment, request_id: str, answer: Answer, arrays: dict[str, np.ndarray], latency_ms: float, at: float,
    inputs: Sequence[TensorSpec] | None = None, rows: slice | None = None,
) -> dict[str, Any]:
    """`rows`: the request's own rows of `arrays` and of the answer (a record of a bulk call)."""
    settings = dep.capture
    assert settings is not None
    if rows is not None:
        arrays = {name: array[rows] for name, array in arrays.items()}
        result = answer.result
        own = {name: array[rows] for name, array in result.outputs.items()}
        answer = dataclasses.replace(answer, result=InferenceResult(own, result.classes))
    when = dt.datetime.fromtimestamp(at, dt.UTC)
    record: dict[str, Any] = {
        "request_id": request_id,
        "time": when.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        "tenant": dep.tenant,
        "deployment": dep.name,
        "revision": dep.revision,
        "variant": answer.variant,
        "model": answer.version.model,
        "version": answer.version.version,
        "latency_ms": latency_ms,
        "rows": rows_of(arrays),
    }
    if "inputs" in settings.include:
        record["inputs"], redacted = encode_inputs(arrays, answer, settings.redact, inputs)
        if redacted:
            record["redacted"] = redacted
    if "outputs" in settings.include:
        # An exposed step's output may be the inputs themselves, under other names: with
        # features to redact, none is written (whatever the steps before did to the names).
        hidden = answer.exposed if settings.redact else frozenset()
        outputs = {name: a for name, a in answer.result.outputs.items() if name not in hidden}
        record["outputs"] = {
            name: {"datatype": v2_of_numpy(np.asarray(a).dtype), "shape": list(np.shape(a)), "data": _plain(np.asarray(a))}
            for name, a in outputs.items()
        }
        classes = {k: v for k, v in answer.result.classes.items() if k in outputs}
        if classes:
            record["classes"] = {k: [str(c) if not isinstance(c, int | float) else c for c in v] for k, v in classes.items()}
    return record


def partition(record: dict[str, Any]) -> str:
    """`tenant=…/deployment=…/dt=YYYY-MM-DD/hour=HH`, from the record's own time."""
    day, clock = record["time"][:10], record["time"][11:13]
    return f"tenant={record['tenant']}/deployment={record['deployment']}/dt={day}/hour={clock}"
