"""Latency buckets that resolve the work: a known latency distribution, observed through the
Prometheus series and read back from the exposition as Prometheus's `histogram_quantile`
reads it, lands within the width of the bucket that holds the true quantile, and that width
is of the value's own order, from 50 µs to 30 s."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from sluice.metrics import LATENCY_BUCKETS_MS, PrometheusMetrics

FIELDS = {"tenant": "acme", "deployment": "iris", "model": "iris", "version": 1}


def buckets_of(exposition: str) -> list[tuple[float, float]]:
    """(upper bound, cumulative count) of the latency histogram, `+Inf` last."""
    found = [
        (float(s.labels["le"]), s.value)
        for family in text_string_to_metric_families(exposition)
        for s in family.samples
        if s.name == "ml_inference_latency_ms_bucket"
    ]
    return sorted(found)


def histogram_quantile(q: float, buckets: list[tuple[float, float]]) -> float:
    """Prometheus's `histogram_quantile` (promql/quantile.go, `bucketQuantile`): the rank's
    bucket found on the cumulative counts, the value interpolated linearly inside it; the
    first bucket starts at 0 (when its bound is positive), a rank in `+Inf` reads as the
    highest finite bound."""
    total = buckets[-1][1]
    rank = q * total
    index = next(i for i, (_, count) in enumerate(buckets) if count >= rank)
    if index == len(buckets) - 1:
        return buckets[-2][0]
    upper, count = buckets[index]
    if index == 0 and upper <= 0:
        return upper
    lower, below = (0.0, 0.0) if index == 0 else buckets[index - 1]
    return lower + (upper - lower) * (rank - below) / (count - below)


def width_around(value: float) -> tuple[float, float]:
    bounds = (0.0, *LATENCY_BUCKETS_MS)
    for lower, upper in itertools.pairwise(bounds):
        if value <= upper:
            return lower, upper
    raise AssertionError(f"{value} ms is past the last finite bucket")


@pytest.mark.parametrize("centre_ms", [0.12, 0.4, 3.0, 40.0, 700.0, 4000.0])
def test_a_known_distribution_reads_back_within_a_bucket(centre_ms: float) -> None:
    rng = np.random.default_rng(31)
    latencies = np.clip(rng.lognormal(math.log(centre_ms), 0.5, 4000), 0.05, 9000.0)
    sink = PrometheusMetrics()
    for ms in latencies:
        sink.prediction(FIELDS, float(ms), 1, None)
    buckets = buckets_of(sink.exposition("acme").decode())
    assert buckets[-1] == (math.inf, len(latencies))
    for q in (0.5, 0.9, 0.99):
        true = float(np.quantile(latencies, q))
        lower, upper = width_around(true)
        read = histogram_quantile(q, buckets)
        assert abs(read - true) <= upper - lower, (q, true, read)
        # The bucket is of the value's own order: a sub-millisecond latency is not read as a
        # fraction of the first millisecond.
        assert upper - lower <= 2 * true, (q, true, lower, upper)


def test_the_buckets_span_50_microseconds_to_30_seconds() -> None:
    assert LATENCY_BUCKETS_MS[0] == 0.05 and LATENCY_BUCKETS_MS[-1] == 30_000
    assert list(LATENCY_BUCKETS_MS) == sorted(set(LATENCY_BUCKETS_MS))
    # No bucket more than 3 times its lower neighbour: about three a decade.
    assert max(b / a for a, b in itertools.pairwise(LATENCY_BUCKETS_MS)) <= 3.0
