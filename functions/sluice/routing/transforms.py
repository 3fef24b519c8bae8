"""Running a `transform` node's ops (`sluice.domain.transforms`) on NumPy arrays.

Every op is vectorized over rows: one row and a million take the same code, and a row's
answer never depends on the rows beside it. A vocabulary (its index built once per op) looks
up text a row at a time, one dictionary lookup each; numbers, and hashes, are worked out once
per distinct value (`np.unique`), then spread over the rows.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

import numpy as np

from sluice.codecs.datatypes import V2_TO_NUMPY
from sluice.domain.errors import InvalidRequest
from sluice.domain.transforms import Concat, Keep, Rename, Select, TopK, Transform


def run_transform(node: Transform, arrays: dict[str, np.ndarray], columns: dict[int, list[int]]) -> dict[str, np.ndarray]:
    """The tensors `node` gives for `arrays` (the policy was checked when saved; a tensor that
    is missing here is the caller's fault, a 400 naming it). `columns`: each `select` op's
    column indices, by the op's index (`domain.transform_specs.answer_specs` resolves them)."""
    out = dict(arrays)
    for i, op in enumerate(node.ops):
        apply = _APPLY.get(op.op)
        if apply is not None:  # the element-wise ops: one tensor in, one out
            out[op.target] = apply(op, _get(out, op.input))
        elif isinstance(op, Select):
            out[op.target] = _columns(_get(out, op.input))[:, columns[i]]
        elif isinstance(op, Keep):
            out = {name: _get(out, name) for name in op.names}
        elif isinstance(op, Concat):
            out[op.output] = np.concatenate([_columns(_get(out, name)).astype(np.float32, copy=False) for name in op.inputs], axis=1)
        elif isinstance(op, Rename):
            out[op.output] = out.pop(op.input) if op.input in out else _get(out, op.input)
        elif isinstance(op, TopK):
            values, indices = _top_k(op, _get(out, op.input))
            out[op.target], out[op.indices] = values, indices
    return out


def _get(arrays: dict[str, np.ndarray], name: str) -> np.ndarray:
    if name not in arrays:
        raise InvalidRequest(f"the transform needs tensor '{name}', and the request has {sorted(arrays)}", field=f"inputs.{name}")
    return arrays[name]


def _columns(x: np.ndarray) -> np.ndarray:
    return x.reshape(-1, 1) if x.ndim == 1 else x


def _floats(x: np.ndarray) -> np.ndarray:
    return x if x.dtype in (np.float32, np.float64) else x.astype(np.float32)


def _params(values: Any, x: np.ndarray) -> Any:
    """Per-column values as an array of x's type; one number stays a Python number, which
    NumPy takes in x's type (NEP 50), with no array built per request."""
    return np.asarray(values, dtype=x.dtype) if isinstance(values, list) else values


def _fill(op: Any, x: np.ndarray) -> np.ndarray:
    x = _floats(x)
    return np.where(np.isnan(x), op.value, x)


def _standardize(op: Any, x: np.ndarray) -> np.ndarray:
    x = _floats(x)
    return (x - _params(op.mean, x)) / _params(op.std, x)


def _min_max(op: Any, x: np.ndarray) -> np.ndarray:
    x = _floats(x)
    low = np.asarray(op.min, dtype=x.dtype)
    return (x - low) / (np.asarray(op.max, dtype=x.dtype) - low)


def _clip(op: Any, x: np.ndarray) -> np.ndarray:
    return np.clip(x, op.min, op.max).astype(x.dtype, copy=False)


def _log1p(op: Any, x: np.ndarray) -> np.ndarray:
    x = _floats(x)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.log1p(x)


def _bucketize(op: Any, x: np.ndarray) -> np.ndarray:
    return np.searchsorted(np.asarray(op.boundaries, dtype=np.float64), x, side="right").astype(np.int64)


def _distinct(x: np.ndarray) -> tuple[list[Any], np.ndarray]:
    """Each distinct value once (text as str) and, per row, the index of its value."""
    flat = x.reshape(-1)
    if flat.dtype == object:
        flat = np.array([_text(v) for v in flat], dtype=object) if flat.size else flat
        values, inverse = np.unique(flat.astype(str), return_inverse=True)
    else:
        values, inverse = np.unique(flat, return_inverse=True)
    return values.tolist(), inverse.reshape(-1)


def _lookup(op: Any, x: np.ndarray) -> np.ndarray:
    """Each row's index in the op's vocabulary, -1 for a value not in it."""
    index = op.index
    flat = x.reshape(-1)
    if flat.dtype == object:  # text: one dictionary lookup a row (each row is read as text anyway)
        return np.array([index.get(v if type(v) is str else _text(v), -1) for v in flat.tolist()], dtype=np.int64)
    values, inverse = _distinct(flat)
    found = np.array([index.get(v, -1) for v in values], dtype=np.int64)
    return found[inverse] if len(values) else np.empty(0, dtype=np.int64)


def _text(value: Any) -> str:
    return value if type(value) is str else value.decode() if isinstance(value, bytes) else str(value)


def _one_hot(op: Any, x: np.ndarray) -> np.ndarray:
    at = _lookup(op, x)
    width = len(op.vocabulary) + (op.unknown == "column")
    out = np.zeros((at.shape[0], width), dtype=np.float32)
    known = at >= 0
    out[np.flatnonzero(known), at[known]] = 1.0
    if op.unknown == "column":
        out[~known, -1] = 1.0
    return out


def _ordinal(op: Any, x: np.ndarray) -> np.ndarray:
    if x.dtype == object:  # text: each row's index, or `unknown`, straight into the answer
        index, unknown = op.index, op.unknown
        codes = [index.get(v if type(v) is str else _text(v), unknown) for v in x.reshape(-1).tolist()]
        return np.array(codes, dtype=np.float32).reshape(-1, 1)
    at = _lookup(op, x)
    return np.where(at >= 0, at, op.unknown).astype(np.float32).reshape(-1, 1)


def stable_bucket(value: Any, buckets: int) -> int:
    """BLAKE2b of the value's text, as an unsigned 64-bit number, modulo `buckets`."""
    digest = hashlib.blake2b(str(value).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") % buckets


def _hash(op: Any, x: np.ndarray) -> np.ndarray:
    values, inverse = _distinct(x)
    found = np.array([stable_bucket(v, op.buckets) for v in values], dtype=np.int64)
    return (found[inverse] if len(values) else np.empty(0, dtype=np.int64)).reshape(-1, 1)


def _softmax(op: Any, x: np.ndarray) -> np.ndarray:
    x = _floats(x)
    e = np.exp(x - x.max(axis=-1, keepdims=True)) if x.size else x
    return e / e.sum(axis=-1, keepdims=True) if x.size else x


def _argmax(op: Any, x: np.ndarray) -> np.ndarray:
    at = np.argmax(x, axis=-1) if x.size else np.empty(0, dtype=np.int64)
    if op.labels is None:
        return at.astype(np.int64)
    return np.array(op.labels, dtype=object)[at]


def _threshold(op: Any, x: np.ndarray) -> np.ndarray:
    above = x.reshape(-1) >= op.cutoff
    return np.array(op.labels, dtype=object)[above.view(np.uint8)] if op.labels else above


def _top_k(op: TopK, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    x = _floats(x)
    order = np.argsort(-x, axis=-1, kind="stable")[:, : op.k]
    return np.take_along_axis(x, order, axis=-1), order.astype(np.int64)


def _platt(op: Any, x: np.ndarray) -> np.ndarray:
    x = _floats(x)
    return 1.0 / (1.0 + np.exp(-(op.a * x + op.b)))  # Python numbers: computed in x's type (NEP 50)


def _cast(op: Any, x: np.ndarray) -> np.ndarray:
    return x.astype(V2_TO_NUMPY[op.datatype])


_APPLY: dict[str, Callable[[Any, np.ndarray], np.ndarray]] = {
    "cast": _cast, "fill": _fill, "standardize": _standardize, "min_max": _min_max, "clip": _clip, "log1p": _log1p,
    "bucketize": _bucketize, "one_hot": _one_hot, "ordinal": _ordinal, "hash": _hash, "softmax": _softmax,
    "argmax": _argmax, "threshold": _threshold, "platt": _platt,
}  # fmt: skip
