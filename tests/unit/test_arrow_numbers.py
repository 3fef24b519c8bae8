"""Arrow columns made and read without pyarrow's pandas shim (`sluice.codecs.arrow_numbers`)
are the arrays pyarrow itself makes and reads: same type, same values, NaN kept as a value,
slices and chunks read at their offsets; what the buffers cannot say (nulls, a boolean's bits
read back, text that is not all `str`) goes to pyarrow."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from sluice.codecs.arrow_numbers import from_numbers, from_text, text_column, to_numbers
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


@settings(max_examples=200, deadline=None)
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


@settings(max_examples=200, deadline=None)
@given(st.one_of(st.lists(text, max_size=30), st.lists(st.sampled_from(["setosa", "virginica", "", "é"]), max_size=60)))
def test_a_column_of_text_is_the_one_pyarrow_makes(values: list[str]) -> None:
    made = from_text(values)
    assert made is not None
    made.validate(full=True)
    assert made.type == pa.string() and made.to_pylist() == values
    assert made.equals(pa.array(values, type=pa.string()))


@pytest.mark.parametrize("values", [["a", 1], ["a", None], ["a", b"b"], ["\ud800"]])
def test_text_it_cannot_write_is_left_to_pyarrow(values: list[object]) -> None:
    assert from_text(values) is None


def test_a_text_column_falls_back_to_pyarrow_as_it_would_answer() -> None:
    assert text_column(["a", "b"]).to_pylist() == ["a", "b"]
    with pytest.raises((pa.ArrowInvalid, pa.ArrowTypeError, UnicodeEncodeError)):
        text_column(["\ud800"])


def test_making_and_reading_columns_imports_no_pandas() -> None:
    """What the module is for: pyarrow's own calls import pandas the first time they run."""
    code = (
        "import sys, numpy as np, pyarrow as pa\n"
        "from sluice.codecs.arrow_numbers import from_numbers, from_text, to_numbers\n"
        "t = pa.table({'x': from_numbers(np.arange(5.0)), 'ok': from_numbers(np.ones(5, bool)), 'y': from_text(['a'] * 5)})\n"
        "assert to_numbers(t.column('x')).sum() == 10.0\n"
        "print('pandas' in sys.modules)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO / "functions")}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60, env=env)
    assert done.stdout.strip() == "False"
