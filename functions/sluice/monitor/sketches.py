"""Profiles: per column of a deployment's inputs and outputs, the rows seen, the missing ones,
and a mergeable sketch of the values, Apache DataSketches' KLL quantiles sketch for numbers and
its frequent-items sketch for categories (text, booleans). Two profiles of the same columns
merge into the profile of both streams, whatever process or window made them.

A tensor is cut into columns: a `[batch]` or `[batch, 1]` tensor is one column named after it;
a `[batch, F]` tensor is F columns named by its signature's `feature_names` (or its classes,
for a probabilities output), else `name[j]`; wider or deeper tensors (images, embeddings past
`max_columns`) are not profiled.

datasketches is imported on first use: only the processes that profile pay for it.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, Self, TypeVar

from sluice.domain.errors import InvalidInput
from sluice.domain.results import rows_of

if TYPE_CHECKING:  # NumPy is imported where used: sluice serve's supervisor reads these modules
    from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence

    import numpy as np

    from sluice.domain.signature import Signature


class Mergeable(Protocol):
    def merge(self, other: Self) -> None: ...


K = TypeVar("K")
M = TypeVar("M", bound=Mergeable)


def merged_by(parts: Iterable[tuple[K, M]]) -> dict[K, M]:
    """Parts read back (profiles, labelled outcomes) merged per key: the first of each key
    kept, the others merged into it."""
    out: dict[K, M] = {}
    for key, part in parts:
        if key in out:
            out[key].merge(part)
        else:
            out[key] = part
    return out

KLL_K = 200  # normalized rank error about 1.3% per sketch (DataSketches' figure for k=200)
FREQUENT_LG_K = 8  # up to 192 distinct categories tracked exactly; more are approximated
MAX_COLUMNS = 64
NUMBER, CATEGORY = "number", "category"


def sketches() -> Any:
    try:
        import datasketches
    except ImportError as exc:  # pragma: no cover - installed with sluice[monitor]
        raise InvalidInput(
            "monitoring needs Apache DataSketches: pip install 'sluice[monitor]'", field="monitor"
        ) from exc
    return datasketches


@dataclass(slots=True)
class Column:
    kind: str  # number or category
    role: str  # input or output
    count: int = 0  # values seen, missing ones included
    missing: int = 0  # NaN numbers, None or empty categories
    sketch: Any = None

    def __post_init__(self) -> None:
        if self.sketch is None:
            ds = sketches()
            # Numbers as 32-bit floats, and as doubles once a value is past what those hold
            # exactly (`FLOAT_EXACT`): as floats an epoch second lost its last digits (1700000640
            # read back for 1700000001…600) and an FP64 value past 3.4e38 became infinite (every
            # quantile null, a drift of 0 for traffic 10^261 times the baseline's). Not doubles
            # throughout: their sketch is twice the size, and a window's 64 columns of them would
            # not fit the 400 KB of one DynamoDB item.
            self.sketch = ds.kll_floats_sketch(KLL_K) if self.kind == NUMBER else ds.frequent_strings_sketch(FREQUENT_LG_K)

    def add(self, values: np.ndarray, sample: np.ndarray | None = None) -> None:
        """Every value counted; the sketch takes those at the `sample` rows (all by default)."""
        import numpy as np
        self.count += len(values)
        if self.kind == NUMBER:
            numbers = np.ascontiguousarray(values, dtype=np.float64)
            nan = np.isnan(numbers)
            self.missing += int(np.count_nonzero(nan))
            doubles = sketches().kll_doubles_sketch
            if not isinstance(self.sketch, doubles) and not nan.all() and float(np.max(np.abs(numbers[~nan]))) > FLOAT_EXACT:
                self.sketch = _doubles(self.sketch)
            if not isinstance(self.sketch, doubles):
                numbers = numbers.astype(np.float32)
            if not numbers.flags.writeable:  # a runtime's read-only answer (Triton's): the sketch takes writable buffers only
                numbers = numbers.copy()
            self.sketch.update(numbers if sample is None else numbers[sample])  # NaN is left out by the sketch itself
            return
        if values.dtype.kind in "OSU":
            self.missing += _empty(values)
            values = values if sample is None else values[sample]
            tally = _tally(values)
            if tally is not None:  # text (and None): counted by value, each distinct value made a word once
                for word in sorted(tally):
                    self.sketch.update(word, tally[word])
                return
            words = np.array([_word(v) for v in values], dtype=object)
        else:
            words = (values if sample is None else values[sample]).astype(str)
        kept = words[words != ""]
        if len(kept):
            found, counts = np.unique(kept.astype(str), return_counts=True)
            for word, n in zip(found.tolist(), counts.tolist(), strict=True):
                self.sketch.update(word, n)

    def merge(self, other: Column) -> None:
        self.count += other.count
        self.missing += other.missing
        if self.kind == NUMBER and type(self.sketch) is not type(other.sketch):  # one of them doubles: both
            self.sketch = _doubles(self.sketch)
            self.sketch.merge(_doubles(other.sketch))
            return
        self.sketch.merge(other.sketch)

    @property
    def seen(self) -> int:
        return self.count - self.missing

    def to_dict(self) -> dict[str, Any]:
        body = base64.b64encode(self.sketch.serialize()).decode()
        doc = {"kind": self.kind, "role": self.role, "count": self.count, "missing": self.missing, "sketch": body}
        if self.kind == NUMBER and isinstance(self.sketch, sketches().kll_doubles_sketch):
            doc["numbers"] = DOUBLES  # else (and in profiles written before) of 32-bit floats
        return doc

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Column:
        ds = sketches()
        kind = data["kind"]
        raw = base64.b64decode(data["sketch"])
        if kind != NUMBER:
            sketch = ds.frequent_strings_sketch.deserialize(raw)
        else:
            sketch = (ds.kll_doubles_sketch if data.get("numbers") == DOUBLES else ds.kll_floats_sketch).deserialize(raw)
        return cls(kind, data["role"], int(data["count"]), int(data["missing"]), sketch)

    def summary(self) -> dict[str, Any]:
        """What a person reads: count, missing rate, range and quantiles, or the top categories."""
        out: dict[str, Any] = {
            "kind": self.kind, "role": self.role, "count": self.count,
            "missing_rate": round(self.missing / self.count, 6) if self.count else None,
        }  # fmt: skip
        if self.sketch.is_empty():
            return out
        if self.kind == NUMBER:
            qs = self.sketch.get_quantiles([0.01, 0.05, 0.25, 0.5, 0.75, 0.95, 0.99])
            out |= {"min": float(self.sketch.get_min_value()), "max": float(self.sketch.get_max_value()),
                    "quantiles": dict(zip(("p1", "p5", "p25", "p50", "p75", "p95", "p99"), map(float, qs), strict=True))}  # fmt: skip
        else:
            top = frequent(self.sketch)[:10]
            total = self.sketch.total_weight
            out["top"] = [{"value": v, "share": round(n / total, 6)} for v, n in top]
        return out


def _doubles(sketch: Any) -> Any:
    """A numbers sketch as doubles: one of floats (a profile written before they were doubles)
    made again from its retained items and their weights, which is what it summarizes."""
    import numpy as np

    ds = sketches()
    if isinstance(sketch, ds.kll_doubles_sketch):
        return sketch
    made = ds.kll_doubles_sketch(KLL_K)
    if sketch.is_empty():
        return made
    items = sorted(sketch)  # (item, weight): a compacted item stands for 2^level values
    # Its exact least and greatest values stand for one value each of the items at the ends,
    # which compaction may have left out: the range reads as it did.
    ends = [sketch.get_min_value(), sketch.get_max_value()] if sketch.n > 1 else [sketch.get_min_value()]
    items[0] = (items[0][0], items[0][1] - 1)
    if len(ends) == 2:
        items[-1] = (items[-1][0], items[-1][1] - 1)
    made.update(np.asarray(ends, dtype=np.float64))
    for item, weight in items:
        while weight > 0:
            part = min(weight, 1 << 16)
            made.update(np.full(part, item, dtype=np.float64))
            weight -= part
    return made


def frequent(sketch: Any) -> list[tuple[str, int]]:
    """A frequent-items sketch's items and their estimated counts, most frequent first."""
    ds = sketches()
    rows = sketch.get_frequent_items(ds.frequent_items_error_type.NO_FALSE_NEGATIVES)
    return [(row[0], int(row[1])) for row in rows]


def _empty(values: np.ndarray) -> int:
    """None or empty text among text values (object, str or bytes arrays), as `_tally` leaves
    them out: a number sent to a text input (0, 0.0) is a value, not a missing one."""
    import numpy as np
    if values.dtype.kind == "U":
        return int(np.count_nonzero(values == ""))
    if values.dtype.kind == "S":
        return int(np.count_nonzero(values == b""))
    return sum(v is None or (isinstance(v, str | bytes) and not v) for v in values.tolist())


TEXT = (str, bytes, type(None))
DOUBLES = "f64"  # a numbers column's sketch: KLL of doubles (absent: of 32-bit floats)
FLOAT_EXACT = float(1 << 24)  # past this a 32-bit float holds no longer every whole number


def _tally(values: np.ndarray) -> dict[str, int] | None:
    """The non-empty words of text values (str, bytes, None) and how often each comes, the
    same as making each value a word and counting the words, at the cost of a hash per value;
    None where a value is anything else (a number in an object array: made words one by one)."""
    from collections import Counter

    try:
        found = Counter(values.tolist())
    except TypeError:  # unhashable values
        return None
    if not all(type(v) in TEXT for v in found):
        return None
    tally: dict[str, int] = {}
    for value, n in found.items():
        word = _word(value)
        if word:
            tally[word] = tally.get(word, 0) + n
    return tally


def _word(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


@dataclass(slots=True)
class Profile:
    rows: int = 0
    columns: dict[str, Column] = field(default_factory=dict)

    def add(self, role: str, named: Iterator[tuple[str, np.ndarray]], sample: np.ndarray | None = None, pause: Callable[[], None] | None = None) -> None:
        """Each named column's values added (`pause`: called after each, a background fold's
        chance for the event loop to take the GIL)."""
        for name, values in named:
            column = self.columns.get(name)
            if column is None:
                kind = NUMBER if values.dtype.kind in "fiu" else CATEGORY
                column = self.columns[name] = Column(kind, role)
            elif (column.kind == NUMBER) != (values.dtype.kind in "fiu"):
                continue  # a type this column was not made for: not profiled
            column.add(values, sample)
            if pause is not None:
                pause()

    def add_rows(
        self, inputs: Mapping[str, np.ndarray], outputs: Mapping[str, np.ndarray] | None,
        signature: Signature | None, classes: Mapping[str, Sequence[Any]] | None = None, *, max_columns: int = MAX_COLUMNS,
        sample: int | None = None, rng: np.random.Generator | None = None, pause: Callable[[], None] | None = None,
    ) -> None:  # fmt: skip
        """Rows of input tensors and, where given, the outputs; with `sample`, every row is
        counted and a uniform sample of that many (drawn by `rng`, a fresh one by default)
        goes into the sketches; `pause`, where given, is called after each column."""
        import numpy as np
        if not inputs:
            return
        n = rows_of(inputs)
        self.rows += n
        rows = None
        if sample is not None and n > sample:
            rows = np.sort((rng or np.random.default_rng()).choice(n, size=sample, replace=False))
        names = {s.name: s.feature_names for s in signature.inputs} if signature is not None else {}
        self.add("input", columns_of(inputs, names, max_columns), rows, pause)
        if outputs:
            self.add("output", columns_of(outputs, dict(classes or {}), max_columns, qualify=True), rows, pause)

    def merge(self, other: Profile) -> None:
        self.rows += other.rows
        for name, column in other.columns.items():
            mine = self.columns.get(name)
            if mine is None:
                self.columns[name] = column
            elif mine.kind == column.kind:
                mine.merge(column)

    def to_dict(self) -> dict[str, Any]:
        return {"rows": self.rows, "columns": {name: c.to_dict() for name, c in self.columns.items()}}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Profile:
        return cls(int(data.get("rows", 0)), {name: Column.from_dict(c) for name, c in data.get("columns", {}).items()})

    def summary(self) -> dict[str, Any]:
        return {"rows": self.rows, "columns": {name: c.summary() for name, c in sorted(self.columns.items())}}


def profiled(array: np.ndarray, max_columns: int) -> bool:
    """Whether `columns_of` reads this tensor: one value per row, or up to `max_columns` columns."""
    return array.ndim == 1 or (array.ndim == 2 and array.shape[1] <= max_columns)


def columns_of(
    arrays: Mapping[str, np.ndarray], names: Mapping[str, Sequence[Any] | None], max_columns: int, *, qualify: bool = False
) -> Iterator[tuple[str, np.ndarray]]:
    """Each tensor's columns, named (module docstring): by `names[tensor]` where it has one per
    column, standing alone (input features) or, with `qualify`, as `tensor[name]` (an output's classes)."""
    import numpy as np
    for tensor, array in arrays.items():
        if not isinstance(array, np.ndarray):
            continue
        if array.ndim == 1:
            yield tensor, array
        elif array.ndim == 2 and array.shape[1] == 1:
            yield tensor, array[:, 0]
        elif array.ndim == 2 and array.shape[1] <= max_columns:
            labels = names.get(tensor)
            if labels is None or len(labels) != array.shape[1]:
                yield from ((f"{tensor}[{j}]", array[:, j]) for j in range(array.shape[1]))
            else:
                yield from ((f"{tensor}[{label}]" if qualify else str(label), array[:, j]) for j, label in enumerate(labels))
