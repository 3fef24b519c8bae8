"""Answered predictions tallied in memory for the Prometheus series (`sluice.metrics`).

A prediction is a few additions under a lock, per label set; the tallies are added to the
series at most `FLUSH_S` later, by one thread of the process (`FLUSHER`), before the process
answers a scrape, and as it exits: a request never pays the client's per-value locks, the
histogram's bucket search in Python, or (under `sluice serve`) the writes to its mapped files.
Under several workers a scrape may so miss up to the last second of another worker's
predictions, never count one twice.
"""

from __future__ import annotations

import atexit
import os
import threading
import time
import weakref
from bisect import bisect_left
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from collections.abc import Sequence

FLUSH_S = 1.0  # the longest a tallied prediction waits to reach the series


class Tally:
    """What one label set's answered predictions add to the series at the next flush: requests,
    the latency histogram's sum and bucket counts (over `bounds`; the last: +Inf), rows and the
    caches' counts."""

    __slots__ = ("answer_hits", "answer_misses", "bounds", "buckets", "cache_hits", "cache_misses", "observed", "requests", "rows", "sum")

    def __init__(self, bounds: Sequence[float]) -> None:
        self.requests = self.observed = self.rows = self.answer_hits = self.answer_misses = self.cache_hits = self.cache_misses = 0
        self.sum = 0.0
        self.bounds = bounds
        self.buckets = [0] * (len(bounds) + 1)

    def add(self, latency_ms: float, rows: int, cache: tuple[int, int] | None, cached: bool | None) -> None:
        """One answered prediction (a prediction cache hit's latency stays out: it measures computing)."""
        self.requests += 1
        if not cached:
            self.observed += 1
            self.sum += latency_ms
            if latency_ms == latency_ms:  # the first bucket whose bound is at least it, as the client's `observe` (NaN: none)
                self.buckets[bisect_left(self.bounds, latency_ms)] += 1
        if cached is not None:
            if cached:
                self.answer_hits += 1
            else:
                self.answer_misses += 1
        self.rows += rows
        if cache is not None:
            self.cache_hits += cache[0]
            self.cache_misses += cache[1]


class Flushed(Protocol):
    def flush(self) -> None: ...


class Flusher:
    """The process's one thread that flushes everything it watches each `FLUSH_S`, and once
    more as the process exits. Started when first needed (in a forked child too)."""

    def __init__(self) -> None:
        self._watched: weakref.WeakSet[Flushed] = weakref.WeakSet()
        self._lock = threading.Lock()
        self._pid = 0  # the process whose thread runs
        atexit.register(self.flush_all)

    def watch(self, metrics: Flushed) -> None:
        with self._lock:
            self._watched.add(metrics)
            if self._pid != os.getpid():
                self._pid = os.getpid()
                threading.Thread(target=self._run, name="sluice-metrics-flush", daemon=True).start()

    def _run(self) -> None:
        while True:
            time.sleep(FLUSH_S)
            self.flush_all()

    def flush_all(self) -> None:
        with self._lock:
            watched = list(self._watched)
        for metrics in watched:
            metrics.flush()


FLUSHER = Flusher()
