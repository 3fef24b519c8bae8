"""Prometheus metrics for the local service: what `Telemetry` reports, as series a scraper reads.

On AWS the same figures are EMF lines (`sluice.observability`); this module is only used where
`sluice serve` turned it on, and `prometheus_client` is imported by nothing else. Under
several uvicorn workers each process writes its own files in `PROMETHEUS_MULTIPROC_DIR`
(the library's multiprocess mode) and a scrape sums them, whichever worker answers it.

Every series carries the tenant it belongs to, and `exposition(tenant)` shows a caller only its
own tenant's: the deployment and model names of other tenants never leave the process.

An answered prediction is tallied in memory and added to the series within a second
(`sluice.metrics_tally`).

A disk too full to take a new series never fails the request that reports it, nor kills the
worker (`allocate_before_mapping`): the figure is lost, and a warning says so.
"""

from __future__ import annotations

import functools
import os
import threading
import time
from functools import lru_cache
from typing import TYPE_CHECKING, Any, TypeVar

from sluice.metrics_tally import FLUSHER, Tally
from sluice.observability import get_logger
from sluice.settings import in_lambda

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping

F = TypeVar("F", bound="Callable[..., None]")

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

PREDICTION = ("tenant", "deployment", "model", "version", "variant")
# 50 µs to 30 s, about three buckets a decade: a sub-millisecond prediction reads back through
# `histogram_quantile` within its bucket, not as a fraction of the first millisecond.
LATENCY_BUCKETS_MS = (
    0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000,
)
CHUNK_BUCKETS_S = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 900)


def _kept(method: F) -> F:
    """A figure the disk cannot take (a full disk under the multiprocess files) is lost and
    said, never raised into the request that reported it."""

    @functools.wraps(method)
    def kept(self: PrometheusMetrics, *args: Any, **kwargs: Any) -> None:
        try:
            method(self, *args, **kwargs)
        except OSError as exc:
            now = time.monotonic()
            if now - self._complained >= 60.0:  # at the first, then at most once a minute
                self._complained = now
                get_logger().warning("metrics not written", extra={"error": repr(exc), "folder": self.multiprocess_dir})

    return kept  # type: ignore[return-value]


class PrometheusMetrics:
    """The series. Counters are exposed with the `_total` suffix Prometheus gives every counter
    (`ml_inference_model_cache_hits` is read as `ml_inference_model_cache_hits_total`)."""

    def __init__(self, multiprocess_dir: str | None = None) -> None:
        from prometheus_client import CollectorRegistry, Counter, Histogram

        self.multiprocess_dir = multiprocess_dir
        self._complained = -60.0
        if multiprocess_dir:
            allocate_before_mapping()
        # A registry of its own: two containers in one process (tests) never collide.
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.latency = Histogram(
            "ml_inference_latency_ms", "Prediction latency in milliseconds, answered predictions only",
            PREDICTION, buckets=LATENCY_BUCKETS_MS, registry=r,
        )  # fmt: skip
        self.requests = Counter(
            "ml_inference_requests", "Prediction requests, each counted once: answered (class 2xx) or failed "
            "anywhere after authentication (4xx, 5xx; empty model, version and variant; an empty deployment "
            "where the name found none)", (*PREDICTION, "class"), registry=r,
        )  # fmt: skip
        self.errors = Counter(
            "ml_inference_errors", "Prediction requests that failed, by status class, HTTP status and error code",
            ("tenant", "deployment", "class", "status", "code"), registry=r,
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
        self.stats_dropped_requests = Counter(
            "ml_inference_stats_dropped", "Requests (and feedback rewards) whose statistics were never written to "
            "the registry: it refused them until the process stopped, or too many were pending",
            ("tenant", "deployment", "subject"), registry=r,
        )  # fmt: skip
        self._series: dict[tuple[int, tuple[str, ...]], Any] = {}
        self._pending: dict[tuple[str, ...], Tally] = {}  # answered predictions not yet in the series
        self._tallying = threading.Lock()

    # What Telemetry reports -----------------------------------------------------------------
    def prediction(
        self, fields: Mapping[str, Any], latency_ms: float, rows: int, cache: tuple[int, int] | None,
        cached: bool | None = None,
    ) -> None:  # fmt: skip
        """An answered prediction, tallied (`flush` adds it to the series)."""
        labels = _labels(fields)
        with self._tallying:
            tally = self._pending.get(labels)
            if tally is None:
                tally = self._pending[labels] = Tally(LATENCY_BUCKETS_MS)
                FLUSHER.watch(self)
            tally.add(latency_ms, rows, cache, cached)

    @_kept
    def flush(self) -> None:
        """The tallies added to the series (a series made where the prediction would have made it)."""
        with self._tallying:
            pending, self._pending = self._pending, {}
        for labels, tally in pending.items():
            pair = labels[:2]
            self._child(self.requests, (*labels, "2xx")).inc(tally.requests)
            if tally.observed:
                histogram = self._child(self.latency, labels)
                histogram._sum.inc(tally.sum)  # the client's own values: `observe` once per bucket, not per prediction
                for value, count in zip(histogram._buckets, tally.buckets, strict=True):
                    if count:
                        value.inc(count)
            for metric, count in ((self.answer_hits, tally.answer_hits), (self.answer_misses, tally.answer_misses), (self.cache_hits, tally.cache_hits), (self.cache_misses, tally.cache_misses)):
                if count:
                    self._child(metric, pair).inc(count)
            if tally.rows:
                self._child(self.rows, (*labels, "online")).inc(tally.rows)

    def _child(self, metric: Any, labels: tuple[str, ...]) -> Any:
        """`metric.labels(*labels)`, looked up once per label set (created when first used, as before)."""
        key = (id(metric), labels)
        child = self._series.get(key)
        if child is None:
            if len(self._series) > 10_000:
                self._series.clear()
            child = self._series[key] = metric.labels(*labels)
        return child

    @_kept
    def failure(self, fields: Mapping[str, Any], status: int, code: str) -> None:
        tenant, deployment = str(fields.get("tenant") or ""), str(fields.get("deployment") or "")
        kind = f"{status // 100}xx"
        self._child(self.requests, (tenant, deployment, "", "", "", kind)).inc()
        self._child(self.errors, (tenant, deployment, kind, str(status), code)).inc()

    @_kept
    def refused(self, tenant: str, code: str) -> None:
        self._child(self.refusals, (tenant, code)).inc()

    @_kept
    def chunk(self, tenant: str, deployment: str, seconds: float, versions: Mapping[str, int]) -> None:
        self.chunk_duration.labels(tenant, deployment).observe(seconds)
        for ref, rows in versions.items():
            model, _, version = ref.rpartition(":")
            if rows:
                self.rows.labels(tenant, deployment, model, version, "", "batch").inc(rows)

    @_kept
    def stats_dropped(self, tenant: str, deployment: str, subject: str, requests: float) -> None:
        self.stats_dropped_requests.labels(tenant, deployment, subject).inc(requests)

    # What a scrape reads ----------------------------------------------------------------------
    def exposition(
        self, tenant: str, monitored: Mapping[str, Mapping[str, Any]] | None = None,
        quality: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> bytes:  # fmt: skip
        """The text exposition of `tenant`'s series alone (summed over every worker), with the
        monitoring gauges of the latest windows given, by deployment (`_Monitoring`)."""
        from prometheus_client import CollectorRegistry, generate_latest

        self.flush()  # this process's tallies: what it answered is in what it shows
        source: Any = self.registry
        if self.multiprocess_dir:
            from prometheus_client.multiprocess import MultiProcessCollector

            source = CollectorRegistry()
            MultiProcessCollector(source, path=self.multiprocess_dir)
        shown = CollectorRegistry(auto_describe=False)
        shown.register(_TenantView(source, tenant))  # type: ignore[arg-type]
        shown.register(_Monitoring(tenant, monitored or {}, quality or {}))  # type: ignore[arg-type]
        return generate_latest(shown)


class _Monitoring:
    """The model monitoring gauges of one scrape: the latest window's check of each deployment
    with a baseline (`sluice.monitor.checks.check`) and its latest window with labels
    (`MonitorService.quality`), read as the scrape is answered
    (`sluice.services.monitoring.MonitorService.latest`). Built from them alone, never kept: a
    deployment deleted, or at a revision with no window yet, has none (a gauge kept in the
    process, or a worker's file, would show its last value until a restart)."""

    def __init__(self, tenant: str, monitored: Mapping[str, Mapping[str, Any]], quality: Mapping[str, Mapping[str, Any]]) -> None:
        self.tenant, self.monitored, self.quality = tenant, monitored, quality

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        tenant = self.tenant
        drift = GaugeMetricFamily(
            "ml_inference_drift", "A column's drift (population stability index) against the deployment's baseline "
            "in its latest monitoring window", labels=("tenant", "deployment", "column"),
        )  # fmt: skip
        alerts = GaugeMetricFamily(
            "ml_inference_monitor_alerts", "Columns whose verdict in the deployment's latest monitoring window is not ok "
            "(drift, missing, out_of_range, unseen_categories, absent, type_changed)", labels=("tenant", "deployment"),
        )  # fmt: skip
        quality = GaugeMetricFamily(
            "ml_inference_model_quality", "The model's quality from labels posted for its predictions in the deployment's "
            "latest window with labels (accuracy, precision, recall, auc; mae, rmse), per variant (variant=\"\": every one)",
            labels=("tenant", "deployment", "variant", "metric"),
        )  # fmt: skip
        for deployment, window in self.monitored.items():
            count = 0
            for column, found in window["columns"].items():
                if found.get("drift") is not None:
                    drift.add_metric((tenant, deployment, column), found["drift"])
                count += found["verdict"] not in ("ok", "too_few_rows")
            alerts.add_metric((tenant, deployment), count)
        for deployment, window in self.quality.items():
            # Every variant together is the empty variant: no variant's name can be empty, and any
            # other word could be a variant's own name (`all` is a valid one).
            for variant, found in (("", window), *window["variants"].items()):
                for metric in ("accuracy", "precision", "recall", "auc", "mae", "rmse"):
                    if found.get(metric) is not None:
                        quality.add_metric((tenant, deployment, variant, metric), found[metric])
        yield from (drift, alerts, quality)


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


def allocate_before_mapping() -> None:
    """The client's multiprocess files given their disk blocks before it maps them.

    prometheus_client grows each file with `truncate` and writes through `mmap`: a hole the
    filesystem fills only when a page is first written, and on a full disk that write is
    SIGBUS, which kills the worker (with one worker, the server) on the first request that
    makes a new series. Here its file class is the client's own with one step added before
    it creates or grows a file, `posix_fallocate`, which on a full disk raises ENOSPC: an
    OSError that `_kept` keeps from the request. Installed once per process; where the system
    has no `posix_fallocate`, or the client no longer has the hook, nothing changes."""
    import errno

    from prometheus_client import mmap_dict, values

    base = getattr(values, "MmapedDict", None)
    if not hasattr(os, "posix_fallocate") or base is not mmap_dict.MmapedDict or not hasattr(base, "_init_value"):
        return  # already installed, or a client without the hook
    initial = getattr(mmap_dict, "_INITIAL_MMAP_SIZE", 1 << 16)
    unsupported = {errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS}

    def allocate(fd: int, size: int) -> None:
        try:
            os.posix_fallocate(fd, 0, size)
        except OSError as exc:
            if exc.errno not in unsupported:  # a filesystem that cannot: as the client does
                raise

    class Allocated(base):  # type: ignore[misc, valid-type]
        def __init__(self, filename: str, read_mode: bool = False) -> None:
            if not read_mode:
                fd = os.open(filename, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
                try:
                    size = os.fstat(fd).st_size
                    try:
                        allocate(fd, max(size, initial))
                    except OSError:
                        if size == 0:  # an empty file would break every scrape: none at all
                            os.unlink(filename)
                        raise
                finally:
                    os.close(fd)
            super().__init__(filename, read_mode)

        def _init_value(self, key: str) -> None:
            # The client's own arithmetic: a length, the key padded to 8 bytes, two doubles.
            encoded = len(key.encode("utf-8"))
            needed = self._used + 4 + encoded + (8 - (encoded + 4) % 8) + 16
            capacity = self._capacity
            while needed > capacity:
                capacity *= 2
            if capacity > self._capacity:
                allocate(self._f.fileno(), capacity)
            super()._init_value(key)

    values.MmapedDict = Allocated
