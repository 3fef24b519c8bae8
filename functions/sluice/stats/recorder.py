"""Counters kept in memory and merged into the registry in batches, so a request costs a
few dict updates rather than a database write."""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from typing import TYPE_CHECKING

from sluice.registry.scope import use_tenant
from sluice.stats.histogram import PREFIX, bucket

if TYPE_CHECKING:
    from sluice.registry import StatsRegistry

Key = tuple[str, str, int, str]  # tenant, deployment, revision, subject


class StatsRecorder:
    def __init__(self, registry: StatsRegistry, *, flush_every_s: float = 2.0) -> None:
        self.registry = registry
        self.flush_every_s = flush_every_s
        self._sums: dict[Key, defaultdict[str, float]] = {}
        self._maxes: dict[Key, dict[str, float]] = {}
        self._lock = threading.Lock()
        self._last_flush = time.monotonic()

    def _sums_of(self, key: Key) -> defaultdict[str, float]:
        sums = self._sums.get(key)
        if sums is None:
            sums = self._sums[key] = defaultdict(float)
        return sums

    def request(self, key: Key, latency_ms: float, ok: bool, rows: int = 0) -> None:
        with self._lock:
            sums = self._sums_of(key)
            sums["requests"] += 1
            if ok:
                sums[f"{PREFIX}{bucket(latency_ms)}"] += 1
                sums["latency_ms_sum"] += latency_ms  # Triton's statistics report total time
            else:
                sums["errors"] += 1
            if rows:
                sums["rows"] += rows

    def add(self, key: Key, sums: dict[str, float], maxes: dict[str, float] | None = None) -> None:
        with self._lock:
            target = self._sums_of(key)
            for name, value in sums.items():
                target[name] += value
            if maxes:
                current = self._maxes.setdefault(key, {})
                for name, value in maxes.items():
                    current[name] = max(current.get(name, value), value)

    def due(self) -> bool:
        return bool(self._sums) and time.monotonic() - self._last_flush >= self.flush_every_s

    def flush(self) -> None:
        with self._lock:
            sums, maxes = self._sums, self._maxes
            self._sums, self._maxes = {}, {}
            self._last_flush = time.monotonic()
        for key in sums.keys() | maxes.keys():
            tenant, deployment, revision, subject = key
            with use_tenant(tenant):  # counters kept for each tenant's own requests, written as it
                self.registry.merge_stats(
                    tenant, deployment, revision, subject, dict(sums.get(key, {})), maxes.get(key, {})
                )
