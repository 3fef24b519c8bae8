"""The classification extension, as Triton serves it: an output asked for with
`parameters.classification = k` (tritonclient's `class_count`) comes back as its top k
classes, each the string `"score:index"`, or `"score:index:label"` where the answer labels the
output's classes (a classifier's probabilities: `InferenceResult.classes`).

Each row of a batch (the first dimension of an output of two or more) is classified over its
remaining elements, best first (ties by index), giving a BYTES output of shape [rows, k]; a
one-dimensional output is classified whole, shape [k]. k past the number of classes gives
every class. A score is printed as C's `%f` prints it (a float) or as an integer, as Triton
does. An output that is not numeric, or a k that is not a positive integer (any value but
none at all: `false` and `0.0` too), is a 400 naming the output: never the raw tensor with a
200. An output's datatype is checked before the model runs (`check_rankable`), so that the
request is refused, not answered and then refused."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from sluice.codecs.datatypes import RANKED_TYPES, v2_of_numpy
from sluice.domain.errors import BadRequest

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

KEY = "classification"


def _count(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise BadRequest(
            f"classification of output '{name}' must be a positive integer (the number of classes to return), got {value!r}",
            field=f"outputs.{name}.parameters.classification",
        )
    return value


def asked(outputs: Iterable[tuple[str, Mapping[str, Any] | None]]) -> dict[str, int]:
    """{output: k} for the requested outputs (name, parameters) that ask for classification."""
    out = {}
    for name, params in outputs:
        if params and params.get(KEY) is not None:  # tritonclient sends none where not asked
            out[name] = _count(name, params[KEY])
    return out


def check_rankable(name: str, datatype: str) -> None:
    """Refuse classifying output `name` of `datatype` unless its scores can be ranked."""
    if datatype not in RANKED_TYPES:
        raise BadRequest(
            f"output '{name}' is not numeric ({datatype}): classification needs scores to rank",
            field=f"outputs.{name}.parameters.classification",
        )


def _text(score: Any) -> str:
    return f"{score:f}" if isinstance(score, float) else str(score)


def classify(name: str, array: np.ndarray, k: int, labels: Sequence[Any] | None = None) -> np.ndarray:
    """The top `k` classes of `array` as `"score:index[:label]"` strings (see the module)."""
    try:
        datatype = v2_of_numpy(array.dtype)
    except TypeError:  # no v2 datatype at all: named as NumPy names it
        datatype = str(array.dtype)
    check_rankable(name, datatype)
    rows = array.reshape(array.shape[0], math.prod(array.shape[1:])) if array.ndim >= 2 else array.reshape(1, -1)  # `-1` cannot size a row of an empty batch
    k = min(k, rows.shape[1])
    # Best first, the lower index first among equals. Floats: a stable sort of the negated
    # scores (NaN last). Integers in their own type (as doubles, two above 2**53 could tie, and
    # negating the least INT64 overflows): a stable ascending sort of each row reversed, read
    # from its end, puts the greatest first and, among equals, the lower index first.
    if rows.dtype.kind == "f":
        order = np.argsort(-rows.astype(np.float64), axis=1, kind="stable")[:, :k]
    else:
        width = rows.shape[1]
        order = (width - 1) - np.argsort(rows[:, ::-1], axis=1, kind="stable")[:, ::-1][:, :k]
    texts = []
    for row, picks in zip(rows, order, strict=True):
        for index in picks.tolist():
            text = f"{_text(row[index].item())}:{index}"
            if labels is not None and index < len(labels):
                text += f":{labels[index]}"
            texts.append(text)
    shape = (rows.shape[0], k) if array.ndim >= 2 else (k,)
    return np.array(texts, dtype=np.str_).reshape(shape)


def classified(outputs: Mapping[str, np.ndarray], classes: Mapping[str, Sequence[Any]], wanted: Mapping[str, int]) -> dict[str, np.ndarray]:
    """`outputs` with each output in `wanted` replaced by its classification."""
    if not wanted:
        return dict(outputs)
    return {name: classify(name, array, wanted[name], classes.get(name)) if name in wanted else array for name, array in outputs.items()}
