"""Stored answers read back as they were written: `decode_rows` (orjson first, json where a
row holds what orjson refuses) gives what json alone gives, over random rows (NaN, ±inf,
big integers, strings with lone surrogates, nested lists); and the SQLite table's read of
one entity finds what its read of several finds."""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sluice.codecs.datatypes import V2_TO_NUMPY
from sluice.codecs.stored_rows import _loads, decode_rows, encode_rows, rows_as_arrays
from sluice.domain.signature import TensorSpec
from sluice.registry.precomputed import MAX_GET, Stored
from sluice.registry.precomputed.sqlite import SqlitePrecomputed


def _json_decode_rows(specs: list[TensorSpec], bodies: list[bytes]) -> dict[str, np.ndarray]:
    """`decode_rows` as it was before orjson: the rows parsed by json.loads alone."""
    return rows_as_arrays(specs, [json.loads(body) for body in bodies])


def _same(a: Any, b: Any) -> bool:
    """Equal values of equal types, NaN equal to NaN."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return (math.isnan(a) and math.isnan(b)) or a == b
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return bool(a == b)


_text = st.one_of(st.text(max_size=8), st.sampled_from(["\ud800", "a\udfffb", "é", "\x00", '"\\']))
_leaf = st.one_of(
    st.none(), st.booleans(), st.integers(), st.integers(min_value=2**63 - 2, max_value=2**70), st.integers(min_value=-(2**70), max_value=-(2**63) + 2), st.floats(allow_nan=True, allow_infinity=True), _text
)
_value = st.recursive(_leaf, lambda inner: st.lists(inner, max_size=4), max_leaves=12)


def _objects(values: list[Any]) -> np.ndarray:
    array = np.empty(len(values), dtype=object)
    for i, v in enumerate(values):
        array[i] = v
    return array


@settings(max_examples=150, deadline=None)
@given(columns=st.dictionaries(st.sampled_from(["output", "probabilities", "label", "x"]), st.lists(_value, min_size=3, max_size=3), min_size=1))
def test_a_row_reads_back_as_json_alone_reads_it(columns: dict[str, list[Any]]) -> None:
    bodies = encode_rows({name: _objects(values) for name, values in columns.items()}, 3)
    specs = [TensorSpec(name, "BYTES", (-1,)) for name in columns]
    for body in bodies:
        assert _same(_loads(body), json.loads(body))
    got, want = decode_rows(specs, bodies), _json_decode_rows(specs, bodies)
    assert got.keys() == want.keys()
    for name in want:
        assert got[name].dtype == want[name].dtype and got[name].shape == want[name].shape
        assert _same(got[name].tolist(), want[name].tolist())


_floats = st.floats(allow_nan=True, allow_infinity=True, width=32)


@settings(max_examples=200, deadline=None)
@given(
    rows=st.integers(1, 4),
    width=st.integers(1, 5),
    datatype=st.sampled_from(["FP32", "FP64", "INT64", "INT32", "BOOL", "UINT8"]),
    data=st.data(),
)
def test_typed_outputs_read_back_as_json_alone_reads_them(rows: int, width: int, datatype: str, data: st.DataObject) -> None:
    dtype = V2_TO_NUMPY[datatype]
    if dtype.kind == "f":
        elements: st.SearchStrategy[Any] = _floats
    elif dtype.kind == "b":
        elements = st.booleans()
    else:
        info = np.iinfo(dtype)
        elements = st.integers(int(info.min), int(info.max))
    values = data.draw(st.lists(st.lists(elements, min_size=width, max_size=width), min_size=rows, max_size=rows))
    outputs = {"output": np.asarray(values, dtype=dtype), "label": np.asarray([f"c{i}" for i in range(rows)], dtype=object)}
    bodies = encode_rows(outputs, rows)
    specs = [TensorSpec("output", datatype, (-1, width)), TensorSpec("label", "BYTES", (-1,))]
    got, want = decode_rows(specs, bodies), _json_decode_rows(specs, bodies)
    for name in want:
        assert got[name].dtype == want[name].dtype
        np.testing.assert_array_equal(got[name], want[name])  # NaN equal to NaN
    np.testing.assert_array_equal(got["output"], outputs["output"])


def test_a_row_with_nan_and_infinity_reads_back() -> None:
    body = encode_rows({"output": np.asarray([[math.nan, math.inf, -math.inf, 1.5]], dtype=np.float64)}, 1)[0]
    assert b"NaN" in body and b"Infinity" in body
    out = decode_rows([TensorSpec("output", "FP64", (-1, 4))], [body])["output"]
    assert np.isnan(out[0, 0]) and out[0, 1] == math.inf and out[0, 2] == -math.inf and out[0, 3] == 1.5


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_one_entity_is_read_as_several_are(filled: tuple[SqlitePrecomputed, dict[str, Stored]], data: st.DataObject) -> None:
    """The read of one entity (its own statement) finds what a read of several does: a held,
    fresh answer of this generation, never an expired one, another generation's or another
    tenant's; and reads of more than `MAX_GET` entities, duplicates among them, find them all."""
    store, held = filled
    now = 1_000.0
    names = [f"u{i}" for i in range(12)] + ["missing", "old", "other-gen", "", "é"]
    entities = data.draw(st.lists(st.sampled_from(names), min_size=1, max_size=MAX_GET + 30))
    want = {e: held[e] for e in entities if e in held}
    assert store.get_answers("t", "recs", "g1", entities, now=now) == want
    for e in set(entities):
        one = store.get_answers("t", "recs", "g1", [e], now=now)
        assert one == ({e: held[e]} if e in held else {})
        assert all(type(s.body) is bytes and type(s.computed_at) is float for s in one.values())
    assert store.get_answers("other", "recs", "g1", entities, now=now) == ({"u1": Stored(b"{}", 900.0)} if "u1" in entities else {})


@pytest.fixture(scope="module")
def filled(tmp_path_factory: pytest.TempPathFactory) -> tuple[SqlitePrecomputed, dict[str, Stored]]:
    store = SqlitePrecomputed(tmp_path_factory.mktemp("table") / "precomputed.db")
    held = {f"u{i}": Stored(json.dumps({"output": [i, i / 3]}).encode(), 900.0 + i) for i in range(12)}
    held[""] = Stored(b'{"output":[0]}', 950.0)
    held["é"] = Stored(b'{"output":[1]}', 960.0)
    for entity, stored in held.items():
        store.put_answers("t", "recs", "g1", [(entity, stored.body)], computed_at=stored.computed_at, expires_at=2_000.0)
    store.put_answers("t", "recs", "g1", [("old", b"{}")], computed_at=10.0, expires_at=500.0)  # expired by `now`
    store.put_answers("t", "recs", "g2", [("other-gen", b"{}")], computed_at=900.0, expires_at=2_000.0)
    store.put_answers("other", "recs", "g1", [("u1", b"{}")], computed_at=900.0, expires_at=2_000.0)
    return store, held



@pytest.mark.filterwarnings("ignore:overflow encountered in cast:RuntimeWarning")  # a long integer as FP16: inf, both ways
@settings(max_examples=150, deadline=None)
@given(
    datatype=st.sampled_from(["FP16", "FP32", "FP64"]),
    values=st.lists(
        st.lists(st.one_of(st.integers(), st.integers(min_value=-(2**1100), max_value=2**1100), _floats, st.floats()), min_size=2, max_size=2),
        min_size=1,
        max_size=3,
    ),
)
def test_long_integers_in_float_outputs_read_as_json_reads_them(datatype: str, values: list[list[Any]]) -> None:
    """A float output's row holding integers of any size (orjson reads one beyond 64 bits as a
    float, json exactly; NumPy makes either the same float; one beyond a double's range fails
    both ways)."""
    bodies = [json.dumps({"output": row}, allow_nan=True).encode() for row in values]
    specs = [TensorSpec("output", datatype, (-1, 2))]
    try:
        want = _json_decode_rows(specs, bodies)["output"]
    except OverflowError:
        with pytest.raises(OverflowError):
            decode_rows(specs, bodies)
        return
    got = decode_rows(specs, bodies)["output"]
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
