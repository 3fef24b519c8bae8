"""Convert a model file to ONNX and prove the conversion on sample rows before it is pushed:
the original and the ONNX model (run by ONNX Runtime, as sluice will) must agree within a
tolerance on every value (on every label, where labels are all a classifier answers), or the
push is refused with the largest difference."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from sluice.convert.frameworks import INPUT, format_of, load, to_onnx
from sluice.domain.errors import BadRequest, SluiceError

if TYPE_CHECKING:
    from sluice.convert.frameworks import Loaded

SAMPLE_ROWS = 1000
GENERATED_ROWS = 256


class ConversionDisagrees(SluiceError):
    status, code = 422, "conversion_disagrees"


@dataclass(frozen=True, slots=True)
class Converted:
    onnx: bytes
    format: str
    rows: int
    sample: str  # where the rows came from
    max_abs_diff: float | None  # None: only labels were compared
    label_agreement: float | None
    feature_names: list[str] | None


def file_columns(path: Path) -> list[str]:
    """The columns a Parquet, CSV or JSON Lines file holds (its schema, header or first row)."""
    import json

    from sluice.batch.uris import format_of as data_format

    fmt = data_format(path.name)
    if fmt == "parquet":
        import pyarrow.parquet as pq

        return list(pq.read_schema(path).names)
    with path.open("rb") as file:
        first = file.readline().decode("utf-8", errors="replace").strip()
    if fmt == "csv":
        return [c.strip().strip('"') for c in first.split(",")]
    try:
        return list(json.loads(first))
    except (ValueError, TypeError):
        raise BadRequest(f"the first line of {path.name} is not a JSON object", field="sample") from None


def convert(
    path: Path, *, fmt: str | None = None, sample: Path | None = None, tolerance: float = 1e-4,
    n_features: int | None = None, feature_names: list[str] | None = None,
) -> Converted:  # fmt: skip
    kind = format_of(path, fmt)
    if kind == "onnx":
        raise BadRequest("an ONNX file is pushed as it is", field="format")
    if not path.is_file():
        raise BadRequest(f"no such file: {path}", field="file")
    if sample is not None and not sample.is_file():
        raise BadRequest(f"no such file: {sample}", field="sample")
    loaded = load(path, kind)
    return convert_loaded(loaded, sample=sample, tolerance=tolerance, n_features=n_features, feature_names=feature_names)


def convert_loaded(
    loaded: Loaded, *, sample: Path | None = None, example: tuple[np.ndarray, str] | None = None,
    tolerance: float = 1e-4, n_features: int | None = None, feature_names: list[str] | None = None,
) -> Converted:  # fmt: skip
    """Convert a loaded model and check it on `sample` (a file), else on `example` (rows and
    where they came from: an MLflow model's logged input example), else on generated rows."""
    from sluice.batch.sample import generated_rows, read_rows
    from sluice.domain.signature import Signature, TensorSpec

    kind = loaded.format
    if feature_names and loaded.feature_names and list(map(_as_fitted, feature_names)) != list(map(_as_fitted, loaded.feature_names)):
        # The model reads its columns by position, in the order it was fitted on: other names, or
        # the same in another order, would feed each value to another feature's column.
        same = sorted(feature_names) == sorted(loaded.feature_names)
        raise BadRequest(
            f"the model was fitted on the features {', '.join(loaded.feature_names)}"
            + (" in that order" if same else "")
            + f"; the feature names given ({', '.join(feature_names)}) "
            + ("are in another order: it would read each value as another feature" if same else "differ: give its own names, or none")
            + f" (the names are given as fitted where the model says them; {kind})",
            field="feature_names",
        )
    names = feature_names or loaded.feature_names
    if sample is not None and names is None:
        columns = file_columns(sample)
        names = None if columns == [INPUT] else columns
    if n_features is not None and (n_features < 1 or (loaded.n_features is not None and n_features != loaded.n_features)):
        said = f"the model takes {loaded.n_features}" if loaded.n_features is not None else "a model takes at least 1"
        raise BadRequest(f"n_features is {n_features}: {said} features a row", field="n_features")
    width = n_features or loaded.n_features or (len(names) if names else None)
    if width is None:
        raise BadRequest("cannot tell how many features the model takes: give --sample or --n-features", field="n_features")
    if names is not None and len(names) != width:
        raise BadRequest(f"the model takes {width} features; {len(names)} names were given", field="feature_names")
    spec = TensorSpec(INPUT, "FP32", (-1, width), feature_names=tuple(names) if names else None)
    signature = Signature((spec,), ())
    if sample is not None:
        rows = read_rows(sample, signature, limit=SAMPLE_ROWS, field="sample")[INPUT]
        where = f"{rows.shape[0]} rows of {sample.name}"
    elif example is not None:
        rows, where = example
        if rows.ndim != 2 or rows.shape[1] != width:
            raise BadRequest(f"{where} has rows of shape {list(rows.shape[1:])}; the model takes {width} features", field="sample")
        rows = np.ascontiguousarray(rows, dtype=np.float32)
    else:
        rows = generated_rows(signature, GENERATED_ROWS, seed=0)[INPUT]
        where = f"{GENERATED_ROWS} generated rows (standard normal; give --sample for rows like yours)"
    onnx = to_onnx(loaded, width, rows)
    if loaded.kind == "classifier" and "probabilities" not in loaded.predict(rows[:1]):
        onnx = scores_not_probabilities(onnx)
    onnx = declared_as_answered(onnx, rows)
    diff, agreement = compare(loaded, onnx, rows, tolerance)
    return Converted(onnx, kind, len(rows), where, diff, agreement, names)


def compare(loaded: Loaded, onnx: bytes, rows: np.ndarray, tolerance: float) -> tuple[float | None, float | None]:
    """Run both; raise ConversionDisagrees when a value differs by more than `tolerance`
    times max(1, |original value|), or, where labels are all there is to compare, when one
    label differs. Returns the largest absolute difference (None: no values compared) and the
    label agreement. A check that can compare nothing refuses: it would prove nothing."""
    from sluice.runtimes.onnx import as_array, build_session

    expected = {key: np.asarray(value) for key, value in loaded.predict(rows).items()}
    session = build_session(onnx)
    got: dict[str, np.ndarray] = {}
    for out, value in zip(session.get_outputs(), session.run(None, {INPUT: rows}), strict=True):
        array, _ = as_array(out.name, value)
        got["label" if array.ndim == 1 and array.dtype.kind in "iuOSU" else ("probabilities" if "prob" in out.name else "values")] = array
    if "values" in expected and "values" not in got:  # a regressor's one output, however it is named
        found = next((a for a in got.values() if a.dtype.kind == "f"), None)
        if found is not None:
            got["values"] = found
    compared = [key for key in ("probabilities", "values", "label") if key in expected and key in got]
    if not compared:
        raise BadRequest(
            f"the ONNX model answers {_said(got)} where the original answers {_said(expected)}: "
            "the conversion cannot be checked; nothing was pushed", field="file",
        )  # fmt: skip
    for key in compared:
        if expected[key].shape[:1] != got[key].shape[:1] or expected[key].size != got[key].size:
            raise BadRequest(
                f"the ONNX model answers {key} of shape {list(got[key].shape)} where the original answers "
                f"{list(expected[key].shape)}: the conversion cannot be checked; nothing was pushed", field="file",
            )  # fmt: skip
    worst: float | None = None
    for key in compared:
        if key == "label":
            continue
        a, b = np.asarray(expected[key], np.float64), np.asarray(got[key], np.float64).reshape(expected[key].shape)
        same = (a == b) | (np.isnan(a) & np.isnan(b))  # an infinity or a NaN on both sides agrees; on one side only,
        with np.errstate(invalid="ignore"):  # it is as far apart as can be (a NaN compared as a number passed)
            diff = np.where(same, 0.0, np.nan_to_num(np.abs(a - b), nan=np.inf, posinf=np.inf))
            scaled = np.where(same, 0.0, np.nan_to_num(diff / np.maximum(1.0, np.abs(a)), nan=np.inf, posinf=np.inf))
        worst = max(worst or 0.0, float(diff.max(initial=0)))
        if scaled.max(initial=0) > tolerance:
            row = int(np.unravel_index(scaled.argmax(), scaled.shape)[0])
            raise ConversionDisagrees(
                f"the ONNX model disagrees with the original on {key}: largest difference {worst:.6g} "
                f"(row {row}: {a.reshape(len(a), -1)[row].tolist()[:5]} vs {b.reshape(len(b), -1)[row].tolist()[:5]}), "
                f"above the tolerance {tolerance:g}; nothing was pushed",
                field="tolerance", max_abs_diff=worst, output=key,
            )  # fmt: skip
    if "label" not in compared:
        return worst, None
    want, have = expected["label"], got["label"]
    if (want.dtype.kind == "b") != (have.dtype.kind == "b"):  # True is 1 as a number, not as a class a caller reads
        raise BadRequest(
            f"the original's classes are {'true/false' if want.dtype.kind == 'b' else want.dtype.name} and the ONNX "
            f"model's {'true/false' if have.dtype.kind == 'b' else have.dtype.name}: answers would name other classes; "
            "train on integer or text classes; nothing was pushed", field="file",
        )  # fmt: skip
    same = want.astype(np.float64) == have.astype(np.float64) if _numeric(want, have) else want.astype(str) == have.astype(str)
    if worst is None and not same.all():  # no scores within the tolerance to excuse a label at a tie
        row = int(np.argmin(same))
        raise ConversionDisagrees(
            f"the ONNX model disagrees with the original on the labels of {int((~same).sum())} of {len(same)} rows "
            f"(row {row}: {want[row]} vs {have[row]}); nothing was pushed",
            field="file", label_agreement=float(same.mean()), output="label",
        )  # fmt: skip
    return worst, float(same.mean())


SCORES = "scores"


def scores_not_probabilities(data: bytes) -> bytes:
    """A classifier the original gives no probabilities for (a linear SVM, a ridge classifier,
    a perceptron, XGBoost's `multi:softmax`) still has a second output, its decision scores or
    margins, which the converters name `probabilities` (a ZipMap of them, for some): that
    would have it served as probabilities (a score as the confidence). It is a float tensor
    named `scores`, a plain value."""
    import onnx

    model = onnx.load_from_string(data)
    scored = [o.name for o in model.graph.output if "prob" in o.name.lower()]
    if not scored:
        return data
    for old in scored:
        zipmap = next((n for n in model.graph.node if n.op_type == "ZipMap" and n.output[0] == old), None)
        if zipmap is not None:  # a map a row made of a float tensor: that tensor is the output, the ZipMap gone
            model.graph.node.remove(zipmap)
            _rename(model, {zipmap.input[0]: old})
            output = next(o for o in model.graph.output if o.name == old)
            output.type.CopyFrom(onnx.helper.make_tensor_type_proto(onnx.TensorProto.FLOAT, ["N", "classes"]))
    _rename(model, {old: SCORES if i == 0 else f"{SCORES}_{i}" for i, old in enumerate(scored)})
    return model.SerializeToString()


def _rename(model: Any, names: dict[str, str]) -> None:
    """Tensors renamed wherever the graph names them: its outputs, its nodes' ins and outs."""
    for output in model.graph.output:
        output.name = names.get(output.name, output.name)
    for node in model.graph.node:
        for tensors in (node.input, node.output):
            for i, name in enumerate(tensors):
                if name in names:
                    tensors[i] = names[name]


def declared_as_answered(data: bytes, rows: np.ndarray) -> bytes:
    """The outputs' declared shapes made what the model answers past the rows: a converter may
    declare `[N, 1]` for a forest of two targets, which answers `[N, 2]` (its signature, the v2
    metadata and an ensemble's checks would all read one value)."""
    import onnx

    from sluice.runtimes.onnx import build_session

    session = build_session(data)
    answered = {out.name: np.shape(value) for out, value in zip(session.get_outputs(), session.run(None, {INPUT: rows[:2]}), strict=True)}
    model = onnx.load_from_string(data)
    changed = False
    for output in model.graph.output:
        shape = answered.get(output.name)
        if not output.type.HasField("tensor_type") or shape is None or len(shape) < 1:
            continue
        dims = output.type.tensor_type.shape.dim
        declared = [d.dim_value if d.HasField("dim_value") else None for d in dims]
        if len(declared) == len(shape) and all(d is None or d == n for d, n in zip(declared[1:], shape[1:], strict=True)):
            continue
        del dims[:]
        dims.add().dim_param = "N"
        for n in shape[1:]:
            dims.add().dim_value = n
        changed = True
    return model.SerializeToString() if changed else data


def _said(outputs: dict[str, np.ndarray]) -> str:
    return " and ".join("labels" if k == "label" else k for k in sorted(outputs)) or "nothing"


def _numeric(*arrays: np.ndarray) -> bool:
    """Labels compared as numbers (a booster's 1.0 is the ONNX model's 1), else as text."""
    return all(a.dtype.kind in "biuf" for a in arrays)


def checked(converted: Converted) -> str:
    """What the check found, in words: `max abs diff 2e-07, labels agree on 100.00%`."""
    said = [] if converted.max_abs_diff is None else [f"max abs diff {converted.max_abs_diff:.3g}"]
    if converted.label_agreement is not None:
        said.append(f"labels agree on {converted.label_agreement:.2%}")
    return ", ".join(said)


def describe(converted: Converted) -> dict[str, Any]:
    return {
        "format": converted.format,
        "checked_on": converted.sample,
        "max_abs_diff": converted.max_abs_diff,
        "label_agreement": converted.label_agreement,
    }


def _as_fitted(name: str) -> str:
    """A feature's name as a booster keeps it: LightGBM writes each whitespace character of a
    name as `_` (`sepal length (cm)` is fitted as `sepal_length_(cm)`), so the names a caller
    gives (an MLflow signature's, the DataFrame's) are the fitted ones where they differ only so."""
    return "".join("_" if c.isspace() else c for c in name)
