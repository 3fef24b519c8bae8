"""What sluice reports about each prediction, failure, batch chunk and shadow comparison: one
structured log line that, in Lambda, is also an Embedded Metric Format record (`emf`)."""

from __future__ import annotations

import logging
import os
import time
from typing import TYPE_CHECKING, Any

from sluice.observability.formatter import log_info
from sluice.observability.logger import get_logger

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from sluice.domain.lookups import Lookup
    from sluice.metrics import PrometheusMetrics
    from sluice.runtimes.lookups import Looked


REFUSALS_LOGGED_EVERY_S = 10.0


def emf(
    namespace: str,
    dimension_sets: list[list[str]],
    metrics: dict[str, tuple[float, str]],
) -> dict[str, Any]:
    """The `_aws` member that makes a structured log line an Embedded Metric Format record:
    CloudWatch extracts the named metrics (values at the line's top level) by these dimension
    sets. One line is both the request's log and its metrics."""
    return {
        "Timestamp": int(time.time() * 1000),
        "CloudWatchMetrics": [
            {
                "Namespace": namespace,
                "Dimensions": dimension_sets,
                "Metrics": [{"Name": name, "Unit": unit} for name, (_, unit) in metrics.items()],
            }
        ],
    }


class Telemetry:
    """What sluice reports about each prediction: one structured log line per prediction that,
    in Lambda (or with SLUICE_EMF=1), is also an EMF record with the prediction's metrics per
    deployment and variant. Locally the EMF metrics are left out: they would only be noise.
    Where `sluice serve` turned Prometheus on, the same figures also go to `sink`
    (`sluice.metrics`), which `/metrics` shows."""

    counts_requests = True  # batch scoring's calls are not requests: its chunks are counted

    def __init__(
        self,
        *,
        emit_metrics: bool | None = None,
        namespace: str = "sluice",
        service: str = "sluice",
        cache_stats: Callable[[], dict[str, int]] | None = None,
        sink: PrometheusMetrics | None = None,
    ) -> None:
        if emit_metrics is None:
            from sluice.settings import in_lambda

            emit_metrics = in_lambda() or os.environ.get("SLUICE_EMF") == "1"
        self.emit_metrics = emit_metrics
        self.namespace = namespace
        self.service = service
        self.cache_stats = cache_stats
        self.sink = sink
        self.predictions = 0
        self.errors = 0
        self._cache_seen = (0, 0)
        self.refusals: dict[str, int] = {}  # requests refused by admission, by code
        self._refusals_seen: dict[str, int] = {}  # as they stood at the last line that said so
        self._refusals_logged: float | None = None  # when the last line said so
        self._emf_meta: dict[tuple[Any, ...], list[dict[str, Any]]] = {}

    def _line(self, fields: dict[str, Any], metrics: dict[str, tuple[float, str]]) -> dict[str, Any]:
        if not self.emit_metrics:
            return fields
        dims = ["service", "deployment"]
        sets = [dims, [*dims, "variant"]] if fields.get("variant") else [dims]
        for name, (value, _) in metrics.items():
            fields[name] = value
        fields["_aws"] = emf(self.namespace, sets, metrics)
        return fields

    def _cache_delta(self) -> tuple[int, int] | None:
        """ONNX session cache hits and misses since the last prediction that asked."""
        if self.cache_stats is None:
            return None
        stats = self.cache_stats()
        hits, misses = stats["hits"], stats["misses"]
        seen_hits, seen_misses = self._cache_seen
        self._cache_seen = (hits, misses)
        return hits - seen_hits, misses - seen_misses

    def prediction(
        self,
        *,
        fields: dict[str, Any],
        latency_ms: float,
        rows: int,
        cached: bool | None = None,
        sources: tuple[int, int] | None = None,
        looked: Sequence[tuple[Lookup, Looked]] = (),
    ) -> bool:
        """The prediction's line (an EMF record in Lambda); False where none is written (INFO off).
        `cached`: True for a prediction cache hit, False for a miss, None where the cache
        was not asked. A hit's latency stays out of the latency metric: it measures computing.
        `sources`: a precomputed node's rows answered from its table and live, which become
        the service-wide PrecomputedRows and LiveFallbackRows (the fallback rate's alarm).
        `looked`: the request's lookup steps, which become LookupCalls (and the feature cache's
        LookupCacheHits and LookupCacheMisses) with no dimension, as a lookup's own line has them
        (`sluice.runtimes.lookups`), and a `lookups` member naming their stores."""
        self.predictions += 1
        line = {**fields, "latency_ms": latency_ms, "rows": rows}
        if cached is not None:
            line["cached"] = cached
        cache = self._cache_delta() if self.emit_metrics or self.sink is not None else None
        if self.sink is not None:
            self.sink.prediction(fields, latency_ms, rows, cache, cached=cached)
        logger = get_logger()
        if not logger._logger.isEnabledFor(logging.INFO):  # powertools' std logger
            return False
        if sources is not None:
            line["PrecomputedRows"], line["LiveFallbackRows"] = sources
        lookup_cache = None
        if looked:
            line["lookups"] = [{"store": node.store, "table": node.table, "store_calls": one.store_calls} for node, one in looked]
            line["LookupCalls"], line["LookupErrors"] = float(len(looked)), 0.0
            counted = [one for _, one in looked if one.cache_hits is not None]
            lookup_cache = bool(counted)
            if counted:
                line["LookupCacheHits"] = float(sum(one.cache_hits or 0 for one in counted))
                line["LookupCacheMisses"] = float(sum(one.cache_misses or 0 for one in counted))
        if self.emit_metrics:
            # The line's metric values, and the EMF member naming them: its metadata is built
            # once per shape (variant or not, cached or not, cache figures or not, sources,
            # lookups) and shared.
            line["Requests"], line["Predictions"], line["Rows"] = 1, 1, rows
            if not cached:
                line["Latency"] = latency_ms
            if cached is not None:
                line["PredictionCacheHits" if cached else "PredictionCacheMisses"] = 1
            if cache is not None:
                line["ModelCacheHits"], line["ModelCacheMisses"] = cache
            shape = (bool(fields.get("variant")), cached, cache is not None, sources is not None, lookup_cache)
            meta = self._emf_meta.get(shape)
            if meta is None:
                meta = self._emf_meta[shape] = self._prediction_meta(*shape)
            line["_aws"] = {"Timestamp": int(time.time() * 1000), "CloudWatchMetrics": meta}
        log_info(logger, "prediction", line)
        return True

    def _prediction_meta(self, variant: bool, cached: bool | None, model_cache: bool, sources: bool, lookup_cache: bool | None) -> list[dict[str, Any]]:
        metrics = {"Requests": (1, "Count"), "Predictions": (1, "Count"), "Rows": (0, "Count")}
        if not cached:
            metrics["Latency"] = (0, "Milliseconds")
        if cached is not None:
            metrics["PredictionCacheHits" if cached else "PredictionCacheMisses"] = (1, "Count")
        if model_cache:
            metrics.update({"ModelCacheHits": (0, "Count"), "ModelCacheMisses": (0, "Count")})
        dims = ["service", "deployment"]
        meta = emf(self.namespace, [dims, [*dims, "variant"]] if variant else [dims], metrics)["CloudWatchMetrics"]
        if sources:
            meta += emf(self.namespace, [["service"]], {"PrecomputedRows": (0, "Count"), "LiveFallbackRows": (0, "Count")})["CloudWatchMetrics"]
        if lookup_cache is not None:
            names = ("LookupCalls", "LookupErrors", *(("LookupCacheHits", "LookupCacheMisses") if lookup_cache else ()))
            meta += emf(self.namespace, [[]], dict.fromkeys(names, (0.0, "Count")))["CloudWatchMetrics"]
        return meta

    def failure(self, *, fields: dict[str, Any], status: int, code: str) -> None:
        """One failed request (`sluice.inference.outcomes` decides when): its line, an EMF
        record of `Requests`, `Errors` and `ClientErrors` or `BackendErrors` by deployment (and
        by deployment and error code), and the Prometheus series. A failure no deployment of
        the tenant was found for is counted by service alone."""
        self.errors += 1
        log = get_logger().warning if status < 500 else get_logger().error
        metric = "ClientErrors" if status < 500 else "BackendErrors"
        line = {**fields, "status": status, "error": code}
        if self.sink is not None and self.counts_requests:
            self.sink.failure(fields, status, code)
        if self.emit_metrics:
            dims = ["service", "deployment"] if fields.get("deployment") else ["service"]
            metrics = {"Requests": (1, "Count"), "Errors": (1, "Count"), metric: (1, "Count")}
            for name, (value, _) in metrics.items():
                line[name] = value
            line["_aws"] = emf(self.namespace, [dims, [*dims, "error"]], metrics)
        log("prediction failed", extra=line)

    def refused(self, *, tenant: str, code: str) -> None:
        """A request refused before it started (`sluice serve`'s admission: `overloaded`,
        `tenant_overloaded`, `too_many_in_flight`): counted, and logged at most once every
        `REFUSALS_LOGGED_EVERY_S` with how many were refused since, by code (a line per refusal
        would add to the load that caused them)."""
        self.refusals[code] = self.refusals.get(code, 0) + 1
        if self.sink is not None:
            self.sink.refused(tenant, code)
        now = time.monotonic()
        last = self._refusals_logged
        if last is None or now - last >= REFUSALS_LOGGED_EVERY_S:
            since = {k: v - self._refusals_seen.get(k, 0) for k, v in self.refusals.items() if v > self._refusals_seen.get(k, 0)}
            extra: dict[str, Any] = {"refused": since}
            if last is not None:
                extra["seconds"] = round(now - last, 1)
            get_logger().warning("requests refused by admission", extra=extra)
            self._refusals_logged, self._refusals_seen = now, dict(self.refusals)

    def chunk(self, *, tenant: str, deployment: str, seconds: float, versions: dict[str, int]) -> None:
        """One batch chunk scored (its handler logs it): Prometheus only, where it is on."""
        if self.sink is not None:
            self.sink.chunk(tenant, deployment, seconds, versions)

    def stats_dropped(self, dropped: list[tuple[tuple[str, str, int, str], float, str]]) -> None:
        """Statistics a recorder could never write (`sluice.stats.recorder`): one error line
        (an EMF record with `StatsDropped` where metrics are on) and, where Prometheus is on,
        `ml_inference_stats_dropped` by tenant, deployment and subject. Each entry is a key
        (tenant, deployment, revision, subject), the requests its counts held, and why."""
        total = sum(weight for _, weight, _ in dropped)
        line: dict[str, Any] = {
            "service": self.service,
            "requests": total,
            "dropped": [
                {"tenant": t, "deployment": d, "revision": r, "subject": s, "requests": w, "reason": why}
                for (t, d, r, s), w, why in dropped[:20]
            ],
        }
        if self.emit_metrics:
            line["StatsDropped"] = total
            line["_aws"] = emf(self.namespace, [["service"]], {"StatsDropped": (total, "Count")})
        if self.sink is not None:
            for (tenant, deployment, _, subject), weight, _ in dropped:
                self.sink.stats_dropped(tenant, deployment, subject, weight)
        get_logger().error("statistics dropped", extra=line)

    def shadow(self, *, fields: dict[str, Any], agreement: float | None, mean_abs_diff: float | None, latency_ratio: float | None) -> None:
        metrics = {
            name: (value, unit)
            for name, value, unit in (
                ("ShadowAgreement", agreement, "None"),
                ("ShadowMeanAbsDiff", mean_abs_diff, "None"),
                ("ShadowLatencyRatio", latency_ratio, "None"),
            )
            if value is not None
        }
        line = dict(fields)
        if self.emit_metrics and metrics:
            for name, (value, _) in metrics.items():
                line[name] = value
            line["_aws"] = emf(self.namespace, [["service", "deployment", "mirror"]], metrics)
        get_logger().info("shadow comparison", extra=line)
