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
    from collections.abc import Sequence

    from sluice.domain.lookups import Lookup
    from sluice.metrics import PrometheusMetrics
    from sluice.runtimes.lookup_reports import Looked


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


def write(level: int, message: str, line: dict[str, Any]) -> None:
    """`line` logged at `level`; where the logger's level drops it, its EMF record is written
    still, as its metrics alone (`metrics_only`): an alarm's figures are not a log line's to
    drop (SLUICE_LOG_LEVEL=WARNING would otherwise silence every answered request's)."""
    logger = get_logger()
    if logger._logger.isEnabledFor(level):
        method = logger.info if level <= logging.INFO else logger.warning if level < logging.ERROR else logger.error
        method(message, extra=line, stacklevel=3)  # the location: write's caller
    elif "_aws" in line:
        log_info(logger, message, metrics_only(line))


def metrics_only(line: dict[str, Any]) -> dict[str, Any]:
    """An EMF line's record alone: the values of the metrics it names, the dimensions they are
    counted by and the `_aws` member (the logger adds `service`); the line itself unless it is
    one (no `_aws`)."""
    aws = line.get("_aws")
    if aws is None:
        return line
    kept: dict[str, Any] = {}
    for directive in aws["CloudWatchMetrics"]:
        for dimensions in directive["Dimensions"]:
            for name in dimensions:
                if name in line:
                    kept[name] = line[name]
        for metric in directive["Metrics"]:
            kept[metric["Name"]] = line[metric["Name"]]
    kept["_aws"] = aws
    return kept


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
        sink: PrometheusMetrics | None = None,
    ) -> None:
        if emit_metrics is None:
            from sluice.settings import in_lambda

            emit_metrics = in_lambda() or os.environ.get("SLUICE_EMF") == "1"
        self.emit_metrics = emit_metrics
        self.namespace = namespace
        self.service = service
        self.sink = sink
        self.predictions = 0
        self.errors = 0
        self.refusals: dict[str, int] = {}  # requests refused by admission, by code
        self._refusals_seen: dict[str, int] = {}  # as they stood at the last line that said so
        self._refusals_logged: float | None = None  # when the last line said so
        self._emf_meta: dict[tuple[Any, ...], list[dict[str, Any]]] = {}

    def _line(self, fields: dict[str, Any], metrics: dict[str, tuple[float, str]]) -> dict[str, Any]:
        if not self.emit_metrics:
            return fields
        dims = _by_deployment(bool(fields.get("tenant")))
        sets = [dims, [*dims, "variant"]] if fields.get("variant") else [dims]
        for name, (value, _) in metrics.items():
            fields[name] = value
        fields["_aws"] = emf(self.namespace, sets, metrics)
        return fields

    def prediction(
        self,
        *,
        fields: dict[str, Any],
        latency_ms: float,
        rows: int,
        cached: bool | None = None,
        sources: tuple[int, int] | None = None,
        looked: Sequence[tuple[Lookup, Looked]] = (),
        sessions: Sequence[int] | None = None,
    ) -> bool:
        """The prediction's line (an EMF record in Lambda); with INFO off, its metrics alone
        (`metrics_only`), and False where nothing is written (no metrics either).
        `cached`: True for a prediction cache hit, False for a miss, None where the cache
        was not asked. A hit's latency stays out of the latency metric: it measures computing.
        `sources`: a precomputed node's rows answered from its table and live, which become
        the service-wide PrecomputedRows and LiveFallbackRows (the fallback rate's alarm).
        `looked`: the request's lookup steps, which become LookupCalls (and the feature cache's
        LookupCacheHits and LookupCacheMisses) with no dimension, as a lookup's own line has them
        (`sluice.runtimes.lookup_reports`), and a `lookups` member naming their stores.
        `sessions`: the ONNX sessions the prediction's own calls found loaded and loaded
        (ModelCacheHits, ModelCacheMisses); None where it made none (a prediction cache hit)."""
        self.predictions += 1
        if self.sink is not None:
            self.sink.prediction(fields, latency_ms, rows, sessions, cached=cached)
        logger = get_logger()
        info = logger._logger.isEnabledFor(logging.INFO)  # powertools' std logger
        if not info and not self.emit_metrics:
            return False
        line = {**fields, "latency_ms": latency_ms, "rows": rows}
        if cached is not None:
            line["cached"] = cached
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
            if sessions is not None:
                line["ModelCacheHits"], line["ModelCacheMisses"] = sessions
            shape = (bool(fields.get("variant")), cached, sessions is not None, sources is not None, lookup_cache, bool(fields.get("tenant")))
            meta = self._emf_meta.get(shape)
            if meta is None:
                meta = self._emf_meta[shape] = self._prediction_meta(*shape)
            line["_aws"] = {"Timestamp": int(time.time() * 1000), "CloudWatchMetrics": meta}
        log_info(logger, "prediction", line if info else metrics_only(line))
        return True

    def _prediction_meta(
        self, variant: bool, cached: bool | None, model_cache: bool, sources: bool, lookup_cache: bool | None, tenant: bool = True
    ) -> list[dict[str, Any]]:  # fmt: skip
        metrics = {"Requests": (1, "Count"), "Predictions": (1, "Count"), "Rows": (0, "Count")}
        if not cached:
            metrics["Latency"] = (0, "Milliseconds")
        if cached is not None:
            metrics["PredictionCacheHits" if cached else "PredictionCacheMisses"] = (1, "Count")
        if model_cache:
            metrics.update({"ModelCacheHits": (0, "Count"), "ModelCacheMisses": (0, "Count")})
        dims = _by_deployment(tenant)
        meta = emf(self.namespace, [dims, [*dims, "variant"]] if variant else [dims], metrics)["CloudWatchMetrics"]
        if sources:
            meta += emf(self.namespace, [["service"]], {"PrecomputedRows": (0, "Count"), "LiveFallbackRows": (0, "Count")})["CloudWatchMetrics"]
        if lookup_cache is not None:
            names = ("LookupCalls", "LookupErrors", *(("LookupCacheHits", "LookupCacheMisses") if lookup_cache else ()))
            meta += emf(self.namespace, [[]], dict.fromkeys(names, (0.0, "Count")))["CloudWatchMetrics"]
        return meta

    def failure(self, *, fields: dict[str, Any], status: int, code: str, refused: bool = False) -> None:
        """One failed request (`sluice.inference.outcomes` decides when): its line, an EMF
        record of `Requests`, `Errors` and `ClientErrors` or `BackendErrors` by deployment (and
        by deployment and error code), and the Prometheus series. A failure no deployment of
        the tenant was found for is counted by service alone. `refused`: turned away before it
        started (admission, its key's rate), logged together by `refused` rather than a line
        each, unless the line carries its metrics (EMF)."""
        self.errors += 1
        if self.sink is not None and self.counts_requests:
            self.sink.failure(fields, status, code)
        if refused and not self.emit_metrics:
            return
        metric = "ClientErrors" if status < 500 else "BackendErrors"
        line = {**fields, "status": status, "error": code}
        if self.emit_metrics:
            dims = _by_deployment(bool(fields.get("tenant"))) if fields.get("deployment") else ["service"]
            metrics = {"Requests": (1, "Count"), "Errors": (1, "Count"), metric: (1, "Count")}
            for name, (value, _) in metrics.items():
                line[name] = value
            line["_aws"] = emf(self.namespace, [dims, [*dims, "error"]], metrics)
        write(logging.WARNING if status < 500 else logging.ERROR, "prediction failed", line)

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
        write(logging.ERROR, "statistics dropped", line)

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
            line["_aws"] = emf(self.namespace, [[*_by_deployment(bool(fields.get("tenant"))), "mirror"]], metrics)
        write(logging.INFO, "shadow comparison", line)


def _by_deployment(tenant: bool) -> list[str]:
    """The dimensions a deployment's series are kept by: its tenant's too, since deployment names
    are per tenant (by service and deployment alone, acme's `iris` and globex's were one series,
    each one's errors in the other's graphs and alarms)."""
    return ["service", "tenant", "deployment"] if tenant else ["service", "deployment"]
