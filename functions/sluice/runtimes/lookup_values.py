"""The values a lookup found for its distinct entities, column by column (`Values`): whether
each entity is in the store, its record's event time, and each feature cast once to its
declared datatype beside a mask of the values that are there. The store's answer (`Found`,
lists as the store hands them back) is read into this shape once, when fetched; the feature
cache (`sluice.runtimes.lookup_cache`) keeps it, and a request's rows are served from it with
array operations only (`take`, `put`), whatever the number of rows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from sluice.codecs.datatypes import V2_TO_NUMPY
from sluice.domain.errors import BackendError
from sluice.runtimes.feature_stores import epoch_seconds

if TYPE_CHECKING:
    from sluice.domain.lookups import Lookup
    from sluice.runtimes.feature_stores import Found, Key

_TRUE, _FALSE = frozenset(("true", "1", "1.0", "t", "yes")), frozenset(("false", "0", "0.0", "f", "no"))
_FILLER = {"BYTES": "", "BOOL": False}  # in place of a missing value, masked out (`present`)


@dataclass(slots=True)
class Values:
    """`found[i]`: entity i is in the store; `times[i]`: its record's event time (epoch seconds,
    NaN: none); `columns[name][i]`: its feature, meaningful where `present[name][i]`."""

    found: np.ndarray
    times: np.ndarray
    columns: dict[str, np.ndarray]
    present: dict[str, np.ndarray]

    def __len__(self) -> int:
        return len(self.found)

    @classmethod
    def empty(cls, node: Lookup, n: int) -> Values:
        return cls(
            np.zeros(n, bool),
            np.full(n, math.nan),
            {f.name: np.empty(n, V2_TO_NUMPY[f.datatype]) for f in node.features},
            {f.name: np.zeros(n, bool) for f in node.features},
        )

    def take(self, at: np.ndarray) -> Values:
        """The entities at `at` (indices or a mask), copied."""
        return Values(self.found[at], self.times[at], {k: v[at] for k, v in self.columns.items()}, {k: v[at] for k, v in self.present.items()})

    def put(self, at: np.ndarray, other: Values) -> None:
        """`other`'s entities placed at `at` (indices or a mask)."""
        self.found[at], self.times[at] = other.found, other.times
        for name, column in self.columns.items():
            column[at] = other.columns[name]
            self.present[name][at] = other.present[name]

    def concat(self, other: Values) -> Values:
        return Values(
            np.concatenate((self.found, other.found)),
            np.concatenate((self.times, other.times)),
            {k: np.concatenate((v, other.columns[k])) for k, v in self.columns.items()},
            {k: np.concatenate((v, other.present[k])) for k, v in self.present.items()},
        )


def from_found(node: Lookup, keys: list[Key], found: Found) -> Values:
    """What the store found for `keys` (absent: not in the store), in the keys' order, each
    feature cast to its datatype (a value that is not one: 502 naming the feature and entity)."""
    position = dict(zip(found.keys, range(len(found.keys)), strict=True))
    at = list(map(position.get, keys))  # each key's place among those found; None: not found
    seconds = [t if type(t) is float else epoch_seconds(t) for t in found.times]
    times = np.array([math.nan if i is None or seconds[i] is None else seconds[i] for i in at], dtype=np.float64)
    columns, present = {}, {}
    for feature in node.features:
        column = found.values[feature.name]
        raw = [None if i is None else column[i] for i in at]
        there = np.array([v is not None for v in raw], dtype=bool)
        if not there.all():
            filler = _FILLER.get(feature.datatype, 0)
            raw = [filler if v is None else v for v in raw]
        columns[feature.name], present[feature.name] = _array(raw, feature.datatype, node, feature.name, keys), there
    return Values(np.array([i is not None for i in at], dtype=bool), times, columns, present)


def _array(raw: list[Any], datatype: str, node: Lookup, feature: str, keys: list[Key]) -> np.ndarray:
    """The values as an array of `datatype`: at once where every value is already a number
    of the kind asked (SQLite's; DynamoDB's numbers come as text), else value by value, the
    first that is not one named with its entity."""
    dtype = V2_TO_NUMPY[datatype]
    kinds = set(map(type, raw))
    if datatype in ("FP32", "FP64") and kinds <= {float, int}:
        return np.array(raw, dtype=dtype)
    if datatype in ("INT32", "INT64") and kinds <= {int}:
        return np.array(raw, dtype=dtype)
    return np.array([_cast(v, datatype, node, feature, k) for v, k in zip(raw, keys, strict=True)], dtype=dtype)


def _cast(value: Any, datatype: str, node: Lookup, feature: str, key: Key) -> Any:
    try:
        if datatype == "BYTES":
            return value if isinstance(value, str) else str(value)
        if datatype == "BOOL":
            if isinstance(value, bool):
                return value
            text = str(value).strip().lower()
            if text in _TRUE or text in _FALSE:
                return text in _TRUE
            raise ValueError(text)
        if isinstance(value, bool | dict | list | set | bytes):
            raise ValueError(value)
        if datatype in ("INT32", "INT64"):
            number = float(value)
            if not number.is_integer():
                raise ValueError(value)
            return int(number)
        return float(value)
    except (ValueError, TypeError, OverflowError):
        raise BackendError(
            f"{node.store} '{node.table}' holds {str(value)[:40]!r} for feature '{feature}' of {entity(node, key)}: not a {datatype} value",
            field="policy",
        ) from None


def entity(node: Lookup, key: Key) -> str:
    return ", ".join(f"{name}={value!r}" for name, value in zip(node.keys, key, strict=True))
