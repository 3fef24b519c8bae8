"""A lookup's distinct entities (`Entities`) and the values found for them, column by column
(`Values`): whether each entity is in the store, its record's event time, and each feature
cast once to its declared datatype beside a mask of the values that are there.

For a cached lookup the rows' keys are told apart by their hashes with numpy (one `hash` a row
at C speed, then a sort; the keys of one hash compared, and taken one by one should two
differ), not a dict per row; the feature cache finds rows' entries by the same hashes. The
store's answer (`Found`, lists as the store hands them back) is read into `Values` once, when
fetched; the feature cache (`sluice.runtimes.lookup_cache`) keeps that, and a request's rows
are served from it with array operations only (`take`, `put`).

An uncached lookup keeps nothing, so it skips all that (`spread`): its distinct keys by a dict,
the store's lists cast to one array a feature, spread to the rows only where keys repeat.
That is what a request of a few rows costs least with (CPU time, the step alone: about 60 µs
at batch 1 against 100 µs through `Values`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import numpy as np

from sluice.codecs.coded_text import CodedText, coded
from sluice.codecs.datatypes import V2_TO_NUMPY
from sluice.domain.errors import BackendError, InvalidInput, RowInvalid, Unprocessable
from sluice.domain.lookups import WHOLE, holds
from sluice.runtimes.found import epoch_seconds

if TYPE_CHECKING:
    from sluice.domain.lookups import Lookup
    from sluice.runtimes.found import Found, Key

_TRUE, _FALSE = frozenset(("true", "1", "1.0", "t", "yes")), frozenset(("false", "0", "0.0", "f", "no"))
_FILLER = {"BYTES": "", "BOOL": False}  # in place of a missing value, masked out (`present`)
_NUMBERS = {"FP32": frozenset((float, int)), "FP64": frozenset((float, int)), "INT32": frozenset((int,)), "INT64": frozenset((int,))}  # taken at once
SMALL = 256  # up to this many rows a dict tells keys apart sooner than a sort
_FP32_MAX = float(np.finfo(np.float32).max)  # a number below it is one FP32 holds
_LARGEST = 2**64  # past any integer datatype's range: a number this large is refused before it is spelled out


@dataclass(slots=True)
class Entities:
    """A call's distinct entities, first seen first: `objs` their keys as the rows hold them (a
    string or an integer; a tuple of them for two keys), each row's place among them
    (`inverse`), and Python's hash of each key (this process's; worked out when first asked)."""

    objs: np.ndarray
    inverse: np.ndarray
    known: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.objs)

    @property
    def hashes(self) -> np.ndarray:
        if self.known is None:
            self.known = hashes_of(self.objs.tolist())
        return self.known


def hashes_of(keys: list[Any]) -> np.ndarray:
    return np.fromiter(map(hash, keys), dtype=np.int64, count=len(keys))


def keys_of(node: Lookup, arrays: dict[str, np.ndarray]) -> tuple[np.ndarray, list[Any]]:
    """Each row's entity key (a string or an integer; a tuple of them for two keys), read from
    the inputs the lookup's keys name: as an array and as a list."""
    columns: list[list[Any]] = []
    rows, every = -1, None
    for key, name in node.keys.items():
        array = arrays.get(name)
        if array is None:
            raise InvalidInput(f"lookup key '{key}' is read from input '{name}', which the step was not given", field=f"inputs.{name}")
        flat = array.reshape(-1) if array.ndim == 2 and array.shape[1] == 1 else array
        if flat.ndim != 1 or (rows >= 0 and flat.shape[0] != rows):
            raise InvalidInput(f"input '{name}' holds lookup key '{key}': one value a row", field=f"inputs.{name}")
        rows = flat.shape[0]
        if len(node.keys) == 1 and coded(flat) is not None:  # a batch job's text column: strings all, no copy
            return flat, flat  # type: ignore[return-value]
        if flat.dtype.kind in "OUS":
            values = flat.tolist()
            if set(map(type, values)) != {str}:
                values = [_key_text(v, name, key, i) for i, v in enumerate(values)]
            elif flat.dtype.kind == "O":
                every = flat  # the rows' own strings: no copy
        elif flat.dtype.kind in "iu":
            values = flat.tolist()
        else:
            raise InvalidInput(f"input '{name}' holds lookup key '{key}': strings or integers, not {flat.dtype}", field=f"inputs.{name}")
        columns.append(values)
    together: list[Any] = columns[0] if len(columns) == 1 else list(zip(*columns, strict=True))
    if every is None or len(columns) > 1:
        every = np.fromiter(together, dtype=object, count=rows)
    return every, together


def _key_text(value: Any, name: str, key: str, row: int) -> str:
    """A text key's value as text: a string, bytes in UTF-8, or a whole number as its digits; a
    null (no entity) or any other value is refused naming the input and the row."""
    if isinstance(value, str):  # NumPy's str_ too: a function step's text answer
        return str(value)
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            pass
    elif type(value) is int or (isinstance(value, np.integer) and not isinstance(value, np.bool_)):
        return str(value)
    what = "null: no entity" if value is None else f"{type(value).__name__} {str(value)[:40]!r}, not a string"
    raise RowInvalid(f"input '{name}' holds lookup key '{key}': ", row, f" is {what}", field=f"inputs.{name}")


def distinct(every: np.ndarray, together: list[Any], hashes: np.ndarray | None = None) -> Entities:
    """The distinct entities among rows' keys (`every`, as a list `together`; `hashes`: theirs,
    when known)."""
    if len(together) > SMALL:
        hashes = hashes_of(together) if hashes is None else hashes
        _, first, inverse = np.unique(hashes, return_index=True, return_inverse=True)
        order = np.argsort(first, kind="stable")  # first seen first
        rank = np.empty_like(order)
        rank[order] = np.arange(len(order))
        first, inverse = first[order], rank[inverse.reshape(-1)]
        objs = every[first]
        if bool((objs[inverse] == every).all()):
            return Entities(objs, inverse, hashes[first])
    found = list(dict.fromkeys(together))  # few rows, or two keys of one hash (integers can be made to)
    place = dict(zip(found, range(len(found)), strict=True))
    inverse = np.fromiter(map(place.__getitem__, together), dtype=np.intp, count=len(together))
    return Entities(np.fromiter(found, dtype=object, count=len(found)), inverse)


def coded_entities(text: CodedText) -> Entities:
    """The distinct entities among rows of text with codes (`sluice.codecs.coded_text`), first
    seen first as `distinct` gives them, found by the rows' codes: no hash or dict a row."""
    codes = text.codes
    assert codes is not None
    n, size = len(codes), len(text.dictionary)
    first = np.full(size, n, dtype=np.intp)
    np.minimum.at(first, codes, np.arange(n, dtype=np.intp))  # each code's first row
    used = np.flatnonzero(first < n)
    used = used[np.argsort(first[used], kind="stable")]  # first seen first
    rank = np.empty(size, dtype=np.intp)
    rank[used] = np.arange(len(used), dtype=np.intp)
    return Entities(np.asarray(text)[first[used]], rank[codes])


def store_keys(objs: list[Any], types: tuple[str, ...] = ()) -> list[Key]:
    """Entities' keys as a store takes them: a tuple of text (an integer as its digits).
    `types`: the keys' (`S`: text), when known."""
    if types == ("S",):
        return list(zip(objs))
    return [tuple(v if type(v) is str else str(v) for v in k) if type(k) is tuple else (k if type(k) is str else str(k),) for k in objs]


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
    n = len(keys)
    position = dict(zip(found.keys, range(len(found.keys)), strict=True))
    at = list(map(position.get, keys))  # each key's place among those found; None: not found
    if found.times.count(None) != len(found.times):
        seconds = [t if type(t) is float else epoch_seconds(t) for t in found.times]
        times = np.array([math.nan if i is None or seconds[i] is None else seconds[i] for i in at], dtype=np.float64)
    else:  # no event time read, or none held
        times = np.full(n, math.nan)
    everyone = None not in at
    columns, present = {}, {}
    for feature in node.features:
        column = found.values[feature.name]
        raw = column if everyone and len(column) == n and found.keys == keys else [None if i is None else column[i] for i in at]
        if None in raw:
            there = np.array([v is not None for v in raw], dtype=bool)
            filler = _FILLER.get(feature.datatype, 0)
            raw = [filler if v is None else v for v in raw]
        else:
            there = np.ones(n, dtype=bool)
        columns[feature.name], present[feature.name] = _array(raw, feature.datatype, node, feature.name, keys), there
    return Values(np.ones(n, dtype=bool) if everyone else np.array([i is not None for i in at], dtype=bool), times, columns, present)


def spread(node: Lookup, keys: list[Key], found: Found, inverse: np.ndarray | None, now: float) -> dict[str, np.ndarray]:
    """One array per feature (and the event times) in the rows' order, straight from what the
    store found for the distinct `keys` (an uncached lookup: no `Values` kept), each key's values
    spread to its rows (`inverse`; None: a row a key). The rules of missing and stale values are
    those of the cached path (`sluice.runtimes.lookups`), worked on the store's lists.

    Where the store found every key, in the keys' order, and no event time is read (a request's
    usual answer), each feature's list is the column as it is: no place worked out per key."""
    times: list[float] | None = None
    if found.keys == keys and not (node.event_time_output or node.max_age_s is not None):
        at: list[int | None] | None = None  # key i is found at i
        gaps = False
    else:
        position = dict(zip(found.keys, range(len(found.keys)), strict=True))
        at = list(map(position.get, keys))  # each key's place among those found; None: not found
        if node.event_time_output or node.max_age_s is not None:
            seconds = [t if type(t) is float else epoch_seconds(t) for t in found.times]
            times = [math.nan if i is None or seconds[i] is None else seconds[i] for i in at]  # a stale record's too
            if node.max_age_s is not None:  # a stale record is a missing one (no event time: stale)
                oldest = now - node.max_age_s
                at = [None if i is None or not t >= oldest else i for i, t in zip(at, times, strict=True)]
        gaps = None in at
        if not gaps and found.keys == keys:  # the store answered in the keys' order
            at = None
    out: dict[str, np.ndarray] = {}
    for feature in node.features:
        column = found.values[feature.name]
        raw = column if at is None else [None if i is None else column[i] for i in at] if gaps else [column[i] for i in at]
        if None in raw:
            if feature.default is None:
                first = raw.index(None)
                why = "the entity is not in the store" if keys[first] not in found.keys else (
                    "the feature is missing" if at is None or at[first] is not None
                    else f"its record is older than max_age_s ({node.max_age_s:g} s) or has no event time"
                )  # fmt: skip
                raise missing(node, feature.name, keys[first], why)
            raw = [feature.default if v is None else v for v in raw]
        unique = _array(raw, feature.datatype, node, feature.name, keys)
        out[feature.name] = unique if inverse is None else unique[inverse]
    if node.event_time_output:
        stamps = np.array(times, dtype=np.float64)
        out[node.event_time_output] = stamps if inverse is None else stamps[inverse]
    return out


def _array(raw: list[Any], datatype: str, node: Lookup, feature: str, keys: list[Key]) -> np.ndarray:
    """The values as an array of `datatype`: at once where every value is already a number
    of the kind asked (SQLite's; DynamoDB's numbers come as text) and the datatype holds them,
    else value by value, the first that is not one named with its entity."""
    dtype = V2_TO_NUMPY[datatype]
    numbers = _NUMBERS.get(datatype)
    if numbers is not None and numbers.issuperset(map(type, raw)):
        try:
            if datatype != "FP32" or max(map(abs, raw), default=0.0) < _FP32_MAX:  # NumPy refuses an integer out of range
                return np.array(raw, dtype=dtype)  # itself; FP64 holds any other, FP32 a number below its largest
            with np.errstate(over="raise"):  # else a number past FP32's range quietly becomes infinity (NumPy's
                return np.array(raw, dtype=dtype)  # error state is a context variable: set only where it may)
        except (OverflowError, FloatingPointError):
            pass  # a number the datatype does not hold: `_cast` names it
    return np.array([_cast(v, datatype, node, feature, k) for v, k in zip(raw, keys, strict=True)], dtype=dtype)


def _cast(value: Any, datatype: str, node: Lookup, feature: str, key: Key) -> Any:
    """One value as `datatype` holds it, or a 502 naming the feature and the entity: text (UTF-8
    bytes decoded, a number as its digits) for BYTES, never a container's Python text; an exact
    integer within the datatype's range for INT32/INT64 (digits past 2**53 kept); a float that
    does not overflow for FP32/FP64."""
    try:
        if datatype == "BYTES":
            if type(value) is str:
                return value
            if type(value) is bytes:
                return value.decode("utf-8")
            if type(value) in (int, float):
                return str(value)
            raise ValueError(value)
        if datatype == "BOOL":
            if isinstance(value, bool):
                return value
            text = str(value).strip().lower()
            if text in _TRUE or text in _FALSE:
                return text in _TRUE
            raise ValueError(text)
        if isinstance(value, bool | dict | list | set | bytes):
            raise ValueError(value)
        number = _whole(value) if datatype in WHOLE else float(value)
        if holds(datatype, number):
            return number
        raise ValueError(value)
    except (ValueError, TypeError, ArithmeticError):
        raise BackendError(
            f"{node.store} '{node.table}' holds {str(value)[:40]!r} for feature '{feature}' of {entity(node, key)}: not a {datatype} value",
            field="policy",
        ) from None


def _whole(value: Any) -> int:
    """A whole number exactly (DynamoDB's and SageMaker's come as text: never through a float,
    which keeps 53 bits), whatever its spelling ("12", "1.2E+1", 12.0); else an error `_cast` turns
    into its 502."""
    if type(value) is int:
        return value
    if type(value) is str:
        try:
            return int(value)
        except ValueError:
            pass  # "1.2E+1", "12.0": Decimal's to read
    exact = Decimal(value)
    if not (exact.is_finite() and abs(exact) <= _LARGEST and exact == exact.to_integral_value()):
        raise ValueError(value)  # checked before `int`, which would spell out 1E+999999999
    return int(exact)


def entity(node: Lookup, key: Key) -> str:
    return ", ".join(f"{name}={value!r}" for name, value in zip(node.keys, key, strict=True))


def missing(node: Lookup, feature: str, key: Key, why: str) -> Unprocessable:
    first = next(iter(node.keys.values()))
    return Unprocessable(
        f"no value of feature '{feature}' for {entity(node, key)} in {node.store} '{node.table}': {why}, and the feature has no default",
        field=f"inputs.{first}",
        key=dict(zip(node.keys, key, strict=True)),
    )
