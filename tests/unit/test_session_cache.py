from __future__ import annotations

import contextlib
import threading
import time
from typing import Any

import pytest

from sluice.domain.errors import PayloadTooLarge
from sluice.runtimes.onnx import SessionCache, _Entry


def entry(size: int) -> _Entry:
    return _Entry(session=object(), size=size, output_names=[])


def test_bounded_by_bytes_not_count_and_least_recent_goes_first() -> None:
    cache = SessionCache(max_bytes=100)
    cache.get_or_load("a", 40, lambda: entry(40))
    cache.get_or_load("b", 40, lambda: entry(40))
    cache.get_or_load("a", 40, lambda: entry(40))  # a is now the most recent
    cache.get_or_load("c", 40, lambda: entry(40))  # over 100: b goes
    assert "a" in cache and "c" in cache and "b" not in cache
    assert cache.bytes_used == 80
    assert cache.stats() | {} == {"hits": 1, "misses": 3, "evictions": 1, "sessions": 2, "bytes": 80, "max_bytes": 100}
    cache.get_or_load("d", 10, lambda: entry(10))
    cache.get_or_load("e", 10, lambda: entry(10))
    assert len(cache) == 4  # many small sessions fit where count-bounded caches would evict


def test_an_artifact_larger_than_the_bound_is_refused() -> None:
    cache = SessionCache(max_bytes=100)
    with pytest.raises(PayloadTooLarge):
        cache.get_or_load("big", 101, lambda: entry(101))


def test_concurrent_requests_for_one_key_load_it_once() -> None:
    cache = SessionCache(max_bytes=1000)
    loads = []

    def slow_load() -> _Entry:
        loads.append(1)
        time.sleep(0.05)
        return entry(10)

    results = []
    threads = [threading.Thread(target=lambda: results.append(cache.get_or_load("k", 10, slow_load))) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(loads) == 1
    assert len({id(r) for r, _ in results}) == 1
    assert cache.misses == 1 and cache.hits == 7
    assert sorted(loaded for _, loaded in results) == [False] * 7 + [True]  # each call knows its own


def test_after_a_failed_load_the_callers_waiting_and_those_arriving_load_it_once_and_count_it_once() -> None:
    """A load fails while another call waits for it; a third call arrives as the second loads.
    One load more, one entry, its bytes counted once, and no lock left behind: a failed load
    that let the waiting call and the new one each load under a lock of its own loaded the model
    twice at once and counted its bytes twice for good (the cache then evicted what it had room for)."""
    cache = SessionCache(max_bytes=1000)
    loads: list[str] = []
    first_in, first_go, second_in, second_go = (threading.Event() for _ in range(4))

    def failing() -> _Entry:
        first_in.set()
        first_go.wait()
        raise RuntimeError("the first load fails")

    def second() -> _Entry:
        loads.append("second")
        second_in.set()
        second_go.wait()
        return entry(100)

    def third() -> _Entry:
        loads.append("third")
        return entry(100)

    def call(load: Any) -> None:
        with contextlib.suppress(RuntimeError):
            cache.get_or_load("k", 100, load)

    threads = [threading.Thread(target=call, args=(failing,))]
    threads[0].start()
    first_in.wait()
    threads.append(threading.Thread(target=call, args=(second,)))
    threads[1].start()
    time.sleep(0.1)  # the second waits for the first's lock
    first_go.set()
    second_in.wait()
    threads.append(threading.Thread(target=call, args=(third,)))
    threads[2].start()
    time.sleep(0.1)  # the third arrives while the second loads
    second_go.set()
    for t in threads:
        t.join(5)
    assert loads == ["second"]
    assert (len(cache), cache.bytes_used, cache.misses, cache.hits) == (1, 100, 1, 1)
    assert cache._loading == {}
