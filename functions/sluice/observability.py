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
    """powertools' `LambdaPowertoolsFormatter`, with the same line for a plain record (a
    message that is a word, no arguments, no exception) at a fraction of the cost: the keys
    that stay the same from line to line (level, location, message, service, the Lambda
    context) are serialized once per key set and call site, the timestamp's seconds once per
    second, and only the record's own fields per line. Any other record, or a logger
    configured away from the defaults, takes powertools' own path."""
    import re

    from aws_lambda_powertools.logging import formatter as base

    reserved = frozenset(base.RESERVED_LOG_ATTRS)
    # A message starting with one of these may be JSON (powertools decodes it): its own path.
    maybe_json = frozenset('{["-0123456789tfnNI \t\r\n')
    # Keys powertools sets after a record's own fields: a record that brings one of them (or
    # one of the fixed keys) takes powertools' path, which knows what wins.
    late = frozenset({"message", "exception", "exception_name", "exception_notes", "stack_trace", "xray_trace_id"})
    # Keys whose values change from one Lambda invocation to the next (powertools' decorator
    # sets them): filled in per line, so that the rest is serialized once, not per invocation.
    volatile = frozenset({"cold_start", "function_request_id"})
    slot = re.compile(r'"@@sluice-(ts|\d+)@@"')
    stamp = "ts"

    class Formatter(base.LambdaPowertoolsFormatter):
        _second = -1
        _stamp = ("", "")
        _version = 0
        _seen: tuple[int, int] | None = None  # (id, version) of the keys last looked at
        _shape: list[tuple[str, Any]] | None = None  # those keys, volatile values left out
        _plans: dict[tuple[Any, ...], tuple[tuple[str, ...], tuple[str, ...]] | None]

        def _plan(self, levelname: str, func: str, lineno: int, message: str) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
            """The line's fixed keys serialized, as text pieces between the slots filled per
            line (the timestamp, the volatile keys' values); None where this path does not know
            a key's template. Made again when a key or a fixed value changes."""
            keys = self.log_format
            seen = (id(keys), self._version)
            if seen != self._seen:
                shape = [(k, (type(v),) if k in volatile and type(v) in (str, bool) else v) for k, v in keys.items()]
                if shape != self._shape:
                    self._shape, self._plans = shape, {}
                self._seen = seen
            at = (levelname, func, lineno, message)
            found = self._plans.get(at, False)
            if found is not False:
                return found  # type: ignore[return-value]
            plan = None
            if "message" in keys and "xray_trace_id" not in keys:
                fixed: dict[str, Any] = {}
                names: list[str] = []
                for key, value in keys.items():
                    if value and key in reserved:
                        if value == "%(levelname)s":
                            value = levelname
                        elif value == "%(funcName)s:%(lineno)d":
                            value = f"{func}:{lineno}"
                        elif value == "%(asctime)s":
                            value = f"@@sluice-{stamp}@@"
                        else:
                            fixed = {}
                            break
                    elif key == "message":
                        value = message
                    elif key in volatile and type(value) in (str, bool):
                        value = f"@@sluice-{len(names)}@@"
                        names.append(key)
                    if value is not None:
                        fixed[key] = value
                if self.serialize_stacktrace:
                    fixed.pop("stack_trace", None)  # powertools sets it to None, then drops it
                if fixed:
                    parts = slot.split(_dumps(fixed)[:-1])
                    plan = (tuple(parts[0::2]), tuple(p if p == stamp else names[int(p)] for p in parts[1::2]))
            self._plans[at] = plan
            return plan

        def _asctime_of(self, created: float, msecs: float) -> str:
            second = int(created)
            if second != self._second:
                parts = self.converter(created)
                self._stamp = (time.strftime("%Y-%m-%d %H:%M:%S,", parts), time.strftime("%z", parts))
                self._second = second
            head, zone = self._stamp
            return f"{head}{int(msecs):03d}{zone}"

        def line(self, levelname: str, func: str, lineno: int, created: float, msecs: float, message: str, fields: dict[str, Any]) -> str | None:
            """The line powertools would write for a plain record with these attributes and
            these fields (its extras); None where only powertools' own path can tell."""
            if (
                not message
                or message[0] in maybe_json
                or self.datefmt
                or self.use_rfc3339_iso8601
                or base._get_context().get()
            ):
                return None
            plan = self._plan(levelname, func, lineno, message)
            if plan is None:
                return None
            keys = self.log_format
            if not (keys.keys().isdisjoint(fields) and late.isdisjoint(fields)):
                return None
            texts, slots = plan
            out = [texts[0]]
            for name, text in zip(slots, texts[1:], strict=True):
                if name == stamp:
                    out.append(f'"{self._asctime_of(created, msecs)}"')
                else:
                    value = keys[name]
                    out.append(("true" if value else "false") if value is True or value is False else _dumps(value))
                out.append(text)
            own = {k: v for k, v in fields.items() if v is not None}
            if own:
                out.append(f",{_dumps(own)[1:-1]}")
            trace = self._get_latest_trace_id()
            if trace is not None:
                out.append(f',"xray_trace_id":{_dumps(trace)}')
            out.append("}")
            return "".join(out)

        def restructure(self, keys: dict[str, Any]) -> None:
            """What powertools' `Logger.structure_logs(**keys)` does to a configured logger's
            formatter (its keys cleared, then `keys` appended), in one step."""
            fresh = dict.fromkeys(self.log_record_order)
            fresh.update(self.keys_combined)
            fresh.update(keys)
            self.log_format = fresh
            base.clear_context_keys()
            self._version += 1

        def append_keys(self, **additional_keys: Any) -> None:
            super().append_keys(**additional_keys)
            self._version += 1

        def remove_keys(self, keys: Any) -> None:
            super().remove_keys(keys)
            self._version += 1

        def clear_state(self) -> None:
            super().clear_state()
            self._version += 1

        def format(self, record: Any) -> str:
            message = record.msg
            if not record.args and not record.exc_info and type(message) is str:
                fields = {k: v for k, v in record.__dict__.items() if k not in reserved}
                text = self.line(record.levelname, record.funcName, record.lineno, record.created, record.msecs, message, fields)
                if text is not None:
                    return text
            return super().format(record)

    return Formatter


def _dumps(record: Any) -> str:
    global _orjson_dumps
    if _orjson_dumps is None:
        import orjson

        _orjson_dumps = orjson.dumps
    return _orjson_dumps(record, default=str).decode()


_orjson_dumps: Callable[..., bytes] | None = None


def _log_info(logger: Logger, message: str, extra: dict[str, Any]) -> None:
    """`logger.info(message, extra=extra)` for a caller that already knows INFO is on.

    Where powertools' handler is the only one the line reaches (no filter, no other handler
    on the way up), the line is formatted from the call's attributes and written by that
    handler's stream, under its lock, with no `LogRecord` on the way: the same line. Anywhere
    else (a test capturing records, a handler added by the host) the record goes through
    logging as `info` sends it."""
    std = logger._logger
    caller = sys._getframe(1)
    code = caller.f_code
    handler = _sole_handler(std)
    if handler is not None:
        now = time.time()
        text = handler.formatter.line("INFO", code.co_name, caller.f_lineno, now, (now - int(now)) * 1000, message, extra)  # type: ignore[union-attr]
        if text is not None:
            handler.acquire()
            try:
                handler.stream.write(text + handler.terminator)
                handler.flush()
                return
            except Exception:  # as StreamHandler.emit: the handler reports it
                handler.handleError(std.makeRecord(std.name, logging.INFO, code.co_filename, caller.f_lineno, message, (), None, code.co_name, extra))
                return
            finally:
                handler.release()
    std.handle(std.makeRecord(std.name, logging.INFO, code.co_filename, caller.f_lineno, message, (), None, code.co_name, extra))


def _sole_handler(std: logging.Logger) -> logging.StreamHandler | None:  # type: ignore[type-arg]
    """powertools' stream handler when a record of `std` at INFO would reach it and nothing else."""
    handlers = std.handlers
    if len(handlers) != 1 or std.filters:
        return None
    handler = handlers[0]
    if type(handler) is not logging.StreamHandler or handler.filters or handler.level > logging.INFO:
        return None
    if type(handler.formatter) is not _formatter():
        return None
    parent = std.parent if std.propagate else None
    while parent is not None:
        if parent.handlers:
            return None
        parent = parent.parent if parent.propagate else None
    return handler


def inject_lambda_context(handler: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    """`get_logger().inject_lambda_context(handler, clear_state=True)` with the same keys on
    every line (cold_start, function_name, function_memory_size, function_arn,
    function_request_id), set in one step per invocation. Where the logger uses more of
    powertools than that (sampling, a log buffer, logging the event, a formatter of its own, a
    durable context) powertools' own decorator runs."""
    import functools

    from aws_lambda_powertools.logging import logger as powertools
    from aws_lambda_powertools.shared.functions import (
        is_durable_context,
        resolve_truthy_env_var_choice,
    )

    logger = get_logger()
    theirs = logger.inject_lambda_context(handler, clear_state=True)
    formatter = logger.registered_formatter
    logs_event = resolve_truthy_env_var_choice(env=os.getenv("POWERTOOLS_LOGGER_LOG_EVENT", "false"), choice=False)
    if logger.sampling_rate or logger._buffer_config or logs_event or type(formatter) is not _formatter():
        return theirs
    defaults = logger._default_log_keys

    @functools.wraps(handler)
    def decorate(event: Any, context: Any) -> Any:
        if is_durable_context(context):
            return theirs(event, context)
        formatter.restructure(
            {
                **defaults,
                "cold_start": powertools._is_cold_start(),
                "function_name": context.function_name,
                "function_memory_size": context.memory_limit_in_mb,
                "function_arn": context.invoked_function_arn,
                "function_request_id": context.aws_request_id,
            }
        )
        return handler(event, context)

    return decorate


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
