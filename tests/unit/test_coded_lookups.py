"""Lookups keyed by a batch job's text column as Parquet stores it (`sluice.codecs.coded_text`:
the rows' strings with their dictionary codes), which a held SQLite table answers by mapping the
dictionary once and the feature cache asks once per distinct key: the same answers, errors and
store calls as rows of plain strings answered by SQL, whatever the table holds."""

from __future__ import annotations

import math
import sqlite3
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sluice.codecs.coded_text import CodedText, coded
from sluice.domain.errors import SluiceError
from sluice.domain.lookups import Lookup
from sluice.inference.loop import run
from sluice.runtimes import sqlite_held
from sluice.runtimes.lookups import LookupSteps
from sluice.settings import LookupSettings


def text_rows(keys: list[str]) -> CodedText:
    """`keys` as the batch reader gives a Parquet text column (`batch.columns._text_values`)."""
    from sluice.batch.columns import _text_values

    return _text_values(pa.array(keys, type=pa.string()).dictionary_encode())


def test_rows_taken_from_coded_text_keep_their_codes_and_other_arrays_drop_them() -> None:
    text = text_rows(["b", "a", "b", "c"])
    assert text.tolist() == ["b", "a", "b", "c"] and coded(text) is text
    for part in (text[1:], text[np.array([3, 0])], text[np.array([True, False, True, False])]):
        assert coded(part) is not None and [text.dictionary[int(c)].as_py() for c in part.codes] == part.tolist()
    for plain in (text.reshape(-1, 1)[:, 0], text.copy(), text[:, np.newaxis]):
        assert coded(plain) is None
    import pickle

    assert coded(pickle.loads(pickle.dumps(text))) is None and pickle.loads(pickle.dumps(text)).tolist() == text.tolist()


NAMES = st.sampled_from([f"c{i}" for i in range(12)] + ["", "é", "C1", "c1 "])
KEYS = st.one_of(NAMES, NAMES, st.none(), st.just(b"c3"), st.just(4), st.just(2.5))  # mostly text: NULL, a blob, numbers never match
VALUES = st.one_of(st.floats(-1e6, 1e6), st.integers(-5, 5), st.none(), st.just("x"))  # "x" is not a number


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    table=st.lists(st.tuples(KEYS, VALUES, st.one_of(st.integers(-9, 9), st.none())), min_size=1, max_size=20),
    asked=st.lists(NAMES, min_size=1, max_size=40),
    default=st.booleans(),
    cached=st.booleans(),
)
def test_coded_rows_are_answered_as_sql_answers_plain_rows(table: list[tuple[Any, Any, Any]], asked: list[str], default: bool, cached: bool) -> None:
    node = Lookup(
        store="sqlite", table="t", keys={"k": "customer"}, **({"cache_ttl_s": 60.0} if cached else {}),
        features=[{"name": "v", "datatype": "FP64", **({"default": -1.0} if default else {})}, {"name": "n", "datatype": "INT64", "default": 0}],
    )  # fmt: skip
    with tempfile.TemporaryDirectory() as folder, pytest.MonkeyPatch.context() as patch:
        patch.setattr(sqlite_held, "FIRST_COUNT", 1)  # held as soon as asked for as many keys as it has rows
        with sqlite3.connect(Path(folder) / "acme.db") as db:
            db.execute("CREATE TABLE t (k TEXT, v REAL, n INTEGER)")
            db.executemany("INSERT INTO t VALUES (?, ?, ?)", table)
        db.close()
        where = str(Path(folder) / "{tenant}.db")
        sql = LookupSteps(LookupSettings(lookup_sqlite=where, lookup_sqlite_hold_rows=0), mode="local")
        mine = LookupSteps(LookupSettings(lookup_sqlite=where, lookup_cache_entries=100 if cached else 0), mode="local")
        everyone = text_rows([k for k, *_ in table if isinstance(k, str)] * 2 or ["nobody"])
        for _ in range(2):  # asked for every key the table has, twice: held where a dictionary answers as SQL
            answer(mine, node, everyone)
        want, got = answer(sql, node, np.array(asked, dtype=object)), answer(mine, node, text_rows(asked))
        assert got == want
        assert answer(mine, node, text_rows(asked)[::-1]) == answer(sql, node, np.array(asked[::-1], dtype=object))


def answer(steps: LookupSteps, node: Lookup, keys: np.ndarray) -> tuple[Any, ...]:
    """The features a lookup gives (NaN as None), or its error."""
    try:
        looked = run(steps.lookup(node, "acme", {"customer": keys}, timeout_s=5))
    except SluiceError as exc:
        return (type(exc).__name__, exc.message)
    return tuple([None if isinstance(v, float) and math.isnan(v) else v for v in looked.outputs[f].tolist()] for f in ("v", "n"))


def test_a_held_table_maps_a_dictionary_once_for_all_its_rows_and_sees_a_change_to_the_file(tmp_path: Path) -> None:
    with sqlite3.connect(tmp_path / "acme.db") as db:
        db.execute("CREATE TABLE t (k TEXT PRIMARY KEY, v REAL, n INTEGER)")
        db.executemany("INSERT INTO t VALUES (?, ?, ?)", [(f"c{i}", float(i), i) for i in range(2000)])
    db.close()
    steps = LookupSteps(LookupSettings(lookup_sqlite=str(tmp_path / "{tenant}.db")), mode="local")
    node = Lookup(store="sqlite", table="t", keys={"k": "customer"}, features=[{"name": "v", "datatype": "FP64", "default": -1.0}, {"name": "n", "datatype": "INT64", "default": 0}])
    rows = text_rows([f"c{i % 2100}" for i in range(4200)])
    assert answer(steps, node, rows)[0][:3] == [0.0, 1.0, 2.0]  # 2,100 keys asked of 2,000 rows: held now
    store = steps.store(node, "acme")
    held = store._holding.current(store._connection(), ("t", ("k",), ("v", "n"), ("S",)))
    assert held is not None and not held.seen
    for part in (rows[:4096], rows[4096:], rows[np.arange(0, 4200, 7)]):
        looked = run(steps.lookup(node, "acme", {"customer": part}, timeout_s=5))
        assert looked.store_calls == 0 and looked.outputs["v"].tolist() == [float(int(k[1:])) if int(k[1:]) < 2000 else -1.0 for k in part.tolist()]
    assert len(held.seen) == 1  # one dictionary, mapped once for every part of it
    with sqlite3.connect(tmp_path / "acme.db") as db:
        db.execute("UPDATE t SET v = 7.5 WHERE k = 'c3'")
    db.close()
    looked = run(steps.lookup(node, "acme", {"customer": rows[:5]}, timeout_s=5))
    assert looked.outputs["v"].tolist() == [0.0, 1.0, 2.0, 7.5, 4.0] and looked.store_calls == 1
