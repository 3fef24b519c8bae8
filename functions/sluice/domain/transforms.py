"""A `transform` node: declarative steps on a request's tensors, data and never code, run as a
step of a `sequence` before or after a model.

    {"kind": "transform",
     "inputs": [{"name": "age", "datatype": "FP32", "shape": [-1]}, ...],
     "ops": [{"op": "standardize", "input": "age", "mean": 41.2, "std": 12.0}, ...]}

Each op reads a named tensor and writes one (`output`, by default in place); the tensors a
transform gives are those it was given and those its ops wrote (`keep` narrows them). A
transform that is a sequence's first step declares the `inputs` a caller sends; any later one
takes the previous step's outputs. `answer_specs` derives what a transform gives from what it
takes, so a policy is checked against the signatures on both sides when it is saved (each
refusal names the op's field); `sluice.routing.transforms` runs the ops on NumPy arrays, the
same vectorized code for one row and for a million.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cached_property
from typing import Annotated, Any, Literal, Union

from pydantic import Field, StrictFloat, StrictInt, StrictStr, model_validator

from sluice.domain.errors import Unprocessable
from sluice.domain.parts import Part
from sluice.domain.signature import DYNAMIC, TensorSpec

MAX_OPS = 64
MAX_VOCABULARY = 100_000
NUMERIC = ("BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64", "FP16", "FP32", "FP64")
CASTS = ("BOOL", "INT32", "INT64", "FP32", "FP64")
Name = Annotated[str, Field(min_length=1, max_length=128)]
Number = Union[StrictInt, StrictFloat]  # noqa: UP007
Numbers = Union[Number, Annotated[list[Number], Field(min_length=1, max_length=4096)]]  # noqa: UP007  (one for every column, or one each)
Vocabulary = Union[  # noqa: UP007
    Annotated[list[StrictStr], Field(min_length=1, max_length=MAX_VOCABULARY)],
    Annotated[list[StrictInt], Field(min_length=1, max_length=MAX_VOCABULARY)],
]


class _Op(Part):
    input: Name
    output: Name | None = None

    @property
    def target(self) -> str:
        return self.output or self.input


class Select(_Op):
    """Columns of a 2-D input, by index or by the signature's feature name, in this order."""

    op: Literal["select"]
    columns: list[StrictInt | StrictStr] = Field(min_length=1, max_length=4096)


class Rename(_Op):
    op: Literal["rename"]
    output: Name


class Cast(_Op):
    op: Literal["cast"]
    datatype: Literal["BOOL", "INT32", "INT64", "FP32", "FP64"]


class Fill(_Op):
    """Missing values (NaN) become `value`."""

    op: Literal["fill"]
    value: Number


class Standardize(_Op):
    """(x - mean) / std, per column (a list) or for every column (a number)."""

    op: Literal["standardize"]
    mean: Numbers
    std: Numbers

    @model_validator(mode="after")
    def _positive(self) -> Standardize:
        if any(s <= 0 for s in _listed(self.std)):
            raise ValueError("std must be above 0")
        return self


class MinMax(_Op):
    """(x - min) / (max - min), per column or for every column."""

    op: Literal["min_max"]
    min: Numbers
    max: Numbers

    @model_validator(mode="after")
    def _ordered(self) -> MinMax:
        low, high = _listed(self.min), _listed(self.max)
        if len(low) == len(high) and any(hi <= lo for lo, hi in zip(low, high, strict=True)):
            raise ValueError("max must be above min")
        return self


class Clip(_Op):
    op: Literal["clip"]
    min: Number | None = None
    max: Number | None = None

    @model_validator(mode="after")
    def _bounded(self) -> Clip:
        if self.min is None and self.max is None:
            raise ValueError("clip needs min, max or both")
        if self.min is not None and self.max is not None and self.max < self.min:
            raise ValueError("max must not be below min")
        return self


class Log1p(_Op):
    """log(1 + x); values at or below -1 give NaN."""

    op: Literal["log1p"]


class Bucketize(_Op):
    """The index of the bucket each value falls in: 0 below the first boundary, i for
    boundaries[i-1] <= x < boundaries[i], len(boundaries) at or above the last (INT64)."""

    op: Literal["bucketize"]
    boundaries: list[Number] = Field(min_length=1, max_length=4096)

    @model_validator(mode="after")
    def _increasing(self) -> Bucketize:
        if any(b <= a for a, b in zip(self.boundaries, self.boundaries[1:], strict=False)):
            raise ValueError("boundaries must increase")
        return self


class _Vocabulary(_Op):
    vocabulary: Vocabulary

    @cached_property
    def index(self) -> dict[Any, int]:
        """Each value's position, built once per op (an op never changes)."""
        return {v: i for i, v in enumerate(self.vocabulary)}

    @model_validator(mode="after")
    def _unique(self) -> _Vocabulary:
        if len(set(self.vocabulary)) != len(self.vocabulary):
            raise ValueError("vocabulary values must be unique")
        return self


class OneHot(_Vocabulary):
    """One FP32 column per vocabulary value; a value not in it gives zeros, or a last column
    of its own with `unknown: "column"`."""

    op: Literal["one_hot"]
    unknown: Literal["zeros", "column"] = "zeros"


class Ordinal(_Vocabulary):
    """A value's index in the vocabulary (FP32, one column); `unknown` for any other value."""

    op: Literal["ordinal"]
    unknown: Number = -1


class Hash(_Op):
    """A value (string or integer) into one of `buckets` by a stable hash (BLAKE2b of its
    text), the same in every process and release: INT64, one column."""

    op: Literal["hash"]
    buckets: StrictInt = Field(ge=2, le=2**31)


class Concat(Part):
    """Numeric inputs side by side (a 1-D input is one column), as FP32."""

    op: Literal["concat"]
    inputs: list[Name] = Field(min_length=1, max_length=256)
    output: Name


class Softmax(_Op):
    op: Literal["softmax"]


class Argmax(_Op):
    """The column of each row's largest value: its label (BYTES) or, without labels, its index (INT64)."""

    op: Literal["argmax"]
    labels: list[StrictStr] | None = Field(None, min_length=1, max_length=MAX_VOCABULARY)


class Threshold(_Op):
    """A score (one a row) at or above `cutoff`: `labels[1]`, else `labels[0]`; BOOL without labels."""

    op: Literal["threshold"]
    cutoff: Number
    labels: Annotated[list[StrictStr], Field(min_length=2, max_length=2)] | None = None


class TopK(_Op):
    """The `k` largest values of each row, largest first (FP32), and their columns in `indices` (INT64)."""

    op: Literal["top_k"]
    k: StrictInt = Field(ge=1, le=4096)
    indices: Name


class Platt(_Op):
    """Platt calibration: sigmoid(a * x + b), FP32."""

    op: Literal["platt"]
    a: Number
    b: Number


class Keep(Part):
    """Only these tensors go on (in this order)."""

    op: Literal["keep"]
    names: list[Name] = Field(min_length=1, max_length=256)


Op = Annotated[
    Union[  # noqa: UP007
        Select, Rename, Cast, Fill, Standardize, MinMax, Clip, Log1p, Bucketize, OneHot, Ordinal, Hash,
        Concat, Softmax, Argmax, Threshold, TopK, Platt, Keep,
    ],
    Field(discriminator="op"),
]
OPS = ("select", "rename", "cast", "fill", "standardize", "min_max", "clip", "log1p", "bucketize", "one_hot", "ordinal", "hash",
       "concat", "softmax", "argmax", "threshold", "top_k", "platt", "keep")  # fmt: skip


class InputSpec(Part):
    name: Name
    datatype: Literal["BOOL", "INT32", "INT64", "FP32", "FP64", "BYTES"]
    shape: list[StrictInt] = Field(min_length=1, max_length=2, description="[-1] (one value a row) or [-1, columns]")
    feature_names: list[StrictStr] | None = None

    @model_validator(mode="after")
    def _rows(self) -> InputSpec:
        if self.shape[0] != DYNAMIC or any(d < 1 for d in self.shape[1:]):
            raise ValueError("shape is [-1] or [-1, columns]: any number of rows, a fixed number of columns")
        if self.feature_names is not None and (len(self.shape) != 2 or len(self.feature_names) != self.shape[1]):
            raise ValueError("feature_names names every column of a [-1, columns] input")
        return self

    def spec(self) -> TensorSpec:
        names = tuple(self.feature_names) if self.feature_names is not None else None
        return TensorSpec(self.name, self.datatype, tuple(self.shape), feature_names=names)


class Transform(Part):
    kind: Literal["transform"] = "transform"
    inputs: list[InputSpec] | None = Field(None, min_length=1, max_length=256, description="What a caller sends: a sequence's first step only.")
    ops: list[Op] = Field(min_length=1, max_length=MAX_OPS)

    def children(self) -> list[Any]:
        return []

    def primary_single(self, resolve_ref: Callable[[str], Any] | None = None) -> None:
        return None

    def input_specs(self) -> tuple[TensorSpec, ...]:
        return self.declared

    @cached_property
    def declared(self) -> tuple[TensorSpec, ...]:
        return tuple(s.spec() for s in self.inputs or ())

    @cached_property
    def derived(self) -> dict[tuple[TensorSpec, ...], tuple[tuple[TensorSpec, ...], dict[int, list[int]]]]:
        """`derive`'s answers for this node, by what it takes (a node never changes)."""
        return {}


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


# Deriving what a transform gives ---------------------------------------------------------
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
            width, names = 0, []
            for part in parts:
                width += _width(part)
                names += list(part.feature_names) if part.feature_names else [f"{part.name}[{c}]" for c in range(_width(part))]
            specs[op.output] = TensorSpec(op.output, "FP32", (DYNAMIC, width), feature_names=tuple(names))
            continue
        spec = _spec(specs, op.input, f"{where}.input")
        made = _DERIVE[op.op](op, spec, where)
        if isinstance(op, Select) and columns is not None:
            names = list(spec.feature_names or ())
            columns[i] = [names.index(c) if isinstance(c, str) else c for c in op.columns]
        if isinstance(op, Rename):
            del specs[op.input]
        if isinstance(op, TopK):
            specs[op.indices] = TensorSpec(op.indices, "INT64", made.shape)
        specs[op.target] = TensorSpec(op.target, made.datatype, made.shape, role=made.role, feature_names=made.feature_names)
    return tuple(specs.values())


def _listed(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


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
