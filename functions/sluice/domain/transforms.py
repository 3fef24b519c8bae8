"""A `transform` node: declarative steps on a request's tensors, data and never code, run as a
step of a `sequence` before or after a model.

    {"kind": "transform",
     "inputs": [{"name": "age", "datatype": "FP32", "shape": [-1]}, ...],
     "ops": [{"op": "standardize", "input": "age", "mean": 41.2, "std": 12.0}, ...]}

Each op reads a named tensor and writes one (`output`, by default in place); the tensors a
transform gives are those it was given and those its ops wrote (`keep` narrows them). A
transform that is a sequence's first step declares the `inputs` a caller sends; any later one
takes the previous step's outputs. `sluice.domain.transform_specs` derives what a transform
gives from what it takes, so a policy is checked against the signatures on both sides when it
is saved (each refusal names the op's field); `sluice.routing.transforms` runs the ops on NumPy
arrays, the same vectorized code for one row and for a million.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from functools import cached_property
from typing import Annotated, Any, Literal, Union

from pydantic import Field, StrictFloat, StrictInt, StrictStr, model_validator

from sluice.domain.parts import Part
from sluice.domain.signature import DYNAMIC, TensorSpec

MAX_OPS = 64
MAX_VOCABULARY = 100_000
NUMERIC = ("BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64", "FP16", "FP32", "FP64")
CASTS = ("BOOL", "INT32", "INT64", "FP32", "FP64")
Name = Annotated[str, Field(min_length=1, max_length=128)]
FLOAT64_MAX = sys.float_info.max
Number = Union[StrictInt, StrictFloat]  # noqa: UP007  (a whole number past FLOAT64_MAX: refused where written, `past_float`)
Numbers = Union[Number, Annotated[list[Number], Field(min_length=1, max_length=4096)]]  # noqa: UP007  (one for every column, or one each)
Vocabulary = Union[  # noqa: UP007
    Annotated[list[StrictStr], Field(min_length=1, max_length=MAX_VOCABULARY)],
    Annotated[list[StrictInt], Field(min_length=1, max_length=MAX_VOCABULARY)],
]



def past_float(value: Any) -> bool:
    """A whole number no 64-bit float holds (JSON puts no bound on digits): a transform, which
    computes in floating point, reads it as the infinity of its sign."""
    return type(value) is int and not -FLOAT64_MAX <= value <= FLOAT64_MAX


NUMBER_FIELDS = frozenset(("value", "mean", "std", "min", "max", "boundaries", "unknown", "cutoff", "a", "b"))  # `Number`s


def numbers_past_float(op: Any) -> Iterator[tuple[str, int]]:
    """Each of the op's numbers (`Number`, `Numbers`; not a column's index or a vocabulary's
    word) no 64-bit float holds: its field (`mean`, `boundaries.3`) and value."""
    for name, value in vars(op).items():
        if name not in NUMBER_FIELDS:
            continue
        if past_float(value):
            yield name, value
        elif type(value) is list:
            yield from ((f"{name}.{i}", v) for i, v in enumerate(value) if past_float(v))


def in_floats(op: Any) -> Any:
    """The op, or a copy whose numbers no 64-bit float holds (a policy stored before they were
    refused where written, `sluice.services.written_bounds`) are the infinity of their sign, as
    a float reads them: never an OverflowError on every request."""
    changed: dict[str, Any] = {}
    for name, _ in numbers_past_float(op):
        field = name.partition(".")[0]
        value = getattr(op, field)
        changed[field] = [_infinity(v) if past_float(v) else v for v in value] if type(value) is list else _infinity(value)
    return op.model_copy(update=changed) if changed else op


def _infinity(value: int) -> float:
    return float("inf") if value > 0 else float("-inf")

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
    def plans(self) -> dict[Any, Any]:
        """The ops compiled to run (`sluice.routing.transforms.plan_of`), by `select` columns."""
        return {}

    @cached_property
    def derived(self) -> dict[tuple[TensorSpec, ...], tuple[tuple[TensorSpec, ...], dict[int, list[int]]]]:
        """`derive`'s answers for this node, by what it takes (a node never changes)."""
        return {}


def _listed(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]
