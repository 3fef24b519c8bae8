"""A transform's ops for a request of one row, in Python numbers: what the vectorized plan
(`sluice.routing.transforms`) gives that row, bit for bit, without its NumPy calls. At one row
a NumPy call costs its set-up, not its arithmetic: a plan of six ops made a dozen of them, and
the row form reads each input once (`tolist`) and makes each output once.

Each op here computes what its vectorized form computes, in the same order and type:

- FP32 arithmetic as one double operation rounded to FP32 (a sum, difference, product or
  quotient of two FP32 values, worked out in double precision and rounded once to FP32, is the
  FP32 result: a double holds more than twice FP32's digits); FP64 as Python floats;
- a parameter as the vectorized plan holds it (the number made an array of the tensor's type);
- `exp` (platt) by NumPy itself, on an array of one value, as the vectorized form takes it;
- comparisons as IEEE compares (NaN is never at or above a cutoff), the first largest value
  (or the first NaN) for argmax, text codes through the same vocabulary lookup.

An op without a row form (cast, clip, log1p, bucketize, hash, softmax, top_k, a per-column
parameter), or an input it does not take in Python numbers (an integer to scale, text to
concat, a tensor of more than one value where the op spreads values over rows, a tensor
missing), and the request runs vectorized instead: its answer and its errors are that path's.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable
from typing import Any

import numpy as np

Row = Callable[[dict[str, Any]], None]
_F32, _F64 = np.dtype(np.float32), np.dtype(np.float64)
_FLOATS = (_F32, _F64)
_EXACT = 2**53  # integers a double holds exactly: made FP32 with one rounding
_pack, _unpack = struct.Struct("f").pack, struct.Struct("f").unpack


class Fallback(Exception):  # a signal, not a failure
    """This request's rows run vectorized."""


class Value:
    """One row of a tensor: its values flat, its type and its shape (the first dimension 1)."""

    __slots__ = ("dtype", "shape", "values")

    def __init__(self, values: list[Any], dtype: np.dtype, shape: tuple[int, ...]) -> None:
        self.values, self.dtype, self.shape = values, dtype, shape

    def array(self) -> np.ndarray:
        values, shape = self.values, self.shape
        if self.dtype == object and not all(type(v) is str for v in values):  # never read as nested sequences
            out = np.empty(len(values), dtype=object)
            out[:] = values
            return out.reshape(shape)
        if len(shape) == 2:
            return np.array((values,), dtype=self.dtype)
        return np.array(values, dtype=self.dtype) if len(shape) == 1 else np.array(values, dtype=self.dtype).reshape(shape)


def f32(value: float) -> float:
    """`value` rounded to FP32 (to nearest, ties to even), as a Python float; beyond FP32's
    range, an infinity of its sign."""
    try:
        return _unpack(_pack(value))[0]  # type: ignore[no-any-return]
    except OverflowError:
        return math.copysign(math.inf, value)


def _same(value: float) -> float:
    return value


_ROUND = {_F32: f32, _F64: _same}


def read(out: dict[str, Any], name: str) -> Value:
    x = out.get(name)
    if x is None:
        raise Fallback
    if type(x) is Value:
        return x
    return Value(x.reshape(-1).tolist(), x.dtype, x.shape)


def run_row(steps: list[Row], arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The plan's outputs for one row (every array's first dimension 1); Fallback where it has none."""
    out: dict[str, Any] = dict(arrays)
    for step in steps:
        step(out)
    for name, value in out.items():
        if type(value) is Value:
            out[name] = value.array()
    return out


def compile_rows(ops: list[Any], columns: dict[int, list[int]]) -> list[Row] | None:
    """The ops' row form, or None where one has none. Element-wise ops that rewrite one
    tensor one after another are one step, as in the vectorized plan."""
    steps: list[Row | None] = []
    i = 0
    while i < len(ops):
        op = ops[i]
        if op.op in _ELEMENTWISE:
            chain = [op]
            while i + len(chain) < len(ops):
                after = ops[i + len(chain)]
                if after.op not in _ELEMENTWISE or after.input != chain[-1].target or after.target != after.input:
                    break
                chain.append(after)
            steps.append(_chain(chain))
            i += len(chain)
            continue
        make = _MAKE.get(op.op)
        steps.append(make(op, columns.get(i)) if make is not None else None)
        i += 1
    return None if any(step is None for step in steps) else steps  # type: ignore[return-value]


# Element-wise ops: each value in its float type, one op after another ------------------------
Value_ = Callable[[float], float]


def _chain(ops: list[Any]) -> Row | None:
    """Element-wise ops one after another on one tensor (as the vectorized plan chains them),
    composed per float type; an integer input runs vectorized (it is made FP32 first)."""
    made = [_ELEMENTWISE[op.op](op) for op in ops]
    if any(m is None for m in made):
        return None
    per_type = {dtype: tuple(m[dtype] for m in made) for dtype in _FLOATS}  # type: ignore[index]
    source, target = ops[0].input, ops[-1].target

    def step(out: dict[str, Any]) -> None:
        x = read(out, source)
        fs = per_type.get(x.dtype)
        if fs is None:
            raise Fallback
        values = x.values
        for f in fs:
            values = [f(v) for v in values]
        out[target] = Value(values, x.dtype, x.shape)

    return step


def _scalars(*values: Any) -> dict[np.dtype, tuple[float, ...]] | None:
    """Each parameter as the vectorized plan holds it (an array of each float type), as Python
    floats; None for a parameter per column."""
    if any(np.ndim(v) for v in values):
        return None
    return {dtype: tuple(float(np.asarray(v, dtype=dtype)) for v in values) for dtype in _FLOATS}


def _fill(op: Any) -> dict[np.dtype, Value_] | None:
    typed = _scalars(op.value)
    return None if typed is None else {dtype: (lambda x, p=typed[dtype][0]: p if x != x else x) for dtype in _FLOATS}


def _divides(low: Any, span: dict[np.dtype, float]) -> dict[np.dtype, Value_] | None:
    """(x - low) / span; none where span is 0 in either type (NumPy's division by 0 is no exception)."""
    typed = _scalars(low)
    if typed is None or any(s == 0 for s in span.values()):
        return None
    return {dtype: (lambda x, lo=typed[dtype][0], s=span[dtype], r=_ROUND[dtype]: r(r(x - lo) / s)) for dtype in _FLOATS}


def _standardize(op: Any) -> dict[np.dtype, Value_] | None:
    std = _scalars(op.std)
    return None if std is None else _divides(op.mean, {dtype: p[0] for dtype, p in std.items()})


def _min_max(op: Any) -> dict[np.dtype, Value_] | None:
    if np.ndim(op.min) or np.ndim(op.max):
        return None
    return _divides(op.min, {dtype: float(np.asarray(op.max, dtype=dtype) - np.asarray(op.min, dtype=dtype)) for dtype in _FLOATS})  # the plan's span


def _platt(op: Any) -> dict[np.dtype, Value_] | None:
    """1 / (1 + exp(-a * x - b)), as the vectorized form works it out (no `- b` where b is 0);
    exp by NumPy, whose exp of a scalar is its exp of an array."""
    typed = _scalars(-float(op.a), -float(op.b))
    assert typed is not None
    made = {}
    for dtype in _FLOATS:
        (a, b), r, scalar = typed[dtype], _ROUND[dtype], dtype.type
        if op.b != 0:
            made[dtype] = lambda x, a=a, b=b, r=r, t=scalar: r(1.0 / r(1.0 + float(np.exp(t(r(r(a * x) + b))))))
        else:
            made[dtype] = lambda x, a=a, r=r, t=scalar: r(1.0 / r(1.0 + float(np.exp(t(r(a * x))))))
    return made


_ELEMENTWISE: dict[str, Callable[[Any], dict[np.dtype, Value_] | None]] = {
    "fill": _fill, "standardize": _standardize, "min_max": _min_max, "platt": _platt,
}  # fmt: skip


# The other ops -----------------------------------------------------------------------------
def _select(op: Any, columns: list[int] | None) -> Row:
    at = list(columns if columns is not None else op.columns)
    source, target = op.input, op.target

    def step(out: dict[str, Any]) -> None:
        x = read(out, source)
        if len(x.shape) > 2 or not all(type(i) is int for i in at):
            raise Fallback
        try:
            values = [x.values[i] for i in at] if len(x.shape) == 2 or at == [0] else None
        except IndexError:
            raise Fallback from None
        if values is None:
            raise Fallback
        out[target] = Value(values, x.dtype, (1, len(at)))

    return step


def _rename(op: Any, _: Any) -> Row:
    source, target = op.input, op.output

    def step(out: dict[str, Any]) -> None:
        if source not in out:
            raise Fallback
        out[target] = out.pop(source)

    return step


def _codes(op: Any, codes: Any, unknown: Any) -> Any:
    from sluice.routing.transforms import Codes

    return Codes(op.vocabulary, codes, unknown) if isinstance(op.vocabulary[0], str) else None


def _text(x: Value) -> list[Any]:
    if x.dtype != object or len(x.values) != 1:  # numbers, or values the vectorized form spreads over rows
        raise Fallback
    return x.values


def _ordinal(op: Any, _: Any) -> Row | None:
    unknown = op.unknown
    if type(unknown) is int and abs(unknown) > _EXACT:
        return None
    text = _codes(op, map(float, range(len(op.vocabulary))), unknown)
    if text is None:
        return None
    source, target = op.input, op.target

    def step(out: dict[str, Any]) -> None:
        out[target] = Value([f32(float(text[v])) for v in _text(read(out, source))], _F32, (1, 1))

    return step


def _one_hot(op: Any, _: Any) -> Row | None:
    text = _codes(op, range(len(op.vocabulary)), -1)
    if text is None:
        return None
    width, column = len(op.vocabulary) + (op.unknown == "column"), op.unknown == "column"
    source, target = op.input, op.target

    def step(out: dict[str, Any]) -> None:
        (value,) = _text(read(out, source))
        row = [0.0] * width
        at = text[value]
        if at >= 0:
            row[at] = 1.0
        elif column:
            row[-1] = 1.0
        out[target] = Value(row, _F32, (1, width))

    return step


def _concat(op: Any, _: Any) -> Row:
    names, target = op.inputs, op.output

    def step(out: dict[str, Any]) -> None:
        values: list[float] = []
        for name in names:
            x = read(out, name)
            kind = x.dtype.kind
            if len(x.shape) > 2:
                raise Fallback
            if x.dtype == _F32:
                values += x.values
            elif kind in "fb" or (kind in "iu" and all(-_EXACT <= v <= _EXACT for v in x.values)):
                values += [f32(float(v)) for v in x.values]
            else:  # text, or integers a double does not hold: as the vectorized form casts them
                raise Fallback
        out[target] = Value(values, _F32, (1, len(values)))

    return step


def _argmax(op: Any, _: Any) -> Row:
    labels = op.labels
    source, target = op.input, op.target

    def step(out: dict[str, Any]) -> None:
        x = read(out, source)
        if len(x.shape) != 2 or not x.values or x.dtype.kind not in "fiub":
            raise Fallback
        values = x.values
        at = next((i for i, v in enumerate(values) if v != v), None)  # NumPy's argmax takes the first NaN
        if at is None:
            at = values.index(max(values))
        out[target] = Value([labels[at]], np.dtype(object), (1,)) if labels is not None else Value([at], np.dtype(np.int64), (1,))

    return step


def _threshold(op: Any, _: Any) -> Row:
    labels = op.labels
    typed = {dtype: float(np.asarray(op.cutoff, dtype=dtype)) for dtype in _FLOATS}  # a float tensor compares in its own type
    source, target = op.input, op.target

    def step(out: dict[str, Any]) -> None:
        x = read(out, source)
        cutoff = typed.get(x.dtype)
        if cutoff is None:  # integers compare with the number as it is: the vectorized form
            raise Fallback
        above = [v >= cutoff for v in x.values]
        if labels is None:
            out[target] = Value(above, np.dtype(bool), (len(above),))
        else:
            out[target] = Value([labels[a] for a in above], np.dtype(object), (len(above),))

    return step


def _keep(op: Any, _: Any) -> Row:
    names = op.names

    def step(out: dict[str, Any]) -> None:
        if not all(name in out for name in names):
            raise Fallback
        kept = {name: out[name] for name in names}
        out.clear()
        out.update(kept)

    return step


_MAKE: dict[str, Callable[[Any, Any], Row | None]] = {
    "select": _select, "rename": _rename, "ordinal": _ordinal, "one_hot": _one_hot, "concat": _concat, "argmax": _argmax,
    "threshold": _threshold, "keep": _keep,
}  # fmt: skip
