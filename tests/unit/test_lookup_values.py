"""The uncached lookup's fast paths against the general ones, on what a store may answer: the
store's lists spread straight to the rows (`spread`, with its shortcut where every key was found
in the keys' order and no event time is read) give what the cached path's rules give
(`from_found`, then `_columns`): the same values, defaults, event times and 422s; a SQLite
store answers each shape of question alike however often its SQL was kept (`get_many`); and a
value is cast to its feature's datatype as plain Python and NumPy say it is one, or is a 502."""

from __future__ import annotations

import math
import sqlite3
from decimal import Decimal, InvalidOperation
from fractions import Fraction
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sluice.domain.errors import BackendError, Unprocessable
from sluice.domain.lookups import Lookup
from sluice.runtimes.feature_stores import SqliteStore
from sluice.runtimes.found import Found
from sluice.runtimes.lookup_values import _array, from_found, spread
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


@settings(max_examples=150, deadline=None)
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
    of their own on a fresh connection answers; one asking for an event-time column the table
    lacks is a 422 naming it."""
    path = tmp_path_factory.mktemp("features") / "f.db"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE t (id TEXT PRIMARY KEY, amount REAL, count INTEGER, event_time REAL)")
        db.executemany("INSERT INTO t VALUES (?, ?, ?, ?)", [(name, i * 1.5, i, NOW - i) for i, name in enumerate(NAMES) if i % 3])
    db.close()
    store = SqliteStore(str(path))
    for at, names in enumerate(questions):
        keys = [(n,) for n in names]
        event_time = ("", "event_time", "no_such_column")[at % 3]
        if event_time == "no_such_column":  # an event time asked of a column not there: refused, named
            with pytest.raises(Unprocessable, match="no event-time column 'no_such_column'"):
                store.get_many("t", ["id"], keys, ["amount", "count", "absent"], event_time, ("S",))
            continue
        found = store.get_many("t", ["id"], keys, ["amount", "count", "absent"], event_time, ("S",))
        with sqlite3.connect(path) as fresh:
            rows = fresh.execute(f"SELECT id, amount, count, event_time FROM t WHERE id IN ({', '.join('?' * len(names))})", names).fetchall()
        fresh.close()
        assert sorted(zip(found.keys, found.values["amount"], found.values["count"], found.values["absent"], found.times, strict=True)) == sorted(
            ((i,), a, c, None, t if event_time == "event_time" else None) for i, a, c, t in rows
        )
    assert store.calls == len(questions)


DATATYPES = ["BOOL", "INT32", "INT64", "FP32", "FP64", "BYTES"]
# What stores hand back: SQLite's numbers, text and blobs; DynamoDB's and SageMaker's numbers as
# text; DynamoDB's booleans, binary, lists, maps and sets.
NUMBER_TEXT = st.one_of(
    st.integers(-(2**70), 2**70).map(str),
    st.floats().map(repr),
    st.decimals(-(2**70), 2**70).map(str),
    st.text("0123456789.eE+- ", max_size=12),
    st.sampled_from(["1E+2", "1.2E+1", "-0", " 7 ", "12.5", "nan", "-Infinity", "3.4028235e38", "3.4028236e38"]),
)
STORED = st.one_of(
    st.integers(-(2**66), 2**66),
    st.floats(),
    st.sampled_from([2**31 - 1, 2**31, -(2**31) - 1, 2**63 - 1, 2**63, 2.0**128 - 2.0**103, float(2**128 - 2**104)]),
    NUMBER_TEXT,
    st.text(max_size=8),
    st.binary(max_size=8),
    st.booleans(),
    st.lists(st.dictionaries(st.sampled_from("SN"), st.text(max_size=3), max_size=1), max_size=2),
    st.dictionaries(st.text(max_size=3), st.dictionaries(st.just("S"), st.text(max_size=3)), max_size=1),
)
NODE = {t: Lookup(store="dynamodb", table="acme-t", keys={"customer_id": "customer"}, features=[{"name": "f", "datatype": t}]) for t in DATATYPES}


def as_datatype(value: Any, datatype: str) -> Any:
    """What `value` is as `datatype`, by plain Python and NumPy: None where it is not one."""
    if datatype == "BYTES":
        if type(value) is bytes:
            try:
                return value.decode("utf-8")
            except UnicodeDecodeError:
                return None
        return str(value) if type(value) in (str, int, float) else None
    if datatype == "BOOL":
        return ...  # its spellings of true and false: not restated here
    if type(value) not in (int, float, str):
        return None
    if datatype in ("INT32", "INT64"):
        try:
            big = _big_exponent(value.strip()) if type(value) is str else None  # Fraction spells out 1e999999999 (minutes)
            if big is not None:
                return 0 if big.is_zero() else None  # zero, or past any 64-bit integer, or a fraction
            exact = Fraction(value.strip() if type(value) is str else value)
        except (ValueError, OverflowError, ZeroDivisionError):
            return None
        bits = int(datatype[3:])
        return int(exact) if exact.denominator == 1 and -(2 ** (bits - 1)) <= exact < 2 ** (bits - 1) else None
    try:
        number = float(value)
        with np.errstate(over="raise"):
            return np.array([number], dtype=np.float32 if datatype == "FP32" else np.float64)[0]
    except (ValueError, OverflowError, FloatingPointError):
        return None


def _big_exponent(text: str) -> Decimal | None:
    """The number a text spells with an exponent past 40 either way (Decimal reads it at once),
    where it is one, finite, and either zero or of a size past 1e40 or below 1e-40; else None
    (Fraction decides)."""
    try:
        number = Decimal(text)
    except InvalidOperation:
        return None
    if not number.is_finite() or abs(number.as_tuple().exponent) <= 40:  # type: ignore[arg-type]
        return None
    return number if number.is_zero() or abs(number.adjusted()) > 40 else None


def cast(values: list[Any], datatype: str) -> Any:
    """`_array`'s answer as a list, or the 502's message."""
    try:
        return _array(values, datatype, NODE[datatype], "f", [("c1",)] * len(values)).tolist()
    except BackendError as exc:
        assert exc.status == 502
        return exc.message


@settings(max_examples=600, deadline=None)
@given(STORED, st.sampled_from(DATATYPES))
def test_a_stored_value_is_its_datatypes_value_exactly_or_a_502_naming_it(value: Any, datatype: str) -> None:
    """Whole numbers exactly (never through a float: 2**53 + 1 stays itself), within the
    datatype's range; floats as NumPy rounds them, unless they overflow; text, UTF-8 bytes or a
    number's digits for BYTES, never a container's Python text. Anything else: the 502 naming the
    feature and the entity, never another error."""
    got = cast([value], datatype)
    want = as_datatype(value, datatype)
    if want is ...:
        assert isinstance(got, str) or type(got[0]) is bool, got
    elif want is None:
        assert isinstance(got, str) and "feature 'f' of customer_id='c1'" in got and f"not a {datatype} value" in got, got
    elif datatype in ("FP32", "FP64") and math.isnan(want):
        assert math.isnan(got[0])
    else:
        assert got == [want] and type(got[0]) is type(want.item() if isinstance(want, np.generic) else want), (got, want)


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(["INT32", "INT64", "FP32", "FP64"]), st.data())
def test_numbers_the_store_types_cast_as_their_text_does(datatype: str, data: st.DataObject) -> None:
    """SQLite's typed numbers take the fast path; DynamoDB's text the value-by-value one: the same
    answer, or both a 502."""
    whole = st.integers(-(2**64), 2**64)
    number = whole if datatype.startswith("INT") else st.one_of(st.integers(-(2**63), 2**63 - 1), st.floats(allow_nan=False))
    values = data.draw(st.lists(number, min_size=1, max_size=4))
    typed, text = cast(values, datatype), cast([str(v) for v in values], datatype)
    assert typed == text or (isinstance(typed, str) and isinstance(text, str)), (typed, text)


def test_a_number_spelled_with_a_huge_exponent_is_refused_at_once() -> None:
    assert "not a INT64 value" in cast(["1e999999999"], "INT64")
    assert cast(["9007199254740993", "123456789012345678"], "INT64") == [9007199254740993, 123456789012345678]


def test_numpy_text_is_a_text_key_as_pythons_is() -> None:
    """A function step's text answer may hold NumPy's own str and bytes (`check_answer` takes
    them as text): a lookup after it reads them as the same keys as Python's."""
    from sluice.runtimes.lookup_values import keys_of

    node = Lookup(store="sqlite", table="t", keys={"id": "k"}, features=[{"name": "amount", "datatype": "FP32"}])
    plain, numpy_text = np.empty(2, dtype=object), np.empty(2, dtype=object)
    plain[:] = ["c1", "c2"]
    numpy_text[0], numpy_text[1] = np.str_("c1"), np.bytes_(b"c2")
    assert keys_of(node, {"k": numpy_text})[1] == keys_of(node, {"k": plain})[1] == ["c1", "c2"]
