"""Prometheus metrics for the local service: what `Telemetry` reports, as series a scraper reads.

On AWS the same figures are EMF lines (`sluice.observability`); this module is only used where
`sluice serve` turned it on, and `prometheus_client` is imported by nothing else. Under
several uvicorn workers each process writes its own files in `PROMETHEUS_MULTIPROC_DIR`
(the library's multiprocess mode) and a scrape sums them, whichever worker answers it.

Every series carries the tenant it belongs to, and `exposition(tenant)` shows a caller only its
own tenant's: the deployment and model names of other tenants never leave the process.
"""

from __future__ import annotations

import os
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from sluice.settings import in_lambda

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

PREDICTION = ("tenant", "deployment", "model", "version", "variant")
LATENCY_BUCKETS_MS = (1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000)
CHUNK_BUCKETS_S = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 900)


class PrometheusMetrics:
    """The series. Counters are exposed with the `_total` suffix Prometheus gives every counter
    (`ml_inference_model_cache_hits` is read as `ml_inference_model_cache_hits_total`)."""

    def __init__(self, multiprocess_dir: str | None = None) -> None:
        from prometheus_client import CollectorRegistry, Counter, Histogram

        self.multiprocess_dir = multiprocess_dir
        # A registry of its own: two containers in one process (tests) never collide.
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.latency = Histogram(
            "ml_inference_latency_ms", "Prediction latency in milliseconds, answered predictions only",
            PREDICTION, buckets=LATENCY_BUCKETS_MS, registry=r,
        )  # fmt: skip
        self.requests = Counter(
            "ml_inference_requests", "Predictions asked of a deployment, answered or failed "
            "(a failed one has empty model, version and variant)", PREDICTION, registry=r,
        )  # fmt: skip
        self.errors = Counter(
            "ml_inference_errors", "Predictions that failed, by HTTP status and error code",
            ("tenant", "deployment", "status", "code"), registry=r,
        )  # fmt: skip
        self.refusals = Counter(
            "ml_inference_refused", "Requests refused before they started (`sluice serve`'s admission), by code: "
            "overloaded (the worker at capacity, 503), tenant_overloaded (a tenant past its share, 429), "
            "too_many_in_flight (a key past its cap, 429)", ("tenant", "code"), registry=r,
        )  # fmt: skip
        # Per deployment: what the model cache and the prediction cache found.
        self.cache_hits, self.cache_misses, self.answer_hits, self.answer_misses = (
            Counter(name, doc, ("tenant", "deployment"), registry=r)
            for name, doc in (
                ("ml_inference_model_cache_hits", "ONNX sessions found loaded, counted with the prediction that saw them"),
                ("ml_inference_model_cache_misses", "ONNX sessions loaded on demand, counted with the prediction that saw them"),
                ("ml_inference_prediction_cache_hits", "Predictions the prediction cache answered (nothing computed)"),
                ("ml_inference_prediction_cache_misses", "Predictions of a caching deployment computed and then kept"),
            )
        )
        self.rows = Counter(
            "ml_inference_rows_scored", "Rows scored, by online predictions and by batch jobs",
            (*PREDICTION, "source"), registry=r,
        )  # fmt: skip
        self.chunk_duration = Histogram(
            "ml_inference_batch_duration_s", "Seconds to score one batch chunk",
            ("tenant", "deployment"), buckets=CHUNK_BUCKETS_S, registry=r,
        )  # fmt: skip
        self._series: dict[tuple[int, tuple[str, ...]], Any] = {}

    # What Telemetry reports -----------------------------------------------------------------
    def prediction(
        self, fields: Mapping[str, Any], latency_ms: float, rows: int, cache: tuple[int, int] | None,
        cached: bool | None = None,
    ) -> None:  # fmt: skip
        labels = _labels(fields)
        pair = labels[:2]
        self._child(self.requests, labels).inc()
        if not cached:  # latency measures computing: a prediction cache hit stays out
            self._child(self.latency, labels).observe(latency_ms)
        if cached is not None:
            self._child(self.answer_hits if cached else self.answer_misses, pair).inc()
        if rows:
            self._child(self.rows, (*labels, "online")).inc(rows)
        if cache is not None:
            hits, misses = cache
            if hits:
                self._child(self.cache_hits, pair).inc(hits)
            if misses:
                self._child(self.cache_misses, pair).inc(misses)

    def _child(self, metric: Any, labels: tuple[str, ...]) -> Any:
        """`metric.labels(*labels)`, looked up once per label set (created when first used, as before)."""
        key = (id(metric), labels)
        child = self._series.get(key)
        if child is None:
            if len(self._series) > 10_000:
                self._series.clear()
            child = self._series[key] = metric.labels(*labels)
        return child

    def failure(self, fields: Mapping[str, Any], status: int, code: str) -> None:
        tenant, deployment = str(fields.get("tenant") or ""), str(fields.get("deployment") or "")
        if not deployment:
            return  # no deployment resolved: nothing a series could be named after
        self.requests.labels(tenant, deployment, "", "", "").inc()
        self.errors.labels(tenant, deployment, str(status), code).inc()

    def refused(self, tenant: str, code: str) -> None:
        self._child(self.refusals, (tenant, code)).inc()

    def chunk(self, tenant: str, deployment: str, seconds: float, versions: Mapping[str, int]) -> None:
        self.chunk_duration.labels(tenant, deployment).observe(seconds)
        for ref, rows in versions.items():
            model, _, version = ref.rpartition(":")
            if rows:
                self.rows.labels(tenant, deployment, model, version, "", "batch").inc(rows)

    # What a scrape reads ----------------------------------------------------------------------
    def exposition(self, tenant: str) -> bytes:
        """The text exposition of `tenant`'s series alone (summed over every worker)."""
        from prometheus_client import CollectorRegistry, generate_latest

        source: Any = self.registry
        if self.multiprocess_dir:
            from prometheus_client.multiprocess import MultiProcessCollector

            source = CollectorRegistry()
            MultiProcessCollector(source, path=self.multiprocess_dir)
        shown = CollectorRegistry(auto_describe=False)
        shown.register(_TenantView(source, tenant))  # type: ignore[arg-type]
        return generate_latest(shown)


class _TenantView:
    """A collector that passes on only the samples labelled with one tenant."""

    def __init__(self, source: Any, tenant: str) -> None:
        self.source = source
        self.tenant = tenant

    def collect(self) -> Iterator[Any]:
        from prometheus_client import Metric

        for family in self.source.collect():
            kept = Metric(family.name, family.documentation, family.type, family.unit)
            # `_created` timestamps are left out: multiprocess mode has none, and the two modes
            # should read alike.
            kept.samples = [
                s for s in family.samples if s.labels.get("tenant") == self.tenant and not s.name.endswith("_created")
            ]
            yield kept


def _labels(fields: Mapping[str, Any]) -> tuple[str, str, str, str, str]:
    version = fields.get("version")
    return (
        str(fields.get("tenant") or ""),
        str(fields.get("deployment") or ""),
        str(fields.get("model") or ""),
        "" if version is None else str(version),
        str(fields.get("variant") or ""),
    )


def from_environment() -> PrometheusMetrics | None:
    """The process's metrics when `sluice serve` turned them on (it sets the multiprocess
    folder before any worker starts); None in Lambda and everywhere else."""
    folder = os.environ.get(MULTIPROC_ENV)
    if not folder or in_lambda():
        return None
    return _shared(folder)


@lru_cache(maxsize=4)
def _shared(folder: str) -> PrometheusMetrics:
    # One set per process: two objects over one worker's files would overwrite each other.
    return PrometheusMetrics(folder)
