"""What a `transform` node (`sluice.domain.transforms`) gives, derived from what it takes:
`answer_specs` checks each op on the way (an Unprocessable naming the op's field where one
does not fit), and `derive` keeps its answers on the node, so a request pays a dictionary
lookup rather than the derivation."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sluice.domain.errors import Unprocessable
from sluice.domain.signature import DYNAMIC, TensorSpec
from sluice.domain.transforms import (
    NUMERIC,
    Argmax,
    Bucketize,
    Cast,
    Clip,
    Concat,
    Hash,
    Keep,
    MinMax,
    OneHot,
    Ordinal,
    Platt,
    Rename,
    Select,
    Softmax,
    Standardize,
    Threshold,
    TopK,
    Transform,
)


def derive(node: Transform, given: tuple[TensorSpec, ...], *, field: str = "policy") -> tuple[tuple[TensorSpec, ...], dict[int, list[int]]]:
    """`answer_specs` and its `select` columns, worked out once per node and what it takes
    (a request pays a dictionary lookup, not the derivation)."""
    found = node.derived.get(given)
    if found is None:
        columns: dict[int, list[int]] = {}
        found = (answer_specs(node, given, field=field, columns=columns), columns)
        if len(node.derived) < 16:  # a node takes what the step before gives: a few shapes at most
            node.derived[given] = found
    return found


def answer_specs(
    node: Transform, given: tuple[TensorSpec, ...], *, field: str = "policy", columns: dict[int, list[int]] | None = None
) -> tuple[TensorSpec, ...]:
    """The tensors `node` gives when it takes `given`; Unprocessable naming the op's field
    where an op does not fit what reaches it. `columns` gets, for each `select` op (by its
    index), the column indices it picks (feature names resolved)."""
    specs = {s.name: s for s in given}
    for i, op in enumerate(node.ops):
        where = f"{field}.ops.{i}"
        if isinstance(op, Keep):
            missing = [n for n in op.names if n not in specs]
            if missing:
                raise Unprocessable(f"keep names {missing}, which are not among {sorted(specs)}", field=f"{where}.names")
            specs = {n: specs[n] for n in op.names}
            continue
        if isinstance(op, Concat):
            parts = [_numeric(_spec(specs, name, f"{where}.inputs.{j}"), f"{where}.inputs.{j}") for j, name in enumerate(op.inputs)]
            _not_too_wide(sum(_width(p) for p in parts), op.output, where, columns)  # before its columns' names are made
            width, names = 0, []
            for part in parts:
                width += _width(part)
                names += list(part.feature_names) if part.feature_names else [f"{part.name}[{c}]" for c in range(_width(part))]
            specs[op.output] = TensorSpec(op.output, "FP32", (DYNAMIC, width), feature_names=tuple(names))
            continue
        spec = _spec(specs, op.input, f"{where}.input")
        made = _DERIVE[op.op](op, spec, where)
        _not_too_wide(_width(made) if made.shape[-1:] != (DYNAMIC,) else 1, op.target, where, columns)
        if isinstance(op, Select) and columns is not None:
            names = list(spec.feature_names or ())
            columns[i] = [names.index(c) if isinstance(c, str) else c for c in op.columns]
        if isinstance(op, Rename):
            del specs[op.input]
        if isinstance(op, TopK):
            specs[op.indices] = TensorSpec(op.indices, "INT64", made.shape)
        specs[op.target] = TensorSpec(op.target, made.datatype, made.shape, role=made.role, feature_names=made.feature_names)
    return tuple(specs.values())


MAX_COLUMNS = 65_536  # columns a transform's tensor may have (a feature vector's width)
MAX_TRANSFORM_ELEMENTS = 64_000_000  # values one tensor a transform makes in a request may hold (256 MB of FP32)
WIDEST = -1  # `columns[WIDEST]`: [the most columns a tensor the transform makes has], what a request's rows multiply


def _not_too_wide(width: int, name: str, where: str, columns: dict[int, list[int]] | None) -> None:
    """A tensor of `width` columns made by the op at `where`: refused past `MAX_COLUMNS`
    (a few ops of concat, one of another's output, would otherwise make one of billions);
    the widest so far kept in `columns`, for a request to bound its rows by."""
    if width > MAX_COLUMNS:
        raise Unprocessable(f"'{name}' would have {width} columns, past the {MAX_COLUMNS} a transform's tensor may have", field=where)
    if columns is not None:
        columns[WIDEST] = [max(width, *columns.get(WIDEST, [0]))]


def _spec(specs: dict[str, TensorSpec], name: str, where: str) -> TensorSpec:
    if name not in specs:
        raise Unprocessable(f"there is no tensor '{name}' here; there are {sorted(specs)}", field=where)
    spec = specs[name]
    if not 1 <= len(spec.shape) <= 2:
        raise Unprocessable(f"'{name}' has shape {list(spec.shape)}: transforms take [rows] or [rows, columns]", field=where)
    return spec


def _width(spec: TensorSpec) -> int:
    return 1 if len(spec.shape) == 1 else spec.shape[1]


def _numeric(spec: TensorSpec, where: str) -> TensorSpec:
    if spec.datatype not in NUMERIC:
        raise Unprocessable(f"'{spec.name}' holds {spec.datatype}: this op takes numbers", field=where)
    if len(spec.shape) == 2 and spec.shape[1] == DYNAMIC:
        raise Unprocessable(f"'{spec.name}' has a dynamic number of columns: this op needs a fixed one", field=where)
    return spec


def _float(spec: TensorSpec) -> str:
    return "FP64" if spec.datatype == "FP64" else "FP32"


def _per_column(spec: TensorSpec, values: Any, name: str, where: str) -> None:
    if isinstance(values, list) and len(values) not in (1, _width(spec)):
        raise Unprocessable(f"'{spec.name}' has {_width(spec)} columns and {name} has {len(values)} values", field=f"{where}.{name}")


def _same(op: Any, spec: TensorSpec, where: str) -> TensorSpec:
    return spec


def _select(op: Select, spec: TensorSpec, where: str) -> TensorSpec:
    if len(spec.shape) != 2:
        raise Unprocessable(f"'{spec.name}' is one value a row: select takes columns of a [rows, columns] input", field=f"{where}.input")
    names = list(spec.feature_names or ())
    picked: list[str | None] = []
    for j, column in enumerate(op.columns):
        if isinstance(column, str):
            if column not in names:
                raise Unprocessable(f"'{spec.name}' has no feature '{column}'; its features are {names}", field=f"{where}.columns.{j}")
            picked.append(column)
        else:
            if spec.shape[1] != DYNAMIC and not 0 <= column < spec.shape[1]:
                raise Unprocessable(f"'{spec.name}' has {spec.shape[1]} columns: there is no column {column}", field=f"{where}.columns.{j}")
            picked.append(names[column] if names else None)
    feature_names = tuple(picked) if all(p is not None for p in picked) else None  # type: ignore[arg-type]
    return TensorSpec(spec.name, spec.datatype, (DYNAMIC, len(op.columns)), feature_names=feature_names)


def _cast(op: Cast, spec: TensorSpec, where: str) -> TensorSpec:
    if spec.datatype == "BYTES":
        raise Unprocessable(f"'{spec.name}' holds strings: encode it (one_hot, ordinal, hash) rather than cast it", field=f"{where}.input")
    return TensorSpec(spec.name, op.datatype, spec.shape, feature_names=spec.feature_names)


def _to_float(op: Any, spec: TensorSpec, where: str) -> TensorSpec:
    _numeric(spec, f"{where}.input")
    for name in ("mean", "std", "min", "max"):
        if isinstance(op, Standardize | MinMax) and hasattr(op, name):
            _per_column(spec, getattr(op, name), name, where)
    return TensorSpec(spec.name, _float(spec), spec.shape, feature_names=spec.feature_names)


def _clip(op: Clip, spec: TensorSpec, where: str) -> TensorSpec:
    _numeric(spec, f"{where}.input")
    return spec


def _bucketize(op: Bucketize, spec: TensorSpec, where: str) -> TensorSpec:
    _numeric(spec, f"{where}.input")
    return TensorSpec(spec.name, "INT64", spec.shape, feature_names=spec.feature_names)


def _one_value(spec: TensorSpec, where: str) -> None:
    if _width(spec) != 1:
        raise Unprocessable(f"'{spec.name}' has {_width(spec)} columns: this op takes one value a row ([rows] or [rows, 1])", field=f"{where}.input")


def _vocabulary(op: OneHot | Ordinal, spec: TensorSpec, where: str) -> None:
    _one_value(spec, where)
    text = isinstance(op.vocabulary[0], str)
    if text != (spec.datatype == "BYTES") or (not text and spec.datatype not in NUMERIC):
        kind = "strings" if spec.datatype == "BYTES" else "numbers"
        raise Unprocessable(f"'{spec.name}' holds {kind} ({spec.datatype}) and the vocabulary does not", field=f"{where}.vocabulary")


def _one_hot(op: OneHot, spec: TensorSpec, where: str) -> TensorSpec:
    _vocabulary(op, spec, where)
    names = [f"{op.input}={v}" for v in op.vocabulary] + ([f"{op.input}=?"] if op.unknown == "column" else [])
    return TensorSpec(op.target, "FP32", (DYNAMIC, len(names)), feature_names=tuple(names))


def _ordinal(op: Ordinal, spec: TensorSpec, where: str) -> TensorSpec:
    _vocabulary(op, spec, where)
    return TensorSpec(op.target, "FP32", (DYNAMIC, 1))


def _hash(op: Hash, spec: TensorSpec, where: str) -> TensorSpec:
    _one_value(spec, where)
    if spec.datatype not in ("BYTES", "INT8", "INT16", "INT32", "INT64", "UINT8", "UINT16", "UINT32", "UINT64"):
        raise Unprocessable(f"'{spec.name}' holds {spec.datatype}: hash takes strings or integers", field=f"{where}.input")
    return TensorSpec(op.target, "INT64", (DYNAMIC, 1))


def _scores(spec: TensorSpec, where: str, *, columns: bool) -> None:
    _numeric(spec, f"{where}.input")
    if columns and len(spec.shape) != 2:
        raise Unprocessable(f"'{spec.name}' is one value a row: this op takes a row of scores [rows, columns]", field=f"{where}.input")


def _softmax(op: Softmax, spec: TensorSpec, where: str) -> TensorSpec:
    _scores(spec, where, columns=True)
    return TensorSpec(op.target, _float(spec), spec.shape, role="probabilities")


def _argmax(op: Argmax, spec: TensorSpec, where: str) -> TensorSpec:
    _scores(spec, where, columns=True)
    if op.labels is not None and spec.shape[1] not in (len(op.labels), DYNAMIC):
        raise Unprocessable(f"'{spec.name}' has {spec.shape[1]} columns and there are {len(op.labels)} labels", field=f"{where}.labels")
    return TensorSpec(op.target, "BYTES" if op.labels else "INT64", (DYNAMIC,), role="label")


def _threshold(op: Threshold, spec: TensorSpec, where: str) -> TensorSpec:
    _scores(spec, where, columns=False)
    _one_value(spec, where)
    return TensorSpec(op.target, "BYTES" if op.labels else "BOOL", (DYNAMIC,), role="label")


def _top_k(op: TopK, spec: TensorSpec, where: str) -> TensorSpec:
    _scores(spec, where, columns=True)
    if spec.shape[1] != DYNAMIC and op.k > spec.shape[1]:
        raise Unprocessable(f"'{spec.name}' has {spec.shape[1]} columns: k is at most that", field=f"{where}.k")
    return TensorSpec(op.target, _float(spec), (DYNAMIC, op.k))


def _platt(op: Platt, spec: TensorSpec, where: str) -> TensorSpec:
    _numeric(spec, f"{where}.input")
    return TensorSpec(op.target, _float(spec), spec.shape, role="probabilities")


_DERIVE: dict[str, Callable[[Any, TensorSpec, str], TensorSpec]] = {
    "select": _select, "rename": _same, "cast": _cast, "fill": _to_float, "standardize": _to_float, "min_max": _to_float,
    "clip": _clip, "log1p": _to_float, "bucketize": _bucketize, "one_hot": _one_hot, "ordinal": _ordinal, "hash": _hash,
    "softmax": _softmax, "argmax": _argmax, "threshold": _threshold, "top_k": _top_k, "platt": _platt,
}  # fmt: skip
