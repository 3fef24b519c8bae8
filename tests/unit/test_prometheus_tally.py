"""An answered prediction is tallied and added to the Prometheus series later
(`sluice.metrics`): a scrape reads what the client's own `inc` and `observe`, called for every
prediction, would have written; a worker's tallies reach its files within `sluice.metrics_tally.FLUSH_S` without a
scrape, and as it exits."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from sluice.metrics import LATENCY_BUCKETS_MS, PrometheusMetrics, _labels

REPO = Path(__file__).resolve().parents[2]

FIELDS = st.fixed_dictionaries({
    "tenant": st.sampled_from(["acme", "globex"]), "deployment": st.sampled_from(["iris", "fraud"]),
    "model": st.sampled_from(["iris", "", None]), "version": st.sampled_from([1, 2, None]), "variant": st.sampled_from(["", "a", None]),
})  # fmt: skip
LATENCY = st.one_of(
    st.sampled_from([*LATENCY_BUCKETS_MS, 0.0, -1.0, math.inf, math.nan]),  # on a bound, below, past the last
    st.floats(min_value=0, max_value=60_000, allow_nan=False),
)
PREDICTION = st.tuples(
    FIELDS, LATENCY, st.integers(0, 5_000), st.one_of(st.none(), st.tuples(st.integers(0, 3), st.integers(0, 3))),
    st.sampled_from([None, True, False]), st.booleans(),
)  # fmt: skip


def direct(sink: PrometheusMetrics, fields: dict[str, Any], latency_ms: float, rows: int, cache: tuple[int, int] | None, cached: bool | None) -> None:
    """What a prediction wrote before it was tallied: the client's calls, one prediction at a time."""
    labels = _labels(fields)
    sink.requests.labels(*labels, "2xx").inc()
    if not cached:
        sink.latency.labels(*labels).observe(latency_ms)
    if cached is not None:
        (sink.answer_hits if cached else sink.answer_misses).labels(*labels[:2]).inc()
    if rows:
        sink.rows.labels(*labels, "online").inc(rows)
    if cache is not None:
        if cache[0]:
            sink.cache_hits.labels(*labels[:2]).inc(cache[0])
        if cache[1]:
            sink.cache_misses.labels(*labels[:2]).inc(cache[1])


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value for f in text_string_to_metric_families(text) for s in f.samples}


@settings(max_examples=30, deadline=None)
@given(st.lists(PREDICTION, max_size=40))
def test_a_scrape_reads_what_calling_the_client_per_prediction_would_have_written(predictions: list[Any]) -> None:
    tallied, reference = PrometheusMetrics(), PrometheusMetrics()
    for fields, latency_ms, rows, cache, cached, flush in predictions:
        tallied.prediction(fields, latency_ms, rows, cache, cached=cached)
        direct(reference, fields, latency_ms, rows, cache, cached)
        if flush:  # the flushing thread may come between any two predictions
            tallied.flush()
    for tenant in ("acme", "globex"):
        got, want = samples(tallied.exposition(tenant).decode()), samples(reference.exposition(tenant).decode())
        assert got.keys() == want.keys()
        for key, expected in want.items():
            if key[0].endswith("_sum"):  # added in another order where a flush came between
                assert math.isclose(got[key], expected, rel_tol=1e-9) or (math.isnan(got[key]) and math.isnan(expected)) or got[key] == expected, key
            else:
                assert got[key] == expected, key


WORKER = r"""
import os, sys, time
os.environ["PROMETHEUS_MULTIPROC_DIR"] = sys.argv[1]
from sluice.metrics import PrometheusMetrics
from sluice.metrics_tally import FLUSH_S

metrics = PrometheusMetrics(sys.argv[1])
fields = {"tenant": "acme", "deployment": "iris", "model": "iris", "version": 1}
for _ in range(3):
    metrics.prediction(fields, 2.0, 4, (1, 0))
if sys.argv[2] == "wait":  # no scrape: the process's thread writes the tallies
    time.sleep(FLUSH_S * 3)
    os._exit(0)  # no exit handlers: only the thread can have written them
"""


def requests_in(folder: Path) -> float:
    from prometheus_client import CollectorRegistry
    from prometheus_client.multiprocess import MultiProcessCollector

    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=str(folder))
    labels = {"tenant": "acme", "deployment": "iris", "model": "iris", "version": "1", "variant": "", "class": "2xx"}
    return registry.get_sample_value("ml_inference_requests_total", labels) or 0.0


def test_a_workers_tallies_reach_its_files_within_the_flush_interval_and_as_it_exits(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO / "functions")}
    for how in ("wait", "exit"):  # the thread, or the exit handler (the process ends at once)
        folder = tmp_path / how
        folder.mkdir()
        done = subprocess.run([sys.executable, "-c", WORKER, str(folder), how], env=env, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        assert requests_in(folder) == 3, how
