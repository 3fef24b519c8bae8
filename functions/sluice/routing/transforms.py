"""Running a `transform` node's ops (`sluice.domain.transforms`) on NumPy arrays.

A node's ops are compiled once, per node and per `select` columns, into a `Plan`: a list of
steps, each a closure that holds its parameters already made (per-column means and spans as
arrays of each float type, bucket boundaries, index arrays, a vocabulary's codes, labels), so
a request pays the NumPy calls and little more (a parameter is an array of the tensor's type,
not a Python number NumPy must type on each call). Element-wise ops that follow one another
on one tensor (fill, standardize, min_max, clip, log1p, platt, each rewriting what the one
before wrote) are one step. `concat` writes its parts into one array made for them.

Every step is vectorized over rows: one row and a million take the same code, and a row's
answer never depends on the rows beside it. A text vocabulary is looked up in C, one
dictionary lookup a row (a value it does not hold is read as text once); numbers, and
hashes, are worked out once per distinct value (`np.unique`), then spread over the rows.

The plan also knows, from its ops alone, which tensors it gives hold finite numbers by
construction (`Plan.finite`): a model fed by a transform is not made to look for NaN or
infinity where no op could have made one, and keeps looking where one could (standardize and
min_max divide, log1p of -1 or less, a cast or concat of FP64 into FP32, anything taken from
a model's answer).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from sluice.codecs.datatypes import V2_TO_NUMPY, past_range
from sluice.domain.errors import InvalidInput, InvalidRequest
from sluice.domain.transforms import Transform, in_floats
from sluice.routing.transform_codes import Codes, distinct, positions, stable_bucket
from sluice.routing.transform_finite import finite_outputs

Arrays = dict[str, np.ndarray]
Step = Callable[[Arrays], None]
_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))
_STARTS = ("fill", "standardize", "min_max", "log1p", "platt")  # floats from any numbers
_ELEMENT_WISE = (*_STARTS, "clip")  # clip keeps its input's type: it joins a chain, never starts one
MAX_PLANS = 16  # a node takes what the step before gives: a few column choices at most
SMALL_FILL = 4096  # up to this many values a fill copies and sets its NaN (NumPy's set-up is the cost)


class Plan:
    """A node's ops, compiled. `finite[checked]`: the tensors it gives that hold finite
    numbers whatever the rows, when its inputs were checked for NaN and infinity (a first
    step's, as the request's are) or not."""

    __slots__ = ("finite", "steps")

    def __init__(self, steps: list[Step], finite: dict[bool, frozenset[str]]) -> None:
        self.steps = steps
        self.finite = finite

    def run(self, arrays: Arrays) -> Arrays:
        out = dict(arrays)
        for step in self.steps:
            step(out)
        return out


def run_transform(node: Transform, arrays: Arrays, columns: dict[int, list[int]]) -> Arrays:
    """The tensors `node` gives for `arrays` (the policy was checked when saved; a tensor that
    is missing here is the caller's fault, a 400 naming it). `columns`: each `select` op's
    column indices, by the op's index (`domain.transform_specs.answer_specs` resolves them)."""
    return plan_of(node, columns).run(arrays)


def plan_of(node: Transform, columns: dict[int, list[int]]) -> Plan:
    key = tuple((i, tuple(c)) for i, c in columns.items()) if columns else ()
    plan = node.plans.get(key)
    if plan is None:
        plan = Plan(_compile(node, columns), {True: finite_outputs(node, checked=True), False: finite_outputs(node, checked=False)})
        if len(node.plans) < MAX_PLANS:
            node.plans[key] = plan
    return plan


def _compile(node: Transform, columns: dict[int, list[int]]) -> list[Step]:
    steps: list[Step] = []
    ops, i = [in_floats(op) for op in node.ops], 0
    while i < len(ops):
        op = ops[i]
        if op.op in _STARTS:  # with the element-wise ops after it that rewrite the tensor it wrote
            chain = [op]
            while i + len(chain) < len(ops):
                after = ops[i + len(chain)]
                if after.op not in _ELEMENT_WISE or after.input != chain[-1].target or after.target != after.input:
                    break
                chain.append(after)
            steps.append(_chain(chain))
            i += len(chain)
            continue
        steps.append(_MAKE[op.op](op, columns.get(i)))
        i += 1
    return steps



def _get(arrays: Arrays, name: str) -> np.ndarray:  # where a step's `out[name] if name in out` falls back
    if name not in arrays:
        raise InvalidRequest(f"the transform needs tensor '{name}', and the request has {sorted(arrays)}", field=f"inputs.{name}")
    return arrays[name]


def _columns(x: np.ndarray) -> np.ndarray:
    return x.reshape(-1, 1) if x.ndim == 1 else x


def _floats(x: np.ndarray) -> np.ndarray:
    return x if x.dtype in _FLOATS else x.astype(np.float32)


# Element-wise ops, one after another on one float array -------------------------------------
def _chain(ops: list[Any]) -> Step:
    source, target = ops[0].input, ops[-1].target
    apply = [_ELEMENTWISE[op.op](op) for op in ops]

    def step(out: Arrays) -> None:
        y = out[source] if source in out else _get(out, source)
        y = y if y.dtype in _FLOATS else y.astype(np.float32)
        for f in apply:
            y = f(y)
        out[target] = y

    return step


def _typed(values: Any) -> dict[np.dtype, np.ndarray]:
    """A parameter as an array of each float type (0-d for one number): NumPy computes in the
    tensor's type, as it does with a Python number (NEP 50), without working out a Python
    number's type on every call."""
    return {dtype: np.asarray(values, dtype=dtype) for dtype in _FLOATS}


def _fill(op: Any) -> Callable[[np.ndarray], np.ndarray]:
    """NaN made the value: set in a copy (a request's few rows), else `np.where` (many rows)."""
    value = _typed(op.value)

    def f(y: np.ndarray) -> np.ndarray:
        if y.size > SMALL_FILL:
            return np.where(np.isnan(y), value[y.dtype], y)
        y = y.copy()
        y[np.isnan(y)] = value[y.dtype]
        return y

    return f


def _standardize(op: Any) -> Callable[[np.ndarray], np.ndarray]:
    mean, std = _typed(op.mean), _typed(op.std)
    return lambda y: (y - mean[y.dtype]) / std[y.dtype]


def _min_max(op: Any) -> Callable[[np.ndarray], np.ndarray]:
    low = _typed(op.min)
    span = {dtype: np.asarray(op.max, dtype=dtype) - low[dtype] for dtype in _FLOATS}
    return lambda y: (y - low[y.dtype]) / span[y.dtype]


def _clip(op: Any) -> Callable[[np.ndarray], np.ndarray]:
    low, high = op.min, op.max
    return lambda y: np.clip(y, low, high)  # a float array: it stays one


def _log1p(op: Any) -> Callable[[np.ndarray], np.ndarray]:
    def f(y: np.ndarray) -> np.ndarray:
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.log1p(y)

    return f


def _platt(op: Any) -> Callable[[np.ndarray], np.ndarray]:
    """1 / (1 + exp(-(a * x + b))), each operation in the array's type: as exp(-a * x - b),
    the same bits (a negation is exact, and rounding is symmetric), one NumPy call fewer;
    and with no `- b` where b is 0 (exp(-0) is exp(0))."""
    a, b, one = _typed(-float(op.a)), _typed(-float(op.b)), _typed(1.0)
    if op.b == 0:
        return lambda y: one[y.dtype] / (one[y.dtype] + np.exp(a[y.dtype] * y))
    return lambda y: one[y.dtype] / (one[y.dtype] + np.exp(a[y.dtype] * y + b[y.dtype]))


_ELEMENTWISE: dict[str, Callable[[Any], Callable[[np.ndarray], np.ndarray]]] = {
    "fill": _fill, "standardize": _standardize, "min_max": _min_max, "clip": _clip, "log1p": _log1p, "platt": _platt,
}  # fmt: skip


# The other ops: one step each ----------------------------------------------------------------
def _one_in(op: Any, work: Callable[[np.ndarray], np.ndarray]) -> Step:
    source, target = op.input, op.target

    def step(out: Arrays) -> None:
        out[target] = work(out[source] if source in out else _get(out, source))

    return step


def _select(op: Any, columns: list[int] | None) -> Step:
    at = np.asarray(columns if columns is not None else op.columns, dtype=np.intp)
    highest, lowest = (int(at.max()), int(at.min())) if at.size else (-1, 0)

    def select(x: np.ndarray) -> np.ndarray:
        rows = _columns(x)
        if highest >= rows.shape[1] or -lowest > rows.shape[1]:  # a count of columns the signature left open: checked as it comes
            past = highest if highest >= rows.shape[1] else lowest
            raise InvalidInput(f"select takes column {past} of '{op.input}', which has {rows.shape[1]}", field=op.input)
        return rows[:, at]

    return _one_in(op, select)


def _rename(op: Any, _: Any) -> Step:
    source, target = op.input, op.output

    def step(out: Arrays) -> None:
        out[target] = out.pop(source) if source in out else _get(out, source)

    return step


def _cast(op: Any, _: Any) -> Step:
    dtype = V2_TO_NUMPY[op.datatype]
    if dtype.kind not in "iu":
        return _one_in(op, lambda x: x.astype(dtype))

    def cast(x: np.ndarray) -> np.ndarray:
        """The same values in an integer type: a value it cannot hold (past its range, NaN, an
        infinity) is refused, never wrapped."""
        if x.size and x.dtype.kind in "iuf" and not np.can_cast(x.dtype, dtype):
            if x.dtype.kind == "f" and not np.isfinite(x).all():
                raise InvalidInput(f"cast '{op.input}' to {op.datatype}: it holds NaN or an infinity, which {op.datatype} cannot", field=f"inputs.{op.input}")
            low, high = x.min(), x.max()
            if past_range(low, high, dtype):
                raise InvalidInput(f"cast '{op.input}' to {op.datatype}: it holds {low.item()!r} to {high.item()!r}, past {op.datatype}'s range", field=f"inputs.{op.input}")
        return x.astype(dtype)

    return _one_in(op, cast)


def _clip_alone(op: Any, _: Any) -> Step:
    low, high = op.min, op.max

    def clip(x: np.ndarray) -> np.ndarray:
        if x.dtype.kind not in "iu":
            return np.clip(x, low, high)
        # An integer input stays one, compared and bounded as integers (as floats, past 2^53 its
        # values would move): to the least and the most whole number within [min, max].
        return np.clip(x, *_whole_bounds(low, high, x.dtype))

    return _one_in(op, clip)


def _whole_bounds(low: float | None, high: float | None, dtype: np.dtype) -> tuple[int | None, int | None]:
    info = np.iinfo(dtype)
    lo = None if low is None else min(max(math.ceil(low), info.min), info.max) if math.isfinite(low) else (info.min if low < 0 else info.max)
    hi = None if high is None else min(max(math.floor(high), info.min), info.max) if math.isfinite(high) else (info.max if high > 0 else info.min)
    return lo, hi


def _bucketize(op: Any, _: Any) -> Step:
    given = list(op.boundaries)

    def bucketize(x: np.ndarray) -> np.ndarray:
        # In the input's own type, as `threshold` compares: an integer is at or above a boundary
        # where it is at or above the least whole number at or above it (as floats, past 2^53
        # neighbours would tie); an FP32 value sent as 0.7 is at a boundary of 0.7.
        if x.dtype.kind in "iu":
            info = np.iinfo(x.dtype)
            whole = [math.ceil(b) if math.isfinite(b) else (info.min if b < 0 else info.max + 1) for b in given]
            always = sum(1 for w in whole if w <= info.min)  # at or below every value: counted for every row
            inside = np.asarray([w for w in whole if info.min < w <= info.max], dtype=x.dtype)  # past the most: never
            return (always + np.searchsorted(inside, x, side="right")).astype(np.int64, copy=False)
        boundaries = np.asarray(given, dtype=x.dtype if x.dtype.kind == "f" else np.float64)
        return np.searchsorted(boundaries, x, side="right").astype(np.int64, copy=False)

    return _one_in(op, bucketize)


def _is_text(op: Any) -> bool:
    return isinstance(op.vocabulary[0], str)


def _one_hot(op: Any, _: Any) -> Step:
    text = Codes(op.vocabulary, range(len(op.vocabulary)), -1) if _is_text(op) else None
    width, column = len(op.vocabulary) + (op.unknown == "column"), op.unknown == "column"

    def work(x: np.ndarray) -> np.ndarray:
        at = positions(op, x, text)
        out = np.zeros((at.shape[0], width), dtype=np.float32)
        known = at >= 0
        out[np.flatnonzero(known), at[known]] = 1.0
        if column:
            out[~known, -1] = 1.0
        return out

    return _one_in(op, work)


def _ordinal(op: Any, _: Any) -> Step:
    text = Codes(op.vocabulary, map(float, range(len(op.vocabulary))), op.unknown) if _is_text(op) else None

    def work(x: np.ndarray) -> np.ndarray:
        if text is not None and x.dtype == object:  # each row's code, or `unknown`, straight into the answer
            return text.lookup(x, np.float32).reshape(-1, 1)
        at = positions(op, x, None)
        return np.where(at >= 0, at, op.unknown).astype(np.float32).reshape(-1, 1)

    return _one_in(op, work)


def _hash(op: Any, _: Any) -> Step:
    def work(x: np.ndarray) -> np.ndarray:
        values, inverse = distinct(x)
        found = np.array([stable_bucket(v, op.buckets) for v in values], dtype=np.int64)
        return (found[inverse] if len(values) else np.empty(0, dtype=np.int64)).reshape(-1, 1)

    return _one_in(op, work)


def _concat(op: Any, _: Any) -> Step:
    """The parts side by side, made FP32 as they are put together (one NumPy call)."""
    names, target = op.inputs, op.output

    def step(out: Arrays) -> None:
        parts = [x.reshape(-1, 1) if (x := out[name] if name in out else _get(out, name)).ndim == 1 else x for name in names]
        try:
            out[target] = np.concatenate(parts, axis=1, dtype=np.float32, casting="unsafe")
        except ValueError:  # rows that do not pair up: tensors a caller sent with different numbers of rows
            rows = {name: part.shape[0] for name, part in zip(names, parts, strict=True)}
            raise InvalidInput(f"concat puts rows side by side, and its inputs have {rows} rows", field=f"inputs.{names[0]}") from None

    return step


def _softmax(op: Any, _: Any) -> Step:
    def work(x: np.ndarray) -> np.ndarray:
        x = _floats(x)
        if not x.size:
            return x
        e = np.exp(x - x.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)

    return _one_in(op, work)


def _argmax(op: Any, _: Any) -> Step:
    labels = np.array(op.labels, dtype=object) if op.labels is not None else None

    def work(x: np.ndarray) -> np.ndarray:
        at = np.argmax(x, axis=-1) if x.size else np.empty(0, dtype=np.int64)
        return at.astype(np.int64) if labels is None else labels[at]

    return _one_in(op, work)


def _threshold(op: Any, _: Any) -> Step:
    labels, cutoff = (np.array(op.labels, dtype=object) if op.labels else None), op.cutoff
    typed = _typed(cutoff)  # a float tensor compares in its own type, as with the number itself

    def work(x: np.ndarray) -> np.ndarray:
        above = x.reshape(-1) >= typed.get(x.dtype, cutoff)
        return above if labels is None else labels.take(above.view(np.uint8))

    return _one_in(op, work)


def _top_k(op: Any, _: Any) -> Step:
    source, target, indices, k = op.input, op.target, op.indices, op.k

    def step(out: Arrays) -> None:
        x = _floats(_get(out, source))
        order = np.argsort(-x, axis=-1, kind="stable")[:, :k]
        out[target], out[indices] = np.take_along_axis(x, order, axis=-1), order.astype(np.int64)

    return step


def _keep(op: Any, _: Any) -> Step:
    names = op.names

    def step(out: Arrays) -> None:
        kept = {name: _get(out, name) for name in names}
        out.clear()
        out.update(kept)

    return step


_MAKE: dict[str, Callable[[Any, list[int] | None], Step]] = {
    "select": _select, "rename": _rename, "cast": _cast, "clip": _clip_alone, "bucketize": _bucketize, "one_hot": _one_hot,
    "ordinal": _ordinal, "hash": _hash, "concat": _concat, "softmax": _softmax, "argmax": _argmax, "threshold": _threshold,
    "top_k": _top_k, "keep": _keep,
}  # fmt: skip
