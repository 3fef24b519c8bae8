"""The feature cache of lookup steps (`sluice.runtimes.lookup_cache`) on a real SQLite features
file per tenant, with a clock the test moves: what a second request reads from the store, when
an entry expires, that a record turned stale is read again rather than served, that no tenant,
table or feature set meets another's entries, and that without the cache nothing changes."""

from __future__ import annotations

import sqlite3
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

from sluice.domain.errors import Unprocessable
from sluice.domain.lookups import Lookup
from sluice.inference.loop import run
from sluice.runtimes.lookups import LookupSteps
from sluice.settings import LookupSettings
from tests.support import Clock

if TYPE_CHECKING:
    from pathlib import Path

T0 = 1_800_000_000.0

def write(path: Path, table: str, rows: dict[Any, tuple[float, float]]) -> None:
    """rows: key -> (value, event time)."""
    with sqlite3.connect(path) as db:
        kind = "INTEGER" if rows and isinstance(next(iter(rows)), int) else "TEXT"
        db.execute(f"CREATE TABLE IF NOT EXISTS {table} (id {kind} PRIMARY KEY, value REAL, event_time REAL)")
        db.executemany(f"INSERT OR REPLACE INTO {table} VALUES (?, ?, ?)", [(k, v, t) for k, (v, t) in rows.items()])
    db.close()


def node(table: str = "f", *, default: float | None = 0.0, datatype: str = "FP64", **extra: Any) -> Lookup:
    feature: dict[str, Any] = {"name": "value", "datatype": datatype, **({"default": default} if default is not None else {})}
    return Lookup(store="sqlite", table=table, keys={"id": "k"}, features=[feature], **extra)


@pytest.fixture
def world(tmp_path: Path) -> tuple[LookupSteps, Clock, Path]:
    clock = Clock(T0)
    steps = LookupSteps(LookupSettings(lookup_sqlite=str(tmp_path / "{tenant}.db"), lookup_cache_entries=1000), mode="local", clock=clock)
    write(tmp_path / "acme.db", "f", {"a": (1.0, T0), "b": (2.0, T0)})
    return steps, clock, tmp_path


def ask(steps: LookupSteps, lookup: Lookup, keys: list[Any], tenant: str = "acme") -> tuple[list[Any], Any]:
    array = np.array(keys, dtype=object if isinstance(keys[0], str) else np.int64)
    looked = run(steps.lookup(lookup, tenant, {"k": array}, timeout_s=5))
    return looked.outputs["value"].tolist(), looked


def test_a_second_request_is_answered_from_the_cache_until_its_entries_expire(world: tuple[LookupSteps, Clock, Path]) -> None:
    steps, clock, folder = world
    cached = node(cache_ttl_s=60)
    values, looked = ask(steps, cached, ["a", "b", "a", "nobody"])
    assert values == [1.0, 2.0, 1.0, 0.0] and (looked.store_calls, looked.cache_hits, looked.cache_misses) == (1, 0, 4)
    write(folder / "acme.db", "f", {"a": (10.0, T0 + 30)})  # the store changes: the cache answers as before for its ttl
    clock.now = T0 + 59
    values, looked = ask(steps, cached, ["a", "nobody", "b"])
    assert values == [1.0, 0.0, 2.0] and (looked.store_calls, looked.cache_hits, looked.cache_misses) == (0, 3, 0)
    values, looked = ask(steps, cached, ["a", "c"])  # a key not asked before: read, alone
    assert (looked.store_calls, looked.cache_hits, looked.cache_misses) == (1, 1, 1)
    clock.now = T0 + 61  # past the ttl: read again, the new value
    values, looked = ask(steps, cached, ["a", "b"])
    assert values == [10.0, 2.0] and (looked.store_calls, looked.cache_hits) == (1, 0)


def test_a_record_turning_stale_is_read_again_and_a_stale_value_is_never_served(world: tuple[LookupSteps, Clock, Path]) -> None:
    steps, clock, folder = world
    write(folder / "acme.db", "f", {"old": (5.0, T0 - 90)})  # fresh for ten more seconds
    fresh = node(max_age_s=100, cache_ttl_s=3600, event_time_output="at")  # the ttl taken down to max_age_s
    assert steps.ttl(fresh) == 100
    values, looked = ask(steps, fresh, ["old"])
    assert values == [5.0] and looked.cache_misses == 1
    clock.now = T0 + 5
    assert ask(steps, fresh, ["old"])[1].cache_hits == 1
    clock.now = T0 + 20  # stale now: the entry went with it, and the store still holds the old record
    values, looked = ask(steps, fresh, ["old"])
    assert values == [0.0] and (looked.store_calls, looked.cache_hits) == (1, 0)  # its default, not the cached 5.0
    assert looked.outputs["at"].tolist() == [T0 - 90]  # its event time still told: why it was not used
    write(folder / "acme.db", "f", {"old": (7.0, T0 + 20)})  # refreshed in the store: served at once
    assert ask(steps, fresh, ["old"])[0] == [7.0]
    strict = node(default=None, max_age_s=100, cache_ttl_s=3600)
    write(folder / "acme.db", "f", {"edge": (1.0, T0 - 50)})
    assert ask(steps, strict, ["edge"])[0] == [1.0]
    clock.now = T0 + 60  # stale while the entry would otherwise live: a 422 as without the cache
    with pytest.raises(Unprocessable, match="older than max_age_s"):
        ask(steps, strict, ["edge"])


def test_no_tenant_table_or_feature_set_meets_anothers_entries(world: tuple[LookupSteps, Clock, Path]) -> None:
    steps, _, folder = world
    write(folder / "globex.db", "f", {"a": (100.0, T0)})
    write(folder / "acme.db", "g", {"a": (1000.0, T0)})
    assert ask(steps, node(cache_ttl_s=60), ["a"])[0] == [1.0]
    values, looked = ask(steps, node(cache_ttl_s=60), ["a"], tenant="globex")  # the same table, key and features
    assert values == [100.0] and (looked.store_calls, looked.cache_hits) == (1, 0)
    values, looked = ask(steps, node("g", cache_ttl_s=60), ["a"])  # another table of the same tenant
    assert values == [1000.0] and looked.cache_hits == 0
    values, looked = ask(steps, node(cache_ttl_s=60, datatype="FP32"), ["a"])  # the same feature as another datatype
    assert looked.cache_hits == 0 and looked.outputs["value"].dtype == np.float32
    assert [ask(steps, node(cache_ttl_s=60), ["a"], tenant=t)[0] for t in ("acme", "globex", "acme")] == [[1.0], [100.0], [1.0]]


def test_an_entry_never_answers_a_lookup_that_keeps_values_less_long(world: tuple[LookupSteps, Clock, Path]) -> None:
    """Two lookups of one table and features, one keeping values longer (a larger `max_age_s`
    or `cache_ttl_s`): the other is never answered by an entry the first kept, which may hold a
    record it should read again."""
    steps, clock, folder = world
    write(folder / "acme.db", "f", {"a": (1.0, T0 - 30)})
    lenient, strict = node(max_age_s=86400, cache_ttl_s=3600), node(max_age_s=60, cache_ttl_s=3600)
    assert ask(steps, lenient, ["a"])[0] == [1.0]
    write(folder / "acme.db", "f", {"a": (2.0, T0 + 50)})  # a fresh record
    clock.now = T0 + 100
    values, looked = ask(steps, strict, ["a"])
    assert values == [2.0] and (looked.store_calls, looked.cache_hits) == (1, 0)  # not the stale entry's default
    long, short = node(cache_ttl_s=3600), node(cache_ttl_s=10)
    assert ask(steps, long, ["b"])[0] == [2.0]
    write(folder / "acme.db", "f", {"b": (20.0, T0 + 101)})
    clock.now = T0 + 120
    assert ask(steps, short, ["b"])[0] == [20.0]  # the store as it is now: within the short lookup's 10 s


def test_without_the_cache_every_request_reads_the_store(tmp_path: Path) -> None:
    write(tmp_path / "acme.db", "f", {"a": (1.0, T0)})
    on = LookupSteps(LookupSettings(lookup_sqlite=str(tmp_path / "{tenant}.db")), mode="local")
    off = LookupSteps(LookupSettings(lookup_sqlite=str(tmp_path / "{tenant}.db"), lookup_cache_entries=0), mode="local")
    for steps, lookup in ((on, node()), (on, node(cache_ttl_s=0)), (off, node(cache_ttl_s=60))):
        for _ in range(2):
            values, looked = ask(steps, lookup, ["a", "a"])
            assert values == [1.0, 1.0] and (looked.store_calls, looked.cache_hits, looked.cache_misses) == (1, None, None)
    assert off.cache is None and len(on.cache or ()) == 0
    operator = LookupSteps(LookupSettings(lookup_sqlite=str(tmp_path / "{tenant}.db"), lookup_cache_ttl_s=30), mode="local")
    assert operator.ttl(node()) == 30 and operator.ttl(node(cache_ttl_s=0)) == 0 and operator.ttl(node(max_age_s=10)) == 10
    assert ask(operator, node(), ["a"])[1].cache_misses == 1 and ask(operator, node(), ["a"])[1].cache_hits == 1


def test_the_cache_holds_at_most_its_entries_and_answers_right_past_them(tmp_path: Path) -> None:
    write(tmp_path / "acme.db", "f", {f"k{i}": (float(i), T0) for i in range(12)})
    steps = LookupSteps(LookupSettings(lookup_sqlite=str(tmp_path / "{tenant}.db"), lookup_cache_entries=5), mode="local", clock=Clock(T0))
    assert steps.cache is not None
    for keys in ([f"k{i}" for i in range(8)], [f"k{i}" for i in range(4, 12)], ["k0", "k11", "k3"]):
        values, _ = ask(steps, node(cache_ttl_s=60), keys)
        assert values == [float(k[1:]) for k in keys] and len(steps.cache) <= 5
    write(tmp_path / "acme.db", "g", {"k0": (-1.0, T0)})
    ask(steps, node("g", cache_ttl_s=60), ["k0"])  # another table's entry: the least recently used table gives way
    assert len(steps.cache) <= 5


def test_integer_keys_of_one_hash_never_answer_for_each_other(tmp_path: Path) -> None:
    """Python hashes 1 and 2**61 alike: the cache finds entries by hash and compares the key."""
    assert hash(1) == hash(2**61)
    write(tmp_path / "acme.db", "f", {1: (1.0, T0), 2**61: (2.0, T0)})
    steps = LookupSteps(LookupSettings(lookup_sqlite=str(tmp_path / "{tenant}.db")), mode="local", clock=Clock(T0))
    cached = node(cache_ttl_s=60)
    assert ask(steps, cached, [2**61, 1, 2**61])[0] == [2.0, 1.0, 2.0]  # one request: told apart
    assert ask(steps, cached, [1])[0] == [1.0]
    assert ask(steps, cached, [2**61, 1])[0] == [2.0, 1.0]
    assert ask(steps, node(), [1, 2**61])[0] == [1.0, 2.0]  # and without the cache
    many = [1, 2**61, 1] * 100  # enough rows to be told apart by sorting their hashes: the keys compared
    assert ask(steps, node(), many)[0] == [1.0, 2.0, 1.0] * 100
    assert ask(steps, cached, many)[0] == [1.0, 2.0, 1.0] * 100


def test_with_and_without_the_cache_a_lookup_answers_alike(tmp_path: Path) -> None:
    """The uncached path spreads the store's lists, the cached one serves arrays: the same
    values, defaults, event times and 422s, for repeated keys, a missing entity, a null value
    and a stale record."""
    write(tmp_path / "acme.db", "f", {"a": (1.0, T0), "b": (2.0, T0 - 100), "n": (None, T0)})  # type: ignore[dict-item]
    steps = LookupSteps(LookupSettings(lookup_sqlite=str(tmp_path / "{tenant}.db")), mode="local", clock=Clock(T0))
    rows = ["a", "b", "a", "nobody", "n", "a"]
    for extra in ({}, {"max_age_s": 50, "event_time_output": "seen"}):
        answers = []
        for ttl in (None, 60):  # without the cache, then with it: its first and second answers
            for _ in range(1 if ttl is None else 2):
                looked = ask(steps, node(**extra, **({"cache_ttl_s": ttl} if ttl else {})), rows)[1]
                answers.append({name: [None if x != x else x for x in v.tolist()] for name, v in looked.outputs.items() if name != "k"})  # NaN: None
        assert answers[0]["value"] == ([1.0, 2.0, 1.0, 0.0, 0.0, 1.0] if not extra else [1.0, 0.0, 1.0, 0.0, 0.0, 1.0])
        assert answers[1:] == [answers[0], answers[0]]
        for ttl in (None, 60):
            strict = node(default=None, **extra, **({"cache_ttl_s": ttl} if ttl else {}))
            for keys, words in ((["a", "nobody"], "'nobody'.*not in the store"), (["a", "n"], "'n'.*feature is missing"), (["a", "b"], "'b'.*older than max_age_s")):
                if "older" in words and not extra:
                    assert ask(steps, strict, keys)[0] == [1.0, 2.0]
                    continue
                with pytest.raises(Unprocessable, match=words):
                    ask(steps, strict, keys)


def test_threads_sharing_a_small_cache_always_get_their_own_values(tmp_path: Path) -> None:
    """Lookups from several threads at once, through a cache too small for their keys: entries
    come and go while others read them, and every answer is the store's."""
    from concurrent.futures import ThreadPoolExecutor

    write(tmp_path / "acme.db", "f", {f"k{i}": (float(i), T0) for i in range(60)})
    write(tmp_path / "globex.db", "f", {f"k{i}": (-float(i), T0) for i in range(60)})
    steps = LookupSteps(LookupSettings(lookup_sqlite=str(tmp_path / "{tenant}.db"), lookup_cache_entries=25), mode="local", clock=Clock(T0))
    cached = node(cache_ttl_s=60)

    def worker(seed: int) -> int:
        rng = np.random.default_rng(seed)
        wrong = 0
        for _ in range(20):
            tenant = ("acme", "globex")[int(rng.integers(2))]
            keys = [f"k{i}" for i in rng.integers(0, 60, int(rng.integers(1, 30)))]
            sign = 1.0 if tenant == "acme" else -1.0
            wrong += ask(steps, cached, keys, tenant)[0] != [sign * float(k[1:]) for k in keys]
        return wrong

    with ThreadPoolExecutor(3) as pool:
        assert sum(pool.map(worker, range(3))) == 0
    assert steps.cache is not None and len(steps.cache) <= 25 and steps.cache.hits > 0
