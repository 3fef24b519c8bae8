"""Log-spaced latency histograms: additive (so containers can merge them with plain
counters) and precise to a few percent for percentiles."""

from __future__ import annotations

import math
from collections.abc import Mapping

GROWTH = 1.05
FLOOR_MS = 0.01
PREFIX = "lat_"


_LOG_GROWTH = math.log(GROWTH)
_log = math.log


_NAMES = tuple(f"{PREFIX}{i}" for i in range(512))  # latencies up to days: made once


def bucket_name(latency_ms: float) -> str:
    """The counter a latency adds to (`lat_<bucket>`): the rule of the buckets, here rather
    than behind a call to `bucket` (it runs for each of a request's samples)."""
    if latency_ms <= FLOOR_MS:
        return _NAMES[0]
    index = 1 + int(_log(latency_ms / FLOOR_MS) / _LOG_GROWTH)  # the same division `math.log(x, GROWTH)` makes
    return _NAMES[index] if index < 512 else f"{PREFIX}{index}"


def bucket(latency_ms: float) -> int:
    """The index of the bucket a latency falls in (`bucket_name`'s)."""
    return int(bucket_name(latency_ms)[len(PREFIX) :])


def bucket_value(index: int) -> float:
    """A representative latency for a bucket (its geometric middle)."""
    if index == 0:
        return FLOOR_MS
    return FLOOR_MS * GROWTH ** (index - 0.5)


def percentile(counters: Mapping[str, float], q: float) -> float | None:
    """The q-th percentile (0-100) of latencies in counters keyed `lat_<bucket>`."""
    buckets = sorted((int(k[len(PREFIX):]), v) for k, v in counters.items() if k.startswith(PREFIX) and v > 0)
    total = sum(v for _, v in buckets)
    if total == 0:
        return None
    rank = q / 100 * total
    seen = 0.0
    for index, count in buckets:
        seen += count
        if seen >= rank:
            return round(bucket_value(index), 3)
    return round(bucket_value(buckets[-1][0]), 3)
