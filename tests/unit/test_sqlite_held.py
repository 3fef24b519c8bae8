"""A SQLite lookup table held in memory (`sluice.runtimes.sqlite_held`): held once lookups asked it
for as many keys as it has rows, answering as its `IN` query does, and never past a change to
the file; tables a dictionary would answer otherwise than SQL stay with SQL."""

from __future__ import annotations

import sqlite3
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

from sluice.domain.lookups import Lookup
from sluice.inference.loop import run
from sluice.runtimes.feature_stores import SqliteStore
from sluice.runtimes.lookups import LookupSteps
from sluice.runtimes.sqlite_held import FIRST_COUNT
from sluice.settings import LookupSettings

if TYPE_CHECKING:
    from pathlib import Path

ROWS = FIRST_COUNT + 100  # asked past FIRST_COUNT keys, a table of this many rows is held


def _file(path: Path, create: str, rows: list[tuple[Any, ...]]) -> None:
    with sqlite3.connect(path) as db:
        db.execute(create)
        db.executemany(f"INSERT INTO t VALUES ({', '.join('?' * len(rows[0]))})", rows)
    db.close()


def _node(keys: dict[str, str] | None = None) -> Lookup:
    return Lookup(
        store="sqlite", table="t", keys=keys or {"k": "customer"},
        features=[{"name": "v", "datatype": "FP64", "default": -1.0}, {"name": "n", "datatype": "INT64", "default": 0}],
    )  # fmt: skip


def _ask(steps: LookupSteps, node: Lookup, arrays: dict[str, np.ndarray]) -> tuple[list[float], int]:
    looked = run(steps.lookup(node, "acme", arrays, timeout_s=5))
    return looked.outputs["v"].tolist(), looked.store_calls


def test_a_table_asked_for_as_many_keys_as_it_has_rows_is_answered_from_memory_until_the_file_changes(tmp_path: Path) -> None:
    _file(tmp_path / "acme.db", "CREATE TABLE t (k TEXT PRIMARY KEY, v REAL, n INTEGER)", [(f"c{i}", float(i), i % 3) for i in range(ROWS)])
    steps = LookupSteps(LookupSettings(lookup_sqlite=str(tmp_path / "{tenant}.db")), mode="local")
    node = _node()
    every = np.array([f"c{i}" for i in range(ROWS)] + ["nobody", "c5"], dtype=object)
    values, calls = _ask(steps, node, {"customer": every})
    assert calls == 3 and values == [*map(float, range(ROWS)), -1.0, 5.0]  # 500 keys a query: not held yet
    rows = np.array(["c7", "nobody", "c7", "c1000"], dtype=object)
    assert _ask(steps, node, {"customer": rows}) == ([7.0, -1.0, 7.0, 1000.0], 0)  # held: no store call
    with sqlite3.connect(tmp_path / "acme.db") as db:  # another writer changes the file
        db.execute("UPDATE t SET v = 70.0 WHERE k = 'c7'")
        db.execute("INSERT INTO t VALUES ('nobody', 1.5, 1)")
    db.close()
    assert _ask(steps, node, {"customer": rows}) == ([70.0, 1.5, 70.0, 1000.0], 1)  # seen at once, from SQL again
    cached = Lookup(**{**node.model_dump(), "cache_ttl_s": 600.0})
    run(steps.lookup(node, "acme", {"customer": every}, timeout_s=5))  # asked as many keys again: held again
    looked = run(steps.lookup(cached, "acme", {"customer": rows}, timeout_s=5))
    assert looked.outputs["v"].tolist() == [70.0, 1.5, 70.0, 1000.0]
    assert (looked.store_calls, looked.cache_hits, looked.cache_misses) == (0, 4, 0)  # a cached lookup's rows answered from memory


def _same_as_sql(path: Path, node: Lookup, arrays: dict[str, np.ndarray], types: tuple[str, ...], most: int = 10_000) -> bool:
    """Whether a store that may hold the table (of at most `most` rows) answers `arrays`' keys as
    one that never does; asked past the table's size first. True when it then holds it."""
    held, plain = SqliteStore(str(path), most), SqliteStore(str(path), 0)
    features = [f.name for f in node.features]
    keys = [tuple(str(v) for v in k) if isinstance(k, tuple) else (str(k),) for k in zip(*(arrays[n].tolist() for n in node.keys.values()), strict=True)]
    for _ in range(3):
        for i in range(0, len(keys), 500):
            mine, sql = (store.get_many("t", list(node.keys), keys[i : i + 500], features, "", list(types)) for store in (held, plain))
            assert sorted(zip(mine.keys, *mine.values.values(), strict=True), key=str) == sorted(zip(sql.keys, *sql.values.values(), strict=True), key=str)
    return held._holding.current(held._connection(), ("t", tuple(node.keys), tuple(features), types)) is not None


def test_keys_are_found_as_sql_finds_them_and_tables_sql_compares_otherwise_stay_with_sql(tmp_path: Path) -> None:
    many = [(f"c{i}", float(i), i) for i in range(ROWS)]
    text = np.array([f"c{i}" for i in range(0, ROWS + 50, 2)] + ["C4", "c4 ", "4", ""], dtype=object)
    cases = [  # (table, rows, asked, key types, held); a row of a key of empty text is found by neither
        ("CREATE TABLE t (k TEXT PRIMARY KEY, v REAL, n INTEGER)", [*many, (None, 1.0, 1), (b"c3", 2.0, 2), (4, 3.0, 3), ("", 4.0, 4)], text, ("S",), True),
        ("CREATE TABLE t (k VARCHAR(10), v REAL, n INTEGER)", [(str(i), float(i), i) for i in range(ROWS)], np.arange(0, ROWS + 9, 3), ("N",), True),
        ("CREATE TABLE t (k INTEGER PRIMARY KEY, v REAL, n INTEGER)", [(i, float(i), i) for i in range(ROWS)], np.arange(-5, ROWS + 9, 3), ("N",), True),
        ("CREATE TABLE t (k INT, v REAL, n INTEGER)", [(i, float(i), i) for i in range(ROWS)] + [(1.5, 0.0, 0), ("x", 0.0, 0)], np.arange(0, ROWS, 2), ("N",), True),
        ("CREATE TABLE t (k TEXT COLLATE NOCASE PRIMARY KEY, v REAL, n INTEGER)", many, text, ("S",), False),
        ("CREATE TABLE t (k INTEGER, v REAL, n INTEGER)", [(i, float(i), i) for i in range(ROWS)], np.array([f"{i:03d}" for i in range(ROWS)], dtype=object), ("S",), False),
        ("CREATE TABLE t (k TEXT, v REAL, n INTEGER)", [*many, ("c5", 9.0, 9)], text, ("S",), False),  # c5 twice: SQL gives both rows
        ("CREATE TABLE t (k REAL, v REAL, n INTEGER)", [(float(i), float(i), i) for i in range(ROWS)], np.arange(0, ROWS, 2), ("N",), False),
    ]
    for i, (create, rows, asked, types, held) in enumerate(cases):
        path = tmp_path / f"{i}.db"
        _file(path, create, rows)
        assert _same_as_sql(path, _node(), {"customer": asked}, types) is held, create
    assert not _same_as_sql(tmp_path / "0.db", _node(), {"customer": cases[0][2]}, ("S",), most=ROWS - 1)  # more rows than the bound: SQL


def test_a_table_of_two_key_columns_or_a_value_that_does_not_cast(tmp_path: Path) -> None:
    path = tmp_path / "two.db"
    _file(path, "CREATE TABLE t (m INTEGER, d TEXT, v REAL, n INTEGER, PRIMARY KEY (m, d))", [(i // 10, str(i % 10), float(i), i) for i in range(ROWS)])
    node = _node({"m": "m", "d": "d"})
    m, d = np.arange(ROWS + 20) // 10, np.array([str(i % 10) for i in range(ROWS + 20)], dtype=object)
    assert _same_as_sql(path, node, {"m": m, "d": d}, ("N", "S"))
    bad = tmp_path / "acme.db"  # one row's value is not a number: the rows asked of others are answered, that one fails
    _file(bad, "CREATE TABLE t (k TEXT PRIMARY KEY, v REAL, n INTEGER)", [(f"c{i}", float(i) if i != 3 else "three", i) for i in range(ROWS)])
    steps = LookupSteps(LookupSettings(lookup_sqlite=str(tmp_path / "{tenant}.db")), mode="local")
    every = np.array([f"c{i}" for i in range(ROWS) if i != 3], dtype=object)
    for _ in range(2):
        assert _ask(steps, _node(), {"customer": every})[0][:3] == [0.0, 1.0, 2.0]
    from sluice.domain.errors import BackendError

    with pytest.raises(BackendError, match="'three' for feature 'v' of k='c3'"):
        _ask(steps, _node(), {"customer": np.array(["c3"], dtype=object)})


def test_lookups_of_a_few_keys_ask_the_file_nothing_more_until_they_reach_its_rows(tmp_path: Path) -> None:
    """Counted once, a table asked for fewer keys than it has rows is read by key alone (one
    query a lookup, no `data_version` each time); held once the keys asked reach its rows."""
    _file(tmp_path / "acme.db", "CREATE TABLE t (k TEXT PRIMARY KEY, v REAL, n INTEGER)", [(f"c{i}", float(i), i % 3) for i in range(ROWS)])
    steps = LookupSteps(LookupSettings(lookup_sqlite=str(tmp_path / "{tenant}.db")), mode="local")
    node = _node()
    _ask(steps, node, {"customer": np.array([f"c{i}" for i in range(FIRST_COUNT)], dtype=object)})  # past the first count: rows counted
    db = steps.store(node, "acme")._connection()  # type: ignore[attr-defined]
    said: list[str] = []
    db.set_trace_callback(said.append)
    for i in range(40):  # 80 keys: fewer than the 100 rows beyond FIRST_COUNT
        assert _ask(steps, node, {"customer": np.array([f"c{i}", "nobody"], dtype=object)}) == ([float(i), -1.0], 1)
    assert len(said) == 40 and not any("data_version" in s for s in said)
    _ask(steps, node, {"customer": np.array([f"c{i}" for i in range(ROWS)], dtype=object)})  # the keys asked reach its rows: held
    said.clear()
    assert _ask(steps, node, {"customer": np.array(["c7"], dtype=object)}) == ([7.0], 0) and any("data_version" in s for s in said)
