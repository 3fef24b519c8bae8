"""One log line per prediction that, in Lambda, is also a CloudWatch EMF record."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sluice.observability import Telemetry, get_logger


def lines(caplog: pytest.LogCaptureFixture) -> list[dict]:
    formatter = get_logger().registered_formatter
    return [json.loads(formatter.format(r)) for r in caplog.records]


def test_prediction_line_is_an_emf_record_per_deployment_and_variant(caplog: pytest.LogCaptureFixture) -> None:
    telemetry = Telemetry(emit_metrics=True, namespace="sluice")
    caplog.set_level("INFO")
    telemetry.prediction(fields={"deployment": "iris", "variant": "canary", "request_id": "r1", "tenant": "acme"}, latency_ms=1.5, rows=3, sessions=[5, 1])
    telemetry.prediction(fields={"deployment": "iris", "request_id": "r2", "tenant": "acme"}, latency_ms=2.0, rows=1, sessions=[4, 0])
    first, second = lines(caplog)
    meta = first["_aws"]["CloudWatchMetrics"][0]
    assert meta["Namespace"] == "sluice"
    assert meta["Dimensions"] == [["service", "tenant", "deployment"], ["service", "tenant", "deployment", "variant"]]
    assert {m["Name"] for m in meta["Metrics"]} >= {"Predictions", "Rows", "Latency", "ModelCacheHits", "ModelCacheMisses"}
    assert (first["Latency"], first["Rows"], first["deployment"], first["variant"], first["service"]) == (1.5, 3, "iris", "canary", "sluice")
    assert (first["ModelCacheHits"], second["ModelCacheHits"], second["ModelCacheMisses"]) == (5, 4, 0)  # each prediction's own
    assert second["_aws"]["CloudWatchMetrics"][0]["Dimensions"] == [["service", "tenant", "deployment"]]


def test_locally_the_line_has_no_metrics(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("INFO")
    Telemetry(emit_metrics=False).prediction(fields={"deployment": "iris"}, latency_ms=1.0, rows=1)
    (line,) = lines(caplog)
    assert "_aws" not in line and line["latency_ms"] == 1.0 and line["message"] == "prediction"


def test_failures_and_shadow_comparisons_are_metrics_too(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("INFO")
    telemetry = Telemetry(emit_metrics=True)
    telemetry.failure(fields={"deployment": "iris"}, status=502, code="backend_error")
    telemetry.shadow(fields={"deployment": "iris", "mirror": "forest"}, agreement=0.9, mean_abs_diff=0.01, latency_ratio=None)
    failure, shadow = lines(caplog)
    assert failure["BackendErrors"] == 1 and failure["level"] == "ERROR"
    assert shadow["ShadowAgreement"] == 0.9 and "ShadowLatencyRatio" not in shadow
    assert shadow["_aws"]["CloudWatchMetrics"][0]["Dimensions"] == [["service", "deployment", "mirror"]]


def test_every_request_is_an_emf_request_and_a_failure_an_error_by_code(caplog: pytest.LogCaptureFixture) -> None:
    """Answered or failed, a request is one `Requests`; a failure is one `Errors` by deployment
    and by deployment and code, or by service alone when no deployment was found."""
    caplog.set_level("INFO")
    telemetry = Telemetry(emit_metrics=True)
    telemetry.prediction(fields={"deployment": "iris", "tenant": "acme"}, latency_ms=0.3, rows=1)
    telemetry.failure(fields={"deployment": "iris", "tenant": "acme"}, status=400, code="invalid_input")
    telemetry.failure(fields={"deployment": "", "tenant": "acme"}, status=404, code="not_found")
    answered, refused, unknown = lines(caplog)
    assert answered["Requests"] == 1 and "Errors" not in answered
    names = lambda line: {m["Name"] for m in line["_aws"]["CloudWatchMetrics"][0]["Metrics"]}  # noqa: E731
    assert "Requests" in names(answered)
    assert (refused["Requests"], refused["Errors"], refused["ClientErrors"], refused["error"]) == (1, 1, 1, "invalid_input")
    assert names(refused) == {"Requests", "Errors", "ClientErrors"}
    assert refused["_aws"]["CloudWatchMetrics"][0]["Dimensions"] == [["service", "tenant", "deployment"], ["service", "tenant", "deployment", "error"]]
    assert unknown["_aws"]["CloudWatchMetrics"][0]["Dimensions"] == [["service"], ["service", "error"]]
    assert unknown["Errors"] == 1 and unknown["level"] == "WARNING"


def test_prediction_cache_hits_and_misses_are_emf_metrics_and_a_hit_has_no_latency(caplog: pytest.LogCaptureFixture) -> None:
    telemetry = Telemetry(emit_metrics=True, namespace="sluice")
    caplog.set_level("INFO")
    fields = {"deployment": "iris", "tenant": "acme"}
    telemetry.prediction(fields=dict(fields), latency_ms=4.0, rows=1, cached=False)
    telemetry.prediction(fields=dict(fields), latency_ms=0.2, rows=1, cached=True)
    telemetry.prediction(fields=dict(fields), latency_ms=3.0, rows=1)
    miss, hit, plain = lines(caplog)
    names = lambda line: {m["Name"] for m in line["_aws"]["CloudWatchMetrics"][0]["Metrics"]}  # noqa: E731
    assert miss["PredictionCacheMisses"] == 1 and miss["Latency"] == 4.0 and miss["cached"] is False
    assert hit["PredictionCacheHits"] == 1 and "Latency" not in names(hit) and hit["cached"] is True
    assert "Latency" in names(miss) and "PredictionCacheHits" not in names(miss)
    assert not {"PredictionCacheHits", "PredictionCacheMisses"} & names(plain) and "cached" not in plain


def test_log_lines_are_powertools_own(monkeypatch: pytest.MonkeyPatch) -> None:
    """sluice's formatter writes, for every record, the line powertools' formatter writes: with
    and without the Lambda context's keys, an X-Ray trace, keys appended or removed, fields that
    are None, not JSON-native or that powertools handles itself, and messages it may decode."""
    import logging

    import numpy as np
    from aws_lambda_powertools.logging.formatter import LambdaPowertoolsFormatter

    from sluice.observability.formatter import dumps as _dumps

    logger = get_logger()
    ours = logger.registered_formatter
    before = dict(ours.log_format)
    theirs = LambdaPowertoolsFormatter(json_serializer=_dumps)
    std = logging.getLogger("sluice.test")
    records = [
        ("prediction", {"deployment": "iris", "none": None, "value": np.float32(1.5), "kind": object}),
        ("prediction failed", {}),
        ('{"a": 1}', {}),
        ("true", {}),
        ("x", {"stack_trace": "s", "exception": "e", "xray_trace_id": "t", "service": "other", "cold_start": True}),
        ("ünïcode", {"text": "line\nbreak"}),
    ]
    try:
        for step in ("plain", "trace", "lambda", "appended", "removed"):
            if step == "trace":
                monkeypatch.setenv("_X_AMZN_TRACE_ID", "Root=1-abc;Parent=2;Sampled=1")
            elif step == "lambda":
                logger.structure_logs(cold_start=False, function_name="f", function_memory_size=1024, function_arn="arn", function_request_id="r")
            elif step == "appended":
                logger.append_keys(order=None, custom="v")
            elif step == "removed":
                logger.remove_keys(["custom"])
            theirs.log_format = dict(ours.log_format)
            for message, extra in records:
                record = std.makeRecord(std.name, logging.WARNING, "f.py", 7, message, (), None, "fn", extra)
                assert ours.format(record) == theirs.format(record), (step, message)
            record = std.makeRecord(std.name, logging.INFO, "f.py", 7, "hello %s", ("you",), None, "fn")
            assert ours.format(record) == theirs.format(record)
    finally:
        ours.log_format = before
        ours.clear_state()
        ours.log_format.update(before)


def test_lines_around_the_epoch_and_of_many_messages_are_powertools_own() -> None:
    """A timestamp's seconds are made once per second, and a second is told by its floor (a
    time before 1970 is not cut towards zero into the one after it); texts kept per message
    stay bounded however many messages are written."""
    import logging

    from aws_lambda_powertools.logging.formatter import LambdaPowertoolsFormatter

    from sluice.observability.formatter import MAX_SITES
    from sluice.observability.formatter import dumps as _dumps

    ours = get_logger().registered_formatter
    theirs = LambdaPowertoolsFormatter(json_serializer=_dumps)
    theirs.log_format = dict(ours.log_format)
    std = logging.getLogger("sluice.test")
    for created in (-1.5, -0.5, 0.5, 0.75, 1.25, 1_700_000_000.999):
        record = std.makeRecord(std.name, logging.INFO, "f.py", 7, "prediction", (), None, "fn", {"none": None, "nan": float("nan"), "rows": 1})
        record.created, record.msecs = created, (created - int(created)) * 1000
        assert ours.format(record) == theirs.format(record), created
    for i in range(3 * MAX_SITES):
        ours.format(std.makeRecord(std.name, logging.INFO, "f.py", 7, f"read {i} rows", (), None, "fn", {}))
    assert len(ours._joined[1]) <= MAX_SITES and len(ours._plans) <= MAX_SITES


def test_the_prediction_line_goes_straight_to_powertools_handler(monkeypatch: pytest.MonkeyPatch) -> None:
    """With powertools' handler the only one on the way, the line is written without a record:
    the same keys in the same order as `logger.info` writes. (pytest's own capture handlers
    sit on the root logger: taken off for this test, as none are there in Lambda.)"""
    import io
    import logging

    from sluice.observability.formatter import log_info as _log_info
    from sluice.observability.formatter import sole_handler as _sole_handler

    logger = get_logger()
    handler = logger.registered_handler
    assert _sole_handler(logger._logger) is None  # a handler on the way: records, as logging sends them
    monkeypatch.setattr(logging.root, "handlers", [])
    stream, handler.stream = handler.stream, io.StringIO()
    try:
        assert _sole_handler(logger._logger) is handler
        _log_info(logger, "prediction", {"deployment": "iris", "rows": 1, "none": None})
        logger.info("prediction", extra={"deployment": "iris", "rows": 1, "none": None})
        fast, standard = (json.loads(line) for line in handler.stream.getvalue().splitlines())
    finally:
        handler.stream = stream
    for line in (fast, standard):
        line.pop("timestamp"), line.pop("location")
    assert list(fast.items()) == list(standard.items())


def test_the_straight_lines_location_is_each_call_sites_own(monkeypatch: pytest.MonkeyPatch) -> None:
    """The line written without a record names its call site's function and line, as
    powertools' does, for every call site of a function and every call (the line worked out
    once per site is kept with its code)."""
    import inspect
    import io
    import logging

    from sluice.observability.formatter import log_info as _log_info

    logger = get_logger()
    handler = logger.registered_handler
    monkeypatch.setattr(logging.root, "handlers", [])
    stream, handler.stream = handler.stream, io.StringIO()

    def sites() -> list[int]:
        here: list[int] = []
        for _ in range(3):
            _log_info(logger, "one", {"n": 1}); here.append(inspect.currentframe().f_lineno)  # type: ignore[union-attr]  # noqa: E702
            _log_info(logger, "two", {"n": 2}); here.append(inspect.currentframe().f_lineno)  # type: ignore[union-attr]  # noqa: E702
        return here

    try:
        lines = sites()
        again = {}
        exec(compile("def sites2(log, logger):\n    log(logger, 'three', {})\n\n\n    log(logger, 'four', {})\n", "made.py", "exec"), again)
        for _ in range(2):
            again["sites2"](_log_info, logger)
        written = [json.loads(line)["location"] for line in handler.stream.getvalue().splitlines()]
    finally:
        handler.stream = stream
    assert written == [f"sites:{n}" for n in lines] + ["sites2:2", "sites2:5"] * 2
    assert len(set(lines)) == 2


def test_each_invocations_lines_carry_its_own_request_and_trace_ids(monkeypatch: pytest.MonkeyPatch) -> None:
    """Lambda sets the trace id before each invocation; a line written in it names that trace
    and that invocation's request, however many lines the invocation writes; a line outside an
    invocation names the trace id set when it is written."""
    import io
    import logging

    from sluice.observability import inject_lambda_context
    from sluice.observability.formatter import log_info as _log_info
    from tests.support import LambdaContext

    logger = get_logger()
    handler = logger.registered_handler
    monkeypatch.setattr(logging.root, "handlers", [])
    stream, handler.stream = handler.stream, io.StringIO()

    def invocation(event: object, context: object) -> None:
        for _ in range(2):
            _log_info(logger, "prediction", {"deployment": "iris"})

    try:
        for n in (1, 2):
            monkeypatch.setenv("_X_AMZN_TRACE_ID", f"Root=1-trace-{n};Parent=2;Sampled=1")
            context = LambdaContext()
            context.aws_request_id = f"request-{n}"
            inject_lambda_context(invocation)({}, context)
        monkeypatch.setenv("_X_AMZN_TRACE_ID", "Root=1-trace-3;Parent=2;Sampled=1")  # outside an invocation: read per line
        _log_info(logger, "prediction", {"deployment": "iris"})
        lines = [json.loads(line) for line in handler.stream.getvalue().splitlines()]
    finally:
        handler.stream = stream
    assert [(line["xray_trace_id"], line["function_request_id"]) for line in lines] == [
        ("1-trace-1", "request-1"), ("1-trace-1", "request-1"), ("1-trace-2", "request-2"), ("1-trace-2", "request-2"), ("1-trace-3", "request-2"),
    ]


def test_the_lambda_context_keys_are_powertools_own() -> None:
    """sluice's decorator leaves the logger with the keys powertools' leaves, in its order."""
    from sluice.observability import inject_lambda_context
    from tests.support import LambdaContext

    logger = get_logger()
    seen: list[dict] = []

    def handler(event: object, context: object) -> None:
        seen.append(dict(logger.registered_formatter.log_format))

    logger.append_keys(left_over="from an earlier invocation")
    logger.inject_lambda_context(handler, clear_state=True)({}, LambdaContext())
    logger.append_keys(left_over="from an earlier invocation")
    inject_lambda_context(handler)({}, LambdaContext())
    theirs, ours = seen
    assert list(ours) == list(theirs) and "left_over" not in ours
    assert {k: v for k, v in ours.items() if k != "cold_start"} == {k: v for k, v in theirs.items() if k != "cold_start"}
    assert ours["function_request_id"] == LambdaContext.aws_request_id and ours["cold_start"] is False


def test_two_tenants_deployments_of_one_name_are_two_series(caplog: pytest.LogCaptureFixture) -> None:
    """Deployment names are per tenant: kept by service and deployment alone, acme's `iris` and
    globex's were one CloudWatch series, each one's errors in the other's graphs and alarms."""
    caplog.set_level("INFO")
    telemetry = Telemetry(emit_metrics=True)
    for tenant in ("acme", "globex"):
        telemetry.prediction(fields={"deployment": "iris", "tenant": tenant}, latency_ms=1.0, rows=1)
        telemetry.failure(fields={"deployment": "iris", "tenant": tenant}, status=502, code="backend_error")
        telemetry.shadow(fields={"deployment": "iris", "tenant": tenant, "mirror": "m"}, agreement=1.0, mean_abs_diff=0.0, latency_ratio=None)
    series: dict[str, set[tuple[tuple[str, str], ...]]] = {}
    for line in lines(caplog):  # what CloudWatch extracts: each metric by each dimension set, as the line's values
        for directive in line["_aws"]["CloudWatchMetrics"]:
            for names in directive["Dimensions"]:
                for metric in directive["Metrics"]:
                    series.setdefault(metric["Name"], set()).add(tuple((n, line[n]) for n in names))
    for metric in ("Requests", "Predictions", "Latency", "BackendErrors", "ShadowAgreement"):
        tenants = {dict(d).get("tenant") for d in series[metric]}
        assert tenants == {"acme", "globex"}, (metric, series[metric])


def test_a_precomputed_nodes_rows_by_source_are_service_wide_metrics(caplog: pytest.LogCaptureFixture) -> None:
    """What the fallback-rate alarm reads: rows answered from the table and live, by service alone."""
    caplog.set_level("INFO")
    telemetry = Telemetry(emit_metrics=True)
    telemetry.prediction(fields={"deployment": "recs"}, latency_ms=1.0, rows=4, sources=(3, 1))
    telemetry.prediction(fields={"deployment": "iris"}, latency_ms=1.0, rows=1)
    sourced, plain = lines(caplog)
    assert (sourced["PrecomputedRows"], sourced["LiveFallbackRows"]) == (3, 1)
    per_deployment, service_wide = sourced["_aws"]["CloudWatchMetrics"]
    assert per_deployment["Dimensions"] == [["service", "deployment"]]
    assert service_wide["Dimensions"] == [["service"]]
    assert {m["Name"] for m in service_wide["Metrics"]} == {"PrecomputedRows", "LiveFallbackRows"}
    assert "PrecomputedRows" not in plain and len(plain["_aws"]["CloudWatchMetrics"]) == 1


_before_invocation = st.sampled_from(["nothing", "nothing", "nothing", "renamed", "appended", "removed", "cleared"])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    steps=st.lists(
        st.tuples(_before_invocation, st.text(min_size=1, max_size=12) | st.sampled_from(["{cold_start}", "a}\x00{"]), st.booleans(), st.sampled_from([None, "Root=1-a;Parent=2", "Root=1-b"])),
        min_size=1,
        max_size=6,
    ),
    extras=st.lists(
        st.dictionaries(
            st.sampled_from(["rows", "deployment", "none", "latency_ms", "_aws", "timestamp", "exception"]),
            st.one_of(
                st.none(), st.integers(-(2**63), 2**63 - 1), st.text(max_size=5), st.floats(), st.booleans(),
                # what holds the text of a None without being one: the formatter looks for it in the line
                st.sampled_from([":null", '":null', "a:null}", {"a": None}, [None], {"b": [None, ":null"]}]),
            ),
            max_size=4,
        ),
        min_size=1,
        max_size=4,
    ),
    msecs=st.lists(st.sampled_from([0.0, 7.5, 250.0, 999.9]), min_size=4, max_size=4),
)
def test_consecutive_invocations_keys_and_lines_are_powertools_own(
    steps: list[tuple[str, str, bool, str | None]], extras: list[dict[str, object]], msecs: list[float]
) -> None:
    """Invocation after invocation (another request id, cold or not, another trace, keys
    appended, removed or cleared between them, the function renamed), the keys sluice's
    decorator sets and the lines written in each invocation (whatever their fields) are those
    of powertools' own decorator and formatter: the copy of the last invocation's keys takes
    only what changed, and each call site's text is made once per invocation."""
    import logging
    import os

    from aws_lambda_powertools.logging import logger as powertools
    from aws_lambda_powertools.logging.formatter import LambdaPowertoolsFormatter

    from sluice.observability import inject_lambda_context
    from sluice.observability.formatter import dumps as _dumps
    from tests.support import LambdaContext

    logger = get_logger()
    ours = logger.registered_formatter
    before, trace_before, cold_before = dict(ours.log_format), os.environ.get("_X_AMZN_TRACE_ID"), powertools.is_cold_start
    std = logging.getLogger("sluice.test")
    messages = ("prediction", "other {deployment}", "prediction failed }{", "[not a word")
    records = [std.makeRecord(std.name, logging.INFO, "f.py", 7 + i, messages[i % 4], (), None, "fn", x) for i, x in enumerate(extras)]
    for i, record in enumerate(records):  # each in a second of its own, at a millisecond of its own
        record.created, record.msecs = 1_700_000_000 + i + msecs[i] / 1000, msecs[i]

    def run(decorate: object) -> list[tuple[dict, list[str]]]:
        seen: list[tuple[dict, list[str]]] = []

        def handler(event: object, context: object) -> None:
            keys = dict(ours.log_format)
            theirs = LambdaPowertoolsFormatter(json_serializer=_dumps)
            theirs.log_format = dict(keys)
            seen.append((keys, [ours.format(r) for r in records], [theirs.format(r) for r in records]))

        for action, request_id, cold, trace in steps:
            context = LambdaContext()
            context.aws_request_id = request_id
            if action == "renamed":
                context.function_name = "renamed"
            elif action == "appended":
                logger.append_keys(custom="v")
            elif action == "removed":
                logger.remove_keys(["custom", "sampling_rate"])
            elif action == "cleared":
                ours.clear_state()
            if trace is None:
                os.environ.pop("_X_AMZN_TRACE_ID", None)
            else:
                os.environ["_X_AMZN_TRACE_ID"] = trace
            powertools.is_cold_start = cold
            decorate(handler)({}, context)  # type: ignore[operator]
        return seen

    try:
        mine = run(inject_lambda_context)
        reference = run(lambda h: logger.inject_lambda_context(h, clear_state=True))
    finally:
        ours.log_format = before
        ours.clear_state()
        ours.log_format.update(before)
        powertools.is_cold_start = cold_before
        if trace_before is None:
            os.environ.pop("_X_AMZN_TRACE_ID", None)
        else:
            os.environ["_X_AMZN_TRACE_ID"] = trace_before
    for (keys, lines_, own), (expected, _, _) in zip(mine, reference, strict=True):
        assert list(keys.items()) == list(expected.items())
        assert lines_ == own  # the lines of these keys, as powertools' formatter writes them


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(
    variant=st.booleans(),
    cached=st.sampled_from([None, True, False]),
    model_cache=st.booleans(),
    sources=st.one_of(st.none(), st.tuples(st.integers(0, 5), st.integers(0, 5))),
    lookups=st.lists(st.tuples(st.integers(0, 3), st.one_of(st.none(), st.tuples(st.integers(0, 9), st.integers(0, 9)))), max_size=3),
)
def test_every_prediction_line_is_a_valid_emf_record(
    caplog: pytest.LogCaptureFixture, variant: bool, cached: bool | None, model_cache: bool, sources: tuple[int, int] | None, lookups: list[tuple[int, tuple[int, int] | None]]
) -> None:
    """Whatever the shape (variant, prediction cache, model cache, precomputed sources, lookups
    cached or not), each metric the line names has a number at its top level and each
    dimension it names is a member, as CloudWatch requires of an EMF record; a shape's metadata
    is shared by the lines of that shape only."""
    from sluice.domain.lookups import Lookup
    from sluice.runtimes.lookup_reports import Looked

    telemetry = Telemetry(emit_metrics=True, namespace="sluice")
    node = Lookup(store="sqlite", table="t", keys={"customer_id": "customer"}, features=[{"name": "f", "datatype": "FP32"}])
    looked = [(node, Looked({}, calls, *(cache or ()))) for calls, cache in lookups]
    fields = {"deployment": "d", "tenant": "acme", **({"variant": "v"} if variant else {})}  # `service`: the logger's key
    caplog.clear()
    caplog.set_level("INFO")
    for _ in range(2):  # the second line of a shape reuses its metadata
        assert telemetry.prediction(fields=dict(fields), latency_ms=1.0, rows=2, cached=cached, sources=sources, looked=looked, sessions=[3, 1] if model_cache else None)
    for line in lines(caplog):
        directives = line["_aws"]["CloudWatchMetrics"]
        for directive in directives:
            for metric in directive["Metrics"]:
                assert isinstance(line[metric["Name"]], int | float), metric
            for dimension_set in directive["Dimensions"]:
                assert all(isinstance(line[d], str) for d in dimension_set), dimension_set
        named = {m["Name"] for d in directives for m in d["Metrics"]}
        assert ("LookupCalls" in named) == bool(lookups) and ("PrecomputedRows" in named) == (sources is not None)
        assert ("Latency" in named) == (not cached)
        if lookups:
            assert line["LookupCalls"] == len(lookups) and [x["store_calls"] for x in line["lookups"]] == [calls for calls, _ in lookups]


@settings(max_examples=20, deadline=None)
@given(level=st.sampled_from(["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"]), sources=st.booleans(), model_cache=st.booleans())
def test_the_emf_metrics_are_written_whatever_the_log_level(level: str, sources: bool, model_cache: bool) -> None:
    """SLUICE_LOG_LEVEL decides the log lines, not the metrics: with INFO (or WARNING) off, an
    answered request, a failure and a shadow comparison are still EMF records of the same
    figures (Requests, the fallback rows the alarm reads, ...), without the log line's other
    fields."""
    import io
    import logging

    std = get_logger()._logger
    handler = get_logger().registered_handler

    def extracted(at: str) -> tuple[dict[str, float], list[dict]]:
        telemetry = Telemetry(emit_metrics=True, namespace="sluice")
        fields = {"deployment": "recs", "tenant": "acme", "request_id": "r1"}
        stream, handler.stream, was = handler.stream, io.StringIO(), std.level
        std.setLevel(at)
        try:
            for _ in range(3):
                telemetry.prediction(fields=dict(fields), latency_ms=2.0, rows=4, sources=(3, 1) if sources else None, sessions=[1, 0] if model_cache else None)
            telemetry.failure(fields=dict(fields), status=400, code="invalid_input")
            telemetry.failure(fields=dict(fields), status=502, code="backend")
            telemetry.shadow(fields={"deployment": "recs", "mirror": "m"}, agreement=0.5, mean_abs_diff=None, latency_ratio=1.0)
            written = [json.loads(line) for line in handler.stream.getvalue().splitlines()]
        finally:
            handler.stream, _ = stream, std.setLevel(was)
        sums: dict[str, float] = {}
        for line in written:
            for directive in line["_aws"]["CloudWatchMetrics"]:
                for dimension_set in directive["Dimensions"]:
                    assert all(isinstance(line[d], str) for d in dimension_set), dimension_set
                for metric in directive["Metrics"]:
                    sums[metric["Name"]] = sums.get(metric["Name"], 0) + line[metric["Name"]]
        return sums, written

    expected, _ = extracted("INFO")
    got, written = extracted(level)
    assert got == expected and expected["Requests"] == 5 and expected["Errors"] == 2
    assert ("LiveFallbackRows" in got) == sources and ("ModelCacheHits" in got) == model_cache
    alone = [line for line in written if logging.getLevelName(line["level"]) < logging.getLevelName(level)]  # the level drops their lines
    assert len(alone) == {"WARNING": 4, "ERROR": 5, "CRITICAL": 6}.get(level, 0)
    assert not any("request_id" in line or "latency_ms" in line for line in alone)  # the metrics alone
