"""Arrow columns made and read without pyarrow's pandas shim (`sluice.codecs.arrow_numbers`)
are the arrays pyarrow itself makes and reads: same type, same values, NaN kept as a value,
slices and chunks read at their offsets; what the buffers cannot say (nulls, a boolean's bits
read back, text that is not all `str`) goes to pyarrow."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from sluice.batch import columns
from sluice.batch.columns import Feed, feed_arrays
from sluice.codecs import arrow_numbers
from sluice.codecs.arrow_numbers import (
    from_numbers,
    from_text,
    repeated_text,
    text_column,
    to_numbers,
    to_text,
)
from tests.conftest import REPO

DTYPES = [np.float16, np.float32, np.float64, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64, np.bool_]
arrays = st.sampled_from(DTYPES).flatmap(lambda d: hnp.arrays(d, st.integers(0, 40), elements=hnp.from_dtype(np.dtype(d), allow_nan=True)))


@settings(max_examples=200, deadline=None)
@given(arrays, st.integers(0, 3))
def test_a_column_of_numbers_is_the_one_pyarrow_makes(values: np.ndarray, step: int) -> None:
    values = values[:: step + 1]  # strided: not contiguous
    made, theirs = from_numbers(values), pa.array(values)
    made.validate(full=True)
    assert made.type == theirs.type
    assert made.equals(theirs) or np.array_equal(made.to_numpy(zero_copy_only=False), theirs.to_numpy(zero_copy_only=False), equal_nan=True)


@settings(max_examples=100, deadline=None)
@given(arrays, st.lists(st.integers(0, 40), max_size=4), st.integers(0, 10), st.integers(0, 10))
def test_a_column_read_is_what_pyarrow_reads(values: np.ndarray, cuts: list[int], start: int, stop: int) -> None:
    """Chunked and sliced (an offset into the buffer), as Parquet row groups and `slice` give them."""
    bounds = sorted({0, len(values), *(c for c in cuts if c <= len(values))})
    column = pa.chunked_array([pa.array(values[a:b]) for a, b in itertools.pairwise(bounds)] or [pa.array(values)])
    column = column.slice(min(start, len(column)), max(len(column) - start - stop, 0))
    for each in (column, column.combine_chunks()):
        read, theirs = to_numbers(each), each.to_numpy() if isinstance(each, pa.ChunkedArray) else each.to_numpy(zero_copy_only=False)
        assert read.dtype == theirs.dtype
        assert np.array_equal(read, theirs, equal_nan=read.dtype.kind == "f")


def test_nulls_are_read_by_pyarrow() -> None:
    read = to_numbers(pa.array([1.0, None, 3.0]))
    assert read.dtype == np.float64 and np.isnan(read[1]) and read[2] == 3.0


text = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=6)


@pytest.fixture(params=[True, False], ids=["pandas-not-imported", "pandas-imported"])
def shim(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> bool:
    """Both of `from_text`'s paths: its own encoding (where `pyarrow.array` would import pandas),
    and pyarrow's (where it would not)."""
    from sluice.codecs import arrow_numbers

    monkeypatch.setattr(arrow_numbers, "pyarrow_would_import_pandas", lambda: request.param)
    return bool(request.param)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.one_of(st.none(), text), max_size=30).flatmap(lambda v: st.sampled_from([v, v * 3, [f"{x}-{i}" for i, x in enumerate(v * 50)]])), st.booleans())
def test_a_column_of_text_is_the_one_pyarrow_makes(values: list[str | None], own: bool) -> None:
    """Text (None: a null), a few values a row (labels) taken by index, or many distinct left
    to pyarrow (None) where its encoding here would be the slower."""
    from sluice.codecs import arrow_numbers

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(arrow_numbers, "pyarrow_would_import_pandas", lambda: own)
        made = from_text(values)
    if made is None:
        assert own and len(values) > arrow_numbers.FEW_TEXTS and len(set(values)) * 2 > len(values)
        return
    made.validate(full=True)
    assert made.type == pa.string() and made.to_pylist() == values
    assert made.equals(pa.array(values, type=pa.string()))


@pytest.mark.parametrize("values", [["a", 1], ["a", 1.5], ["a", b"b"], ["\ud800"], [None, "\ud800"]])
def test_text_it_cannot_write_is_left_to_pyarrow(values: list[object], shim: bool) -> None:
    assert from_text(values * 3) is None


def test_a_text_column_falls_back_to_pyarrow_as_it_would_answer() -> None:
    assert text_column(["a", "b"]).to_pylist() == ["a", "b"]
    with pytest.raises((pa.ArrowInvalid, pa.ArrowTypeError, UnicodeEncodeError)):
        text_column(["\ud800"])


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.text(max_size=12), st.integers(0, 70)), min_size=1, max_size=8), st.sampled_from([64, 1 << 20]))
def test_a_repeated_value_is_the_column_pyarrow_makes_of_it(asked: list[tuple[str, int]], kept_bytes: int) -> None:
    """Whatever was asked before (a longer or shorter run of the same value, other values, the
    kept values cleared, a value too large to keep), each answer is pyarrow's own column of
    that value that many times."""
    arrow_numbers._REPEATED.clear()
    before, arrow_numbers.MAX_KEPT_BYTES = arrow_numbers.MAX_KEPT_BYTES, kept_bytes
    try:
        for value, count in asked:
            made = repeated_text(value, count)
            made.validate(full=True)
            assert made.type == pa.string() and len(made) == count
            assert made.to_pylist() == [value] * count
    finally:
        arrow_numbers.MAX_KEPT_BYTES = before


def test_a_repeated_value_that_cannot_be_text_fails_as_pyarrow_fails() -> None:
    with pytest.raises((pa.ArrowInvalid, UnicodeEncodeError)):
        repeated_text("\ud800", 3)


def test_making_and_reading_columns_imports_no_pandas() -> None:
    """What the module is for: pyarrow's own calls import pandas the first time they run (text
    of many distinct values excepted: pyarrow converts it faster than it is encoded here)."""
    code = (
        "import sys, numpy as np, pyarrow as pa\n"
        "from sluice.codecs.arrow_numbers import from_numbers, from_text, to_numbers\n"
        "t = pa.table({'x': from_numbers(np.arange(5.0)), 'ok': from_numbers(np.ones(5, bool)), 'y': from_text(['a'] * 5)})\n"
        "assert to_numbers(t.column('x')).sum() == 10.0\n"
        "taken = 'pyarrow.compute' in sys.modules\n"
        "from sluice.codecs.function_payloads import from_arrow, to_arrow\n"
        "back = from_arrow(to_arrow({'x': np.ones((6, 2), np.float32), 'ok': np.ones(6, bool), 'y': np.asarray(['a', 'b', None] * 2, object)}))\n"
        "assert back['x'].shape == (6, 2) and back['y'].tolist() == ['a', 'b', None] * 2\n"
        "print('pandas' in sys.modules, taken)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO / "functions")}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60, env=env)
    # Nor, for a batch job's columns, pyarrow.compute, whose import wraps every kernel (`take`).
    assert done.stdout.strip() == "False False"


# A batch chunk's columns, read as pyarrow reads them --------------------------------------------
def pyarrow_to_numbers(array: Any, *, null_slots: bool = False) -> np.ndarray:
    """`to_numbers` as it was written with pyarrow's own calls (the oracle)."""
    if null_slots and array.null_count:
        array = array.fill_null(False if pa.types.is_boolean(array.type) else 0)
    return array.to_numpy(zero_copy_only=False) if isinstance(array, pa.Array) else array.to_numpy()


def pyarrow_to_text(array: Any, *, null: str | None = None) -> np.ndarray:
    return np.asarray((array.fill_null(null) if null is not None and array.null_count else array).to_numpy(zero_copy_only=False), dtype=object)


COLUMN_KINDS = {
    "int64": st.lists(st.one_of(st.none(), st.integers(-(2**40), 2**40)), min_size=1, max_size=12),
    "double": st.lists(st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True)), min_size=1, max_size=12),
    "bool": st.lists(st.one_of(st.none(), st.booleans()), min_size=1, max_size=12),
    "string": st.lists(st.one_of(st.none(), st.sampled_from(["1.5", "x", "", "7", "nan", "-2e3"])), min_size=1, max_size=12),
    "dictionary": st.lists(st.sampled_from(["a", "b", "é"]), min_size=1, max_size=12),
    "list": st.lists(st.one_of(st.none(), st.lists(st.one_of(st.none(), st.integers(-5, 5)), max_size=3)), min_size=1, max_size=12),
}
FEEDS = {
    "int64": [Feed("x", ("x",), "INT64", stacked=False), Feed("x", ("x",), "FP32", stacked=False), Feed("x", ("x",), "BOOL", stacked=False)],
    "double": [Feed("x", ("x",), "FP32", stacked=False), Feed("x", ("x",), "INT32", stacked=False), Feed("x", ("x",), "FP64", stacked=True)],
    "bool": [Feed("x", ("x",), "BOOL", stacked=False), Feed("x", ("x",), "FP32", stacked=False)],
    "string": [Feed("x", ("x",), "BYTES", stacked=False), Feed("x", ("x",), "FP32", stacked=False)],
    "dictionary": [Feed("x", ("x",), "BYTES", stacked=False)],
    "list": [Feed("x", ("x",), "FP32", stacked=False, width=2), Feed("x", ("x",), "INT64", stacked=False, width=2)],
}


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(sorted(COLUMN_KINDS)).flatmap(lambda k: st.tuples(st.just(k), COLUMN_KINDS[k], st.sampled_from(FEEDS[k]), st.integers(0, 3))))
def test_a_chunks_columns_are_fed_as_pyarrow_reads_them(case: tuple[str, list[Any], Feed, int]) -> None:
    """Every kind of column a chunk holds (numbers, booleans, text, Parquet's dictionaries,
    lists; nulls among them; a slice, as a piece of a row group is) gives the model the arrays
    and the rows their reasons that pyarrow's own `to_numpy` and `fill_null` gave."""
    kind, values, feed, start = case
    column = pa.array(values).dictionary_encode() if kind == "dictionary" else pa.array(values, type=pa.list_(pa.int64()) if kind == "list" else None)
    table = pa.table({"x": column}).slice(min(start, len(values) - 1))

    def fed() -> Any:
        reasons = np.full(table.num_rows, None, dtype=object)
        try:
            arrays = feed_arrays([feed], table, reasons)
        except Exception as exc:
            return (type(exc).__name__, str(exc))
        good = np.equal(reasons, None)
        return [(k, v.dtype.str, v.shape, v[good].tolist()) for k, v in arrays.items()], reasons.tolist()

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(columns, "to_numbers", pyarrow_to_numbers)
        patch.setattr(columns, "to_text", pyarrow_to_text)
        patch.setattr(columns, "from_numbers", pa.array)
        expected = repr(fed())
    assert repr(fed()) == expected


@settings(max_examples=150, deadline=None)
@given(arrays.flatmap(lambda v: st.tuples(st.just(v), st.lists(st.booleans(), min_size=len(v), max_size=len(v)))), st.integers(0, 10), st.booleans())
def test_nulls_read_as_pyarrow_reads_them(case: tuple[np.ndarray, list[bool]], start: int, chunked: bool) -> None:
    """With nulls (a validity bitmap at an offset): `null_slots` reads each null as 0 (False),
    as `fill_null` did; without it, pyarrow answers."""
    values, missing = case
    array = pa.array(values, mask=np.asarray(missing, dtype=bool)).slice(min(start, len(values)))
    for each in (array, pa.chunked_array([array, array]) if chunked else array):
        for slots in (True, False):
            read, theirs = to_numbers(each, null_slots=slots), pyarrow_to_numbers(each, null_slots=slots)
            assert read.dtype == theirs.dtype
            assert np.array_equal(read, theirs, equal_nan=read.dtype.kind == "f")


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.none(), text), max_size=20), st.sampled_from([None, "", "?"]))
def test_text_read_is_what_pyarrow_reads(values: list[str | None], null: str | None) -> None:
    array = pa.array(values, type=pa.string())
    assert to_text(array, null=null).tolist() == pyarrow_to_text(array, null=null).tolist()


tensors = st.one_of(
    st.sampled_from(DTYPES).flatmap(lambda d: hnp.arrays(d, st.tuples(st.integers(0, 6), st.integers(1, 3)).map(lambda s: s if s[1] > 1 else s[:1]), elements=hnp.from_dtype(np.dtype(d), allow_nan=True))),
    st.lists(st.one_of(text, st.none()), max_size=8).map(lambda v: np.asarray(v, dtype=object)),
)


@settings(max_examples=150, deadline=None)
@given(st.dictionaries(st.sampled_from(["a", "b", "c"]), tensors, min_size=1, max_size=3))
def test_a_function_steps_arrow_payload_is_the_one_pyarrow_makes_and_reads(arrays: dict[str, np.ndarray]) -> None:
    """A function step's Arrow stream (`sluice.codecs.function_payloads`), written and read with
    the columns made here, is the stream pyarrow's own calls wrote, and reads back the same."""
    from sluice.codecs import function_payloads

    def both() -> Any:
        try:
            data = function_payloads.to_arrow(arrays)
            back = function_payloads.from_arrow(data)
        except Exception as exc:
            return (type(exc).__name__, str(exc))
        return data, [(k, v.dtype.str, v.shape, v.tolist()) for k, v in back.items()]

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(function_payloads, "from_numbers", pa.array)
        patch.setattr(function_payloads, "to_numbers", lambda a: a.to_numpy(zero_copy_only=False))
        patch.setattr(function_payloads, "text_column", lambda v: pa.array(v, type=pa.string()))
        expected = repr(both())
    assert repr(both()) == expected
