"""The uncached lookup's fast paths against the general ones, on what a store may answer: the
store's lists spread straight to the rows (`spread`, with its shortcut where every key was found
in the keys' order and no event time is read) give what the cached path's rules give
(`from_found`, then `_columns`): the same values, defaults, event times and 422s; and a SQLite
store answers each shape of question alike however often its SQL was kept (`get_many`)."""

from __future__ import annotations

import math
import sqlite3
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sluice.domain.errors import Unprocessable
from sluice.domain.lookups import Lookup
from sluice.runtimes.feature_stores import SqliteStore
from sluice.runtimes.found import Found
from sluice.runtimes.lookup_values import from_found, spread
from sluice.runtimes.lookups import _columns

if TYPE_CHECKING:
    pass

NOW = 1_800_000_000.0
NAMES = [f"c{i}" for i in range(8)]


@st.composite
def answers(draw: st.DrawFn) -> tuple[Lookup, list[tuple[str, ...]], Found]:
    keys = [(k,) for k in draw(st.lists(st.sampled_from(NAMES), min_size=1, max_size=6, unique=True))]
    held = [k for k in keys if draw(st.booleans())] if draw(st.booleans()) else list(keys)  # often all, as a request's
    if draw(st.booleans()):
        held = draw(st.permutations(held))
    value = st.one_of(st.none(), st.floats(-1e6, 1e6, allow_nan=False), st.integers(-1000, 1000))
    count = st.one_of(st.none(), st.integers(-1000, 1000))
    when = st.one_of(st.none(), st.floats(NOW - 200, NOW), st.sampled_from([f"{NOW - 10:.0f}", "2027-01-15T08:00:00"]))
    found = Found(
        list(held),
        {"amount": [draw(value) for _ in held], "count": [draw(count) for _ in held]},
        [draw(when) for _ in held],
    )
    features = [
        {"name": "amount", "datatype": draw(st.sampled_from(["FP32", "FP64"])), **({"default": 0.5} if draw(st.booleans()) else {})},
        {"name": "count", "datatype": "INT64", **({"default": -1} if draw(st.booleans()) else {})},
    ]
    extra: dict[str, Any] = {}
    if draw(st.booleans()):
        extra["max_age_s"] = draw(st.sampled_from([50.0, 150.0, 1e8]))
    if draw(st.booleans()):
        extra["event_time_output"] = "seen"
    return Lookup(store="sqlite", table="t", keys={"id": "k"}, features=features, **extra), keys, found


def outcome(work: Any) -> Any:
    try:
        out = work()
    except Unprocessable as exc:
        return ("422", exc.message, exc.details.get("key"))
    return {name: [None if isinstance(v, float) and math.isnan(v) else v for v in array.tolist()] for name, array in out.items()} | {
        f"{name}.dtype": str(array.dtype) for name, array in out.items()
    }


@settings(max_examples=300, deadline=None)
@given(answers())
def test_the_store_lists_spread_to_rows_as_the_cached_path_serves_them(case: tuple[Lookup, list[tuple[str, ...]], Found]) -> None:
    node, keys, found = case
    objs = np.array([k[0] for k in keys], dtype=object)
    fast = outcome(lambda: spread(node, keys, found, None, NOW))
    general = outcome(lambda: _columns(node, objs, from_found(node, keys, found), NOW))
    assert fast == general


def test_a_request_whose_every_key_is_found_in_order_takes_the_columns_as_they_are() -> None:
    """The shortcut's own case, named: each feature's list as the store gave it, a null value
    taking its default, or a 422 naming the entity and saying the feature is missing."""
    node = Lookup(store="sqlite", table="t", keys={"id": "k"}, features=[{"name": "amount", "datatype": "FP64", "default": 0.5}, {"name": "count", "datatype": "INT64"}])
    keys = [("a",), ("b",)]
    out = spread(node, keys, Found(list(keys), {"amount": [1.0, None], "count": [3, 4]}, [None, None]), None, NOW)
    assert out["amount"].tolist() == [1.0, 0.5] and out["count"].tolist() == [3, 4]
    with pytest.raises(Unprocessable, match=r"feature 'count' for id='b'.*the feature is missing"):
        spread(node, keys, Found(list(keys), {"amount": [1.0, 2.0], "count": [3, None]}, [None, None]), None, NOW)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.sampled_from([*NAMES, "nobody"]), min_size=1, max_size=5, unique=True), min_size=1, max_size=6))
def test_a_sqlite_store_answers_every_question_as_its_own_query(tmp_path_factory: pytest.TempPathFactory, questions: list[list[str]]) -> None:
    """Questions of one shape after another (its SQL kept after the first) answer what a query
    of their own on a fresh connection answers."""
    path = tmp_path_factory.mktemp("features") / "f.db"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE t (id TEXT PRIMARY KEY, amount REAL, count INTEGER, event_time REAL)")
        db.executemany("INSERT INTO t VALUES (?, ?, ?, ?)", [(name, i * 1.5, i, NOW - i) for i, name in enumerate(NAMES) if i % 3])
    db.close()
    store = SqliteStore(str(path))
    for at, names in enumerate(questions):
        keys = [(n,) for n in names]
        event_time = ("", "event_time", "no_such_column")[at % 3]
        found = store.get_many("t", ["id"], keys, ["amount", "count", "absent"], event_time, ("S",))
        with sqlite3.connect(path) as fresh:
            rows = fresh.execute(f"SELECT id, amount, count, event_time FROM t WHERE id IN ({', '.join('?' * len(names))})", names).fetchall()
        fresh.close()
        assert sorted(zip(found.keys, found.values["amount"], found.values["count"], found.values["absent"], found.times, strict=True)) == sorted(
            ((i,), a, c, None, t if event_time == "event_time" else None) for i, a, c, t in rows
        )
    assert store.calls == len(questions)
