"""Logs and metrics: powertools' structured logger everywhere, EMF metrics in Lambda.

Every prediction line carries the request id, tenant, deployment, model, version and
latency, locally and in Lambda alike. Secrets (API keys, authorization headers) are never
passed to a logger.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from functools import lru_cache
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable

    from aws_lambda_powertools import Logger, Metrics

    from sluice.metrics import PrometheusMetrics


@lru_cache(maxsize=1)
def get_logger() -> Logger:
    from aws_lambda_powertools import Logger

    from sluice.settings import get_settings

    settings = get_settings()
    return Logger(
        service=settings.service_name,
        level=settings.log_level,
        # powertools' own lines, built without its per-record costs (see `_formatter`); orjson
        # serializes them.
        logger_formatter=_formatter()(json_serializer=_dumps),
    )


@lru_cache(maxsize=1)
def _formatter() -> type:
    """powertools' `LambdaPowertoolsFormatter`, with the same output for a plain record (a
    message that is a word, no arguments, no exception) at a fraction of the cost: the
    timestamp's seconds formatted once per second, the default keys filled in directly, no
    attempt to JSON-decode a message that cannot be JSON. Any other record, or a logger
    configured away from the defaults, takes powertools' own path."""
    from aws_lambda_powertools.logging import formatter as base

    reserved = frozenset(base.RESERVED_LOG_ATTRS)
    fills = {
        "%(levelname)s": lambda r: r.levelname,
        "%(funcName)s:%(lineno)d": lambda r: f"{r.funcName}:{r.lineno}",
    }
    # A message starting with one of these may be JSON (powertools decodes it): its own path.
    maybe_json = frozenset('{["-0123456789tfnNI \t\r\n')

    class Formatter(base.LambdaPowertoolsFormatter):
        _second = -1
        _stamp = ("", "")

        def _asctime(self, record: Any) -> str:
            second = int(record.created)
            if second != self._second:
                parts = self.converter(record.created)
                self._stamp = (time.strftime("%Y-%m-%d %H:%M:%S,", parts), time.strftime("%z", parts))
                self._second = second
            head, zone = self._stamp
            return f"{head}{int(record.msecs):03d}{zone}"

        def format(self, record: Any) -> str:
            message = record.msg
            if (
                record.args
                or record.exc_info
                or type(message) is not str
                or not message
                or message[0] in maybe_json
                or self.datefmt
                or self.use_rfc3339_iso8601
                or base._get_context().get()
            ):
                return super().format(record)
            out: dict[str, Any] = {}
            for key, value in self.log_format.items():
                if value and key in reserved:
                    if value == "%(asctime)s":
                        out[key] = self._asctime(record)
                        continue
                    fill = fills.get(value)
                    if fill is None:
                        return super().format(record)
                    out[key] = fill(record)
                else:
                    out[key] = value
            for key, value in record.__dict__.items():
                if key not in reserved:
                    out[key] = value
            out["message"] = message
            if self.serialize_stacktrace:
                out.pop("stack_trace", None)  # powertools sets it to None, then drops it
            out["xray_trace_id"] = self._get_latest_trace_id()
            return self.serialize(log={k: v for k, v in out.items() if v is not None})

    return Formatter


def _dumps(record: dict[str, Any]) -> str:
    import orjson

    return orjson.dumps(record, default=str).decode()


def _log_info(logger: Logger, message: str, extra: dict[str, Any]) -> None:
    """`logger.info(message, extra=extra)` for a caller that already knows INFO is on: the
    same record through the same handlers, without powertools' and logging's per-call
    wrapping (keyword merging, the caller's frame looked up by walking the stack)."""
    std = logger._logger
    caller = sys._getframe(1)
    code = caller.f_code
    record = std.makeRecord(std.name, logging.INFO, code.co_filename, caller.f_lineno, message, (), None, code.co_name, extra)
    std.handle(record)


@lru_cache(maxsize=1)
def get_metrics() -> Metrics:
    """powertools Metrics, for handlers whose metrics are not per request (batch tasks)."""
    from aws_lambda_powertools import Metrics

    from sluice.settings import get_settings

    settings = get_settings()
    return Metrics(namespace=settings.metrics_namespace, service=settings.service_name)


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
            emit_metrics = "AWS_LAMBDA_FUNCTION_NAME" in os.environ or os.environ.get("SLUICE_EMF") == "1"
        self.emit_metrics = emit_metrics
        self.namespace = namespace
        self.service = service
        self.cache_stats = cache_stats
        self.sink = sink
        self.predictions = 0
        self.errors = 0
        self._cache_seen = (0, 0)
        self._emf_meta: dict[tuple[bool, bool | None, bool], list[dict[str, Any]]] = {}

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

    def prediction(self, *, fields: dict[str, Any], latency_ms: float, rows: int, cached: bool | None = None) -> None:
        """`cached`: True for a prediction cache hit, False for a miss, None where the cache
        was not asked. A hit's latency stays out of the latency metric: it measures computing."""
        self.predictions += 1
        line = {**fields, "latency_ms": latency_ms, "rows": rows}
        if cached is not None:
            line["cached"] = cached
        cache = self._cache_delta() if self.emit_metrics or self.sink is not None else None
        if self.sink is not None:
            self.sink.prediction(fields, latency_ms, rows, cache, cached=cached)
        logger = get_logger()
        if not logger._logger.isEnabledFor(logging.INFO):  # powertools' std logger
            return
        if self.emit_metrics:
            # The line's metric values, and the EMF member naming them: its metadata is built
            # once per shape (variant or not, cached or not, cache figures or not) and shared.
            line["Predictions"], line["Rows"] = 1, rows
            if not cached:
                line["Latency"] = latency_ms
            if cached is not None:
                line["PredictionCacheHits" if cached else "PredictionCacheMisses"] = 1
            if cache is not None:
                line["ModelCacheHits"], line["ModelCacheMisses"] = cache
            shape = (bool(fields.get("variant")), cached, cache is not None)
            meta = self._emf_meta.get(shape)
            if meta is None:
                meta = self._emf_meta[shape] = self._prediction_meta(*shape)
            line["_aws"] = {"Timestamp": int(time.time() * 1000), "CloudWatchMetrics": meta}
        _log_info(logger, "prediction", line)

    def _prediction_meta(self, variant: bool, cached: bool | None, model_cache: bool) -> list[dict[str, Any]]:
        metrics = {"Predictions": (1, "Count"), "Rows": (0, "Count")}
        if not cached:
            metrics["Latency"] = (0, "Milliseconds")
        if cached is not None:
            metrics["PredictionCacheHits" if cached else "PredictionCacheMisses"] = (1, "Count")
        if model_cache:
            metrics.update({"ModelCacheHits": (0, "Count"), "ModelCacheMisses": (0, "Count")})
        dims = ["service", "deployment"]
        return emf(self.namespace, [dims, [*dims, "variant"]] if variant else [dims], metrics)["CloudWatchMetrics"]

    def failure(self, *, fields: dict[str, Any], status: int, code: str) -> None:
        self.errors += 1
        log = get_logger().warning if status < 500 else get_logger().error
        metric = "ClientErrors" if status < 500 else "BackendErrors"
        line = {**fields, "status": status, "error": code}
        if self.sink is not None and self.counts_requests:
            self.sink.failure(fields, status, code)
        log("prediction failed", extra=self._line(line, {metric: (1, "Count")}) if fields.get("deployment") else line)

    def chunk(self, *, tenant: str, deployment: str, seconds: float, versions: dict[str, int]) -> None:
        """One batch chunk scored (its handler logs it): Prometheus only, where it is on."""
        if self.sink is not None:
            self.sink.chunk(tenant, deployment, seconds, versions)

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
