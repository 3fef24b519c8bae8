"""Input columns -> the tensors a version's signature takes, checked row by row.

A signature input with `feature_names` is fed by those columns, stacked on its last axis;
any other input by the column of its own name (a number per row, or a list of numbers for an
input shaped `[batch, k]`). Checking is vectorized and never raises for bad data: each row
that cannot be fed (a missing value, NaN, a word where a number belongs, a list of the wrong
length) gets a reason, and only the other rows go on to the model.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from sluice.batch.integers import hidden_fractions, whole_of
from sluice.batch.pieces import EXACT_INTEGERS, exact_type
from sluice.codecs.arrow_numbers import from_numbers, to_numbers, to_text
from sluice.codecs.datatypes import FLOAT_TYPES, V2_TO_NUMPY
from sluice.domain.errors import InvalidInput
from sluice.domain.values import parse_number

if TYPE_CHECKING:
    from collections.abc import Sequence

    import pyarrow as pa

    from sluice.domain.signature import Signature


@dataclass(frozen=True, slots=True)
class Feed:
    """Where one signature input's values come from."""

    input: str
    columns: tuple[str, ...]  # stacked features, or the one column holding the input
    datatype: str
    stacked: bool  # columns are the features of a [batch, F] input
    width: int | None = None  # one column of lists: values per row; None: one value per row
    trailing_axis: bool = False  # one value per row for an input shaped [batch, 1]

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "columns": list(self.columns)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Feed:
        return cls(**{**data, "columns": tuple(data["columns"])})


def plan_feeds(signature: Signature, available: Sequence[str]) -> list[Feed]:
    """Match the input's columns to the signature, or say which columns are missing."""
    have = set(available)
    feeds: list[Feed] = []
    missing: list[str] = []
    for spec in signature.inputs:
        names = spec.feature_names
        if names and all(n in have for n in names):
            feeds.append(Feed(spec.name, tuple(names), spec.datatype, stacked=True))
            continue
        if spec.name in have:
            rank = len(spec.shape)
            width = spec.shape[1] if rank == 2 and spec.shape[1] != 1 else None
            if rank > 2 or (rank == 2 and width == -1):
                raise InvalidInput(
                    f"input '{spec.name}' has shape {list(spec.shape)}; batch jobs feed inputs of "
                    "one value or a fixed number of values per row",
                    field="input",
                )
            feeds.append(
                Feed(spec.name, (spec.name,), spec.datatype, stacked=False, width=width,
                     trailing_axis=rank == 2 and spec.shape[1] == 1)
            )  # fmt: skip
            continue
        missing.extend([n for n in names if n not in have] if names else [spec.name])
    if missing:
        shown = ", ".join(f"'{m}'" for m in missing[:10])
        names = list(dict.fromkeys(available))
        found = ", ".join(repr(n if len(n) <= 40 else n[:40] + "…") for n in names[:20]) + (f" and {len(names) - 20} more" if len(names) > 20 else "")
        raise InvalidInput(
            f"the input has no column {shown} (its columns are {found or 'none'}); the deployment takes "
            + "; ".join(_wants(spec) for spec in signature.inputs),
            field="input",
        )
    return feeds


def _wants(spec: Any) -> str:
    if spec.feature_names:
        return f"columns {list(spec.feature_names)} (or one column '{spec.name}')"
    return f"a column '{spec.name}'"


def needed_columns(feeds: Sequence[Feed]) -> list[str]:
    seen: dict[str, None] = {}
    for feed in feeds:
        for column in feed.columns:
            seen.setdefault(column, None)
    return list(seen)


def blame(reasons: np.ndarray, mask: np.ndarray, message: str | np.ndarray) -> None:
    """Give the rows in `mask` that have no reason yet this one (the first problem wins)."""
    target = mask & np.equal(reasons, None)
    if target.any():
        reasons[target] = message[target] if isinstance(message, np.ndarray) else message


def feed_arrays(
    feeds: Sequence[Feed], table: pa.Table, reasons: np.ndarray
) -> dict[str, np.ndarray]:
    """The arrays for every row of `table`; rows that cannot be fed get a reason in `reasons`
    (their slots in the arrays hold placeholders)."""
    arrays: dict[str, np.ndarray] = {}
    n = table.num_rows
    for feed in feeds:
        dtype = V2_TO_NUMPY[feed.datatype]
        clean = _clean_floats(feed, table) if feed.stacked else None
        if clean is not None:
            arrays[feed.input] = clean
            continue
        if feed.stacked:
            out = np.empty((n, len(feed.columns)), dtype=dtype)
            for j, name in enumerate(feed.columns):
                out[:, j] = _values(table.column(name), name, feed.datatype, reasons)
        elif feed.width is not None:
            out = _lists(table.column(feed.columns[0]), feed.columns[0], feed.datatype, feed.width, reasons)
        else:
            out = _values(table.column(feed.columns[0]), feed.columns[0], feed.datatype, reasons)
            if feed.trailing_axis:
                out = out[:, np.newaxis]
        arrays[feed.input] = out
    return arrays


def _clean_floats(feed: Feed, table: pa.Table) -> np.ndarray | None:
    """The common case in one pass: float features, no nulls, all finite. None otherwise
    (then each column is checked on its own, to say which value of which row is wrong)."""
    import pyarrow as pa

    if feed.datatype not in FLOAT_TYPES:
        return None
    columns = [table.column(name) for name in feed.columns]
    if any(c.null_count or not pa.types.is_floating(c.type) for c in columns):
        return None
    out = np.empty((table.num_rows, len(columns)), dtype=V2_TO_NUMPY[feed.datatype])
    for j, column in enumerate(columns):
        out[:, j] = to_numbers(column)
    return out if np.isfinite(out).all() else None


def _values(column: Any, name: str, datatype: str, reasons: np.ndarray) -> np.ndarray:
    """One value per row, as the datatype's dtype."""
    import pyarrow as pa

    chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
    if datatype == "BYTES" and chunks and all(_dictionary_text(c) for c in chunks):
        return np.concatenate([_text_values(c) for c in chunks]) if len(chunks) > 1 else _text_values(chunks[0])
    array = _plain(column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column)
    n = len(array)
    if array.null_count:
        blame(reasons, to_numbers(array.is_null()), f"missing value for '{name}'")
    if datatype == "BYTES":
        if not (pa.types.is_string(array.type) or pa.types.is_large_string(array.type)):
            import pyarrow.compute as pc

            array = pc.cast(array, pa.string())
        return to_text(array, null="")
    if (pa.types.is_string(array.type) or pa.types.is_large_string(array.type)) and datatype in EXACT_INTEGERS:
        array = _parse_integers(array, name, datatype, reasons)
    elif pa.types.is_string(array.type) or pa.types.is_large_string(array.type):
        array = _parse_numbers(array, name, reasons)
    elif pa.types.is_decimal(array.type):
        import pyarrow.compute as pc

        array = pc.cast(array, pa.float64(), safe=False)  # a decimal feature is a number
    elif pa.types.is_null(array.type):
        return np.zeros(n, dtype=V2_TO_NUMPY[datatype])
    elif not (pa.types.is_integer(array.type) or pa.types.is_floating(array.type) or pa.types.is_boolean(array.type)):
        blame(reasons, np.ones(n, dtype=bool), f"'{name}' is not a number")
        return np.zeros(n, dtype=V2_TO_NUMPY[datatype])
    values = to_numbers(array, null_slots=True)  # a null's rows are blamed above: 0 (False) stands in
    return _as_dtype(values, name, datatype, reasons)


def _dictionary_text(array: Any) -> bool:
    """Text as Parquet stores it (and `readers` reads it): a dictionary of strings and an
    index a row, none missing."""
    import pyarrow as pa

    t = array.type
    return pa.types.is_dictionary(t) and (pa.types.is_string(t.value_type) or pa.types.is_large_string(t.value_type)) and not array.null_count


def _text_values(array: Any) -> np.ndarray:
    """A dictionary's text a row, each distinct value one Python string shared by its rows:
    made once per value, not per row, and hashed once where a vocabulary looks it up. A slice
    of a row group carries the group's whole dictionary: where it holds more values than the
    slice has rows, only the values its rows use are made strings. The rows keep their codes
    (`CodedText`), for a lookup keyed by them to find each distinct value once."""
    from sluice.codecs.coded_text import CodedText

    indices = to_numbers(array.indices)
    dictionary = array.dictionary
    if len(dictionary) > len(indices):
        used, indices = np.unique(indices, return_inverse=True)
        dictionary = dictionary.take(used)
    codes = indices.reshape(-1)
    return CodedText.of(to_text(dictionary)[codes], codes, dictionary)


def _plain(array: Any) -> Any:
    """The values themselves: a dictionary-encoded column (as Parquet writers often store
    text, numbers as text included) decoded, a string view made a string."""
    import pyarrow as pa

    if pa.types.is_dictionary(array.type):
        array = array.dictionary_decode()
    if pa.types.is_string_view(array.type):
        array = array.cast(pa.string())
    return array


def _as_dtype(values: np.ndarray, name: str, datatype: str, reasons: np.ndarray) -> np.ndarray:
    dtype = V2_TO_NUMPY[datatype]
    if values.dtype == dtype and datatype not in FLOAT_TYPES:
        return values
    if values.dtype.kind == "f":
        nan = np.isnan(values)
        if nan.any():
            blame(reasons, nan, f"'{name}' is NaN")
        infinite = np.isinf(values)
        if infinite.any():
            blame(reasons, infinite, f"'{name}' is infinite")
        bad = nan | infinite
        if bad.any():
            values = np.where(bad, 0.0, values)
    if datatype == "BOOL":
        flag = values.astype(np.float64)
        blame(reasons, (flag != 0) & (flag != 1), f"'{name}' must be true or false (or 1 or 0)")
        return flag == 1
    if dtype.kind in "iu":
        if values.dtype.kind == "f":
            fractional = values != np.trunc(values)
            blame(reasons, fractional, f"'{name}' must be a whole number")
            values = np.where(fractional, 0.0, values)
        info = np.iinfo(dtype)
        wide = values.astype(np.float64) if values.dtype.kind == "f" else values
        outside = (wide < info.min) | (wide > info.max)
        if outside.any():
            blame(reasons, outside, f"'{name}' is out of range for {datatype}")
            values = np.where(outside, 0, values)
        return values.astype(dtype)
    with np.errstate(over="ignore"):
        cast = values.astype(dtype)
    if datatype in FLOAT_TYPES and dtype != np.float64:
        overflow = np.isinf(cast) & np.isfinite(values.astype(np.float64))
        if overflow.any():
            blame(reasons, overflow, f"'{name}' is out of range for {datatype}")
            cast[overflow] = 0
    return cast




def _parse_integers(array: Any, name: str, datatype: str, reasons: np.ndarray) -> Any:
    """Text to the 64-bit integers it writes, exactly (as floats, two ids past 2**53 would be
    one): a chunk of plain integers cast at once; any other as `_parse_numbers` reads text (as
    floats, which hold every value below 2**53 exactly), unless a value is past 2**53: then
    each value by itself, exactly (`whole_of`)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    target = exact_type(datatype)
    plain = pc.match_substring_regex(array, r"^[0-9]{1,20}$" if datatype.startswith("UINT") else r"^-?[0-9]{1,19}$")
    if pc.all(plain).as_py() is not False:  # plain integers (or missing values): Arrow reads them exactly
        try:
            return pc.cast(array, target)
        except pa.ArrowException:  # past the type's range: said value by value below
            pass
    else:
        said = np.full(len(array), None, dtype=object)
        floats = _parse_numbers(array, name, said)
        if (pc.max(pc.abs(floats)).as_py() or 0.0) < 2.0**53:  # NaN and infinity too are said as floats are
            blame(reasons, ~np.equal(said, None), said)
            blame(reasons, *hidden_fractions(array, name, datatype))  # those a float rounded away
            return floats
    parsed: list[int | None] = []
    shown: list[str] = []
    for text in array.to_pylist():
        value, why = (None, "") if text is None else whole_of(text, name, datatype)
        parsed.append(value)
        shown.append(why)
    blame(reasons, np.asarray([bool(w) for w in shown], dtype=bool), np.asarray(shown, dtype=object))
    return pa.array(parsed, type=target)


def _parse_numbers(array: Any, name: str, reasons: np.ndarray) -> Any:
    """Text to float64: all at once when every value parses, else value by value, blaming
    the rows that do not."""
    import pyarrow as pa
    import pyarrow.compute as pc

    try:
        return pc.cast(array, pa.float64())
    except pa.ArrowException:  # some value does not parse, or the type cannot cast: go one by one
        pass
    parsed: list[float | None] = []
    bad: list[bool] = []
    shown: list[str] = []
    for text in array.to_pylist():
        if text is None:
            parsed.append(None)
            bad.append(False)
            shown.append("")
            continue
        number = parse_number(text)
        parsed.append(number)
        bad.append(number is None)
        shown.append("" if number is not None else f"'{name}' is not a number: {text[:40]!r}")
    mask = np.asarray(bad, dtype=bool)
    blame(reasons, mask, np.asarray(shown, dtype=object))
    return pa.array(parsed, type=pa.float64())


def _lists(column: Any, name: str, datatype: str, width: int, reasons: np.ndarray) -> np.ndarray:
    """A list of `width` values per row, as an [n, width] array."""
    import pyarrow as pa
    import pyarrow.compute as pc

    array = _plain(column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column)
    n = len(array)
    dtype = V2_TO_NUMPY[datatype]
    out = np.zeros((n, width), dtype=dtype)
    if not (pa.types.is_list(array.type) or pa.types.is_large_list(array.type) or pa.types.is_fixed_size_list(array.type)):
        blame(reasons, np.ones(n, dtype=bool), f"'{name}' must hold a list of {width} values")
        return out
    if array.null_count:
        blame(reasons, to_numbers(array.is_null()), f"missing value for '{name}'")
    lengths = to_numbers(pc.list_value_length(array), null_slots=True)  # a missing list: 0
    wrong = lengths != width
    blame(reasons, wrong, f"'{name}' must hold {width} values")
    fits = ~wrong
    if not fits.any():
        return out
    flat = pc.list_flatten(array.filter(from_numbers(fits)))
    element_reasons = np.full(len(flat), None, dtype=object)
    values = _values(flat, name, datatype, element_reasons)
    element_bad = ~np.equal(element_reasons, None).reshape(-1, width)
    rows = np.flatnonzero(fits)
    first = np.argmax(element_bad, axis=1)
    per_row = element_reasons.reshape(-1, width)[np.arange(len(rows)), first]
    row_bad = np.zeros(n, dtype=bool)
    row_bad[rows] = element_bad.any(axis=1)
    messages = np.full(n, None, dtype=object)
    messages[rows] = per_row
    blame(reasons, row_bad, messages)
    out[rows] = values.reshape(-1, width)
    return out
