"""The plain codec's fast paths give what its general paths give: rows of objects with the
same keys read a column at a time (`arrays_from_request`), and one or two classes'
probabilities built without a call per row (`present_rows`). Each test generates requests
and answers and compares them with the same code made to take its general path (and an
output column with its code as it was, kept here): the same arrays, the same answers, the
same errors naming the same fields."""

from __future__ import annotations

import sys
from itertools import repeat
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sluice.codecs import plain, plain_inputs
from sluice.codecs.plain import (
    _column,
    _scalar,
    present_columns,
    present_rows,
)
from sluice.codecs.plain_inputs import arrays_from_request
from sluice.domain.errors import InvalidInput
from sluice.domain.results import InferenceResult
from sluice.domain.signature import Signature, TensorSpec


# The oracles: each fast path's general path ---------------------------------------------------
def reference_arrays(signature: Signature, **request: Any) -> dict[str, np.ndarray]:
    """`arrays_from_request` by its row-by-row loop alone (rows of objects never read a column
    at a time)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(plain_inputs, "ALIKE_ROWS", sys.maxsize)
        return arrays_from_request(signature, **request)


def reference_rows(signature: Signature, result: InferenceResult, **options: Any) -> list[dict[str, Any]]:
    """`present_rows` with each row's {class: probability} built by `zip` alone."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(plain, "_table", lambda keys, probs, confidence: map(dict, map(zip, repeat(keys), probs.tolist())))
        return present_rows(signature, result, **options)


def reference_column(array: np.ndarray, n: int) -> list[Any]:
    per_row = array.reshape(n, -1)
    if per_row.shape[1] == 1:
        column = per_row[:, 0].tolist()
        if array.dtype != object or set(map(type, column)) <= plain._PLAIN:
            return column
        return [_scalar(x) for x in column]
    return array.reshape(n, *array.shape[1:]).tolist()


def outcome(make: Any) -> Any:
    """What a call gives, comparable: each array's dtype, shape and values (NaN as NaN), or
    the error's kind, message and field."""
    try:
        arrays = make()
    except InvalidInput as exc:
        return ("refused", exc.message, exc.field)
    except Exception as exc:
        return ("raised", type(exc).__name__, str(exc))
    return [(name, a.dtype.str, a.shape, repr(a.tolist())) for name, a in arrays.items()]


# Requests ----------------------------------------------------------------------------------
NAMES = ("length", "colour", "count")
DATATYPES = ("FP32", "FP64", "INT64", "BOOL", "BYTES")
values = st.one_of(
    st.floats(width=32, allow_nan=False),
    st.integers(-(2**40), 2**40),
    st.booleans(),
    st.sampled_from(["red", "green", "", "é"]),
    st.none(),
    st.lists(st.floats(-10, 10, width=32), min_size=1, max_size=2),
)


@st.composite
def signatures(draw: st.DrawFn) -> Signature:
    names = draw(st.lists(st.sampled_from(NAMES), min_size=1, max_size=3, unique=True))
    shapes = st.sampled_from([(-1,), (-1, 1), (-1, 2)])
    specs = tuple(TensorSpec(name, draw(st.sampled_from(DATATYPES)), draw(shapes)) for name in names)
    return Signature(specs, ())


@st.composite
def batches(draw: st.DrawFn, signature: Signature) -> list[Any]:
    """Mostly rows with the same keys (the fast path's), now and then one that differs: a key
    missing, one more, an unknown one, keys in another order, a list or text for a row."""
    names = [spec.name for spec in signature.inputs]
    keys = draw(st.lists(st.sampled_from([*names, "unknown"]), min_size=0, max_size=len(names) + 1, unique=True))
    rows: list[Any] = []
    for _ in range(draw(st.integers(1, 12))):
        row = {key: draw(values) for key in keys}
        odd = draw(st.sampled_from(["none"] * 6 + ["drop", "add", "reorder", "list", "text"]))
        if odd == "drop" and row:
            row.pop(draw(st.sampled_from(sorted(row))))
        elif odd == "add":
            row[draw(st.sampled_from([*NAMES, "unknown"]))] = draw(values)
        elif odd == "reorder":
            row = dict(reversed(list(row.items())))
        elif odd in ("list", "text"):
            rows.append([1.0] if odd == "list" else "row")
            continue
        rows.append(row)
    return rows


@settings(max_examples=100, deadline=None)
@given(st.data(), st.sampled_from([1, plain_inputs.ALIKE_ROWS]))
def test_rows_of_objects_read_as_the_row_by_row_loop_reads_them(data: st.DataObject, alike_rows: int) -> None:
    """Whatever the number of rows from which the fast path is taken (a batch of 1 to 12 rows)."""
    signature = data.draw(signatures())
    rows = data.draw(batches(signature))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(plain_inputs, "ALIKE_ROWS", alike_rows)
        assert outcome(lambda: arrays_from_request(signature, batch=rows)) == outcome(lambda: reference_arrays(signature, batch=rows))
        one = rows[0]
        assert outcome(lambda: arrays_from_request(signature, features=one)) == outcome(lambda: reference_arrays(signature, features=one))


def test_rows_with_the_same_keys_take_the_fast_path_and_others_do_not() -> None:
    names = {"length": [], "colour": []}
    alike = [{"length": 1.0, "colour": "red"}, {"colour": "blue", "length": 2.0}]
    assert plain_inputs._columns_of_alike(alike, names) == {"length": [1.0, 2.0], "colour": ["red", "blue"]}
    assert plain_inputs._columns_of_alike([{"length": 1.0}, {"colour": "red"}], names) is None  # same size, other keys
    assert plain_inputs._columns_of_alike([{"length": 1.0}, {"length": 1.0, "colour": "red"}], names) is None
    assert plain_inputs._columns_of_alike([{"size": 1.0}], names) is None
    assert plain_inputs._columns_of_alike([{"length": 1.0}, [1.0]], names) is None


# Answers -----------------------------------------------------------------------------------
@st.composite
def classified(draw: st.DrawFn) -> tuple[Signature, InferenceResult]:
    """Answers with probabilities (or not), a label (or not), values, classes named or not;
    an output's role as a version or a sequence names it, and some outputs it names absent."""
    n = draw(st.integers(1, 5))
    width = draw(st.integers(0, 4))
    dtype = draw(st.sampled_from([np.float32, np.float64]))
    probs = np.asarray(draw(st.lists(st.lists(st.floats(0, 1, width=32), min_size=width, max_size=width), min_size=n, max_size=n)), dtype=dtype).reshape(n, width)
    arrays = {
        "probability": probs,
        "label": np.asarray(draw(st.lists(st.sampled_from(["no", "yes"]), min_size=n, max_size=n)), dtype=object),
        "score": np.asarray(draw(st.lists(st.floats(-5, 5, width=32), min_size=n, max_size=n)), np.float32).reshape(n, 1),
        "": np.arange(n, dtype=np.int64),
    }
    roles = st.sampled_from(["probabilities", "label", "value", None])
    names = draw(st.lists(st.sampled_from(sorted(arrays)), min_size=1, max_size=4, unique=True))
    specs = tuple(TensorSpec(name, "FP32", (-1,), role=draw(roles)) for name in names)
    given_ = [name for name in names if draw(st.integers(0, 4))] or names[:1]  # an output the signature names may be absent
    classes: dict[str, list[Any]] = {}
    if draw(st.booleans()):  # named classes, maybe fewer or more than the columns, maybe alike as text (1 and "1")
        classes["probability"] = draw(st.lists(st.sampled_from(["no", "yes", 1, "1", 0]), min_size=max(width - 1, 0), max_size=width + 1))
    return Signature((), specs), InferenceResult({name: arrays[name] for name in given_}, classes)


@settings(max_examples=100, deadline=None)
@given(classified(), st.booleans())
def test_answer_rows_are_those_built_a_row_at_a_time(answer: tuple[Signature, InferenceResult], probabilities: bool) -> None:
    """Probabilities, labels, values and classes present as they did, a signature's roles
    worked out once (the second answer for the same signature reads them kept)."""
    signature, result = answer

    def rows(present: Any) -> Any:
        try:
            return present(signature, result, return_probabilities=probabilities)
        except Exception as exc:
            return (type(exc).__name__, str(exc))

    expected = repr(rows(reference_rows))
    assert repr(rows(present_rows)) == expected
    assert repr(rows(present_rows)) == expected


def test_a_signatures_roles_are_its_own_and_kept_per_signature() -> None:
    one = Signature((), (TensorSpec("y", "FP32", (-1,), role="value"),))
    other = Signature((), (TensorSpec("y", "FP32", (-1,), role="label"), TensorSpec("p", "FP32", (-1, 2), role="probabilities")))
    result = InferenceResult({"y": np.array([1.5, 2.5], np.float32), "p": np.array([[0.2, 0.8], [0.6, 0.4]], np.float32)})
    assert [r["prediction"] for r in present_rows(one, result)] == [1.5, 2.5]
    assert present_rows(other, result)[0] == {"prediction": 1.5, "probabilities": {"0": 0.20000000298023224, "1": 0.800000011920929}, "confidence": 0.800000011920929}
    assert "probabilities" not in present_rows(one, result)[0]


def test_a_calibrated_score_answers_its_one_probability_and_its_confidence() -> None:
    signature = Signature((), (TensorSpec("probability", "FP32", (-1, 1), role="probabilities"), TensorSpec("label", "BYTES", (-1,), role="label")))
    result = InferenceResult({"probability": np.array([[0.25], [0.75]], np.float32), "label": np.array(["no", "yes"], dtype=object)})
    assert present_rows(signature, result) == [
        {"prediction": "no", "probabilities": {"0": 0.25}, "confidence": 0.25},
        {"prediction": "yes", "probabilities": {"0": 0.75}, "confidence": 0.75},
    ]
    unnamed = InferenceResult(result.outputs, classes={"probability": []})  # no class named for the column: none shown
    assert [row["probabilities"] for row in present_rows(signature, unnamed)] == [{}, {}]
    two = InferenceResult(result.outputs, classes={"probability": ["no", "yes"]})  # more classes than columns: those there are
    assert [row["probabilities"] for row in present_rows(signature, two)] == [{"no": 0.25}, {"no": 0.75}]


def _objects(values: list[Any]) -> np.ndarray:
    array = np.empty(len(values), dtype=object)
    array[:] = values
    return array


column_values = st.one_of(
    st.lists(st.floats(width=32), min_size=1, max_size=12).map(lambda v: np.asarray(v, np.float32)),
    st.lists(st.integers(-(2**31), 2**31), min_size=1, max_size=12).map(lambda v: np.asarray(v, np.int64)),
    st.lists(st.sampled_from(["no", "yes", b"maybe", np.str_("x"), np.float32(0.5), 3, None]), min_size=1, max_size=12).map(_objects),
)


@settings(max_examples=150, deadline=None)
@given(column_values, st.data())
def test_an_output_column_reads_as_it_did_row_by_row(values: np.ndarray, data: st.DataObject) -> None:
    """A label, value or vector per row (any shape with the rows first) reads as before."""
    size = values.size
    n = data.draw(st.sampled_from([d for d in range(1, size + 1) if size % d == 0]))
    shape = data.draw(st.sampled_from([(n, size // n), (n, size // n, 1), (size,) if n == size else (n, size // n)]))
    array = values.reshape(shape)
    assert repr(_column(array, n)) == repr(reference_column(array, n))


@settings(max_examples=100, deadline=None)
@given(classified(), st.booleans())
def test_batch_columns_are_those_pyarrow_makes_itself(answer: tuple[Signature, InferenceResult], flat: bool) -> None:
    """A batch part's columns, made from the arrays' buffers and the labels' text without
    pyarrow's pandas shim (`sluice.codecs.arrow_numbers`), are those `pyarrow.array` makes:
    the same names, types and values, or the same error."""
    import pyarrow as pa

    signature, result = answer

    def columns() -> Any:
        try:
            made = present_columns(signature, result, flat=flat)
        except Exception as exc:
            return (type(exc).__name__, str(exc))
        return [(name, str(column.type), column.to_pylist()) for name, column in made.items()]

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(plain, "from_numbers", pa.array)
        patch.setattr(plain, "from_text", lambda values: None)
        patch.setattr(plain, "text_column", lambda values: pa.array(values, type=pa.string()))
        expected = repr(columns())
    assert repr(columns()) == expected


# Bodies of numbers and keys with the words' letters, true and false among them, long and short.
_PIECES = st.sampled_from([b"0.25", b"-1e-05", b"42", b",", b"[", b"]", b" ", b"\"t\"", b"\"f\"", b"\"tt\"", b"\"customer\"", b":",
                           b"\"features\"", b"true", b"false", b"tru", b"fals", b"t", b"f", b"e", b"{", b"}", b"ru", b"alse", b"null"])  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(st.lists(_PIECES, max_size=60), st.integers(0, 60), st.integers(0, 1500), st.binary(max_size=40))
def test_the_edges_search_for_true_and_false_finds_what_a_plain_search_finds(pieces: list[bytes], at: int, pad: int, tail: bytes) -> None:
    """`holds_true_or_false` (a long body's letters looked for first) answers as `find` of each
    word does, wherever the words, their letters and their near misses stand, in bodies short
    and long (numbers put in among the pieces at a drawn place)."""
    from sluice.api.edge import LONG_BODY, holds_true_or_false

    numbers = b"1.5," * ((LONG_BODY + pad) // 4)
    for text in (b"".join(pieces) + tail, b"".join(pieces[:at]) + numbers + b"".join(pieces[at:]) + tail):
        assert holds_true_or_false(text) == (text.find(b"true") >= 0 or text.find(b"false") >= 0), text
