"""One dashboard and the alarms that page: API errors and latency, Lambda errors and
throttles, batch failures, streams falling behind; per-deployment prediction metrics from the
app's EMF output.

Per-deployment series come from CloudWatch SEARCH expressions over the `sluice` namespace,
so a new deployment shows up without redeploying this stack. (Alarms cannot use SEARCH;
they watch the API, the functions and the state machine instead, and model monitoring's
`MonitorAlerts` of each deployment the config names in `alarms.monitor_deployments`.)
"""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import Duration, Stack
from aws_cdk import aws_cloudwatch as cw
from constructs import Construct

from infra.config import AlarmsConfig
from infra.constructs.grants import state_machine_arn
from infra.constructs.monitoring import (
    Alarms,
    Metrics,
    lookup_metric,
    monitor_metric,
    percent,
    search,
    total,
)
from infra.constructs.stream_pipeline import StreamWatch
from infra.naming import ResourceNames

# The executions of the batch state machine that did not succeed (by the name of their metric).
FAILED_EXECUTIONS = {
    "failed": "ExecutionsFailed",
    "timedOut": "ExecutionsTimedOut",
    "aborted": "ExecutionsAborted",
}


class ObservabilityStack(Stack):
    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        names: ResourceNames,
        alarms: AlarmsConfig,
        api_stage: str,
        function_names: Sequence[str],
        streams: Sequence[StreamWatch],
        lookups: bool = False,
        **kwargs,
    ) -> None:
        """`function_names`: the functions the other stacks made; `streams`: what the streams
        stack watches (none without it); `api_stage`: the REST API's stage."""
        super().__init__(scope, id, **kwargs)
        metrics = Metrics(
            rest_api=names.rest_api,
            stage=api_stage,
            state_machine_arn=state_machine_arn(self, names.state_machine),
        )
        self.alarms = Alarms(
            self,
            topic_name=names.alarm_topic if alarms.wants_topic else None,
            emails=alarms.emails,
        )
        self.topic = self.alarms.topic
        add = self.alarms.add
        add(
            "Api5xxRate",
            percent(
                ("errors", metrics.api("5XXError", "Sum")),
                ("requests", metrics.api("Count", "Sum")),
                "5xx %",
            ),
            threshold=alarms.api_5xx_percent,
            description=f"More than {alarms.api_5xx_percent}% of API requests failed with 5xx",
        )
        add(
            "ApiLatencyP99",
            metrics.api("Latency", "p99"),
            threshold=alarms.api_p99_latency_ms,
            periods=3,
            description=f"API p99 latency at or over {alarms.api_p99_latency_ms} ms for 15 minutes",
        )
        for function_name in function_names:
            add(
                f"Errors-{function_name}",
                metrics.function(function_name, "Errors", "Sum"),
                threshold=alarms.lambda_errors,
                description=f"{function_name} is failing",
            )
            add(
                f"Throttles-{function_name}",
                metrics.function(function_name, "Throttles", "Sum"),
                threshold=alarms.lambda_throttles,
                description=f"{function_name} is throttled",
            )
        add(
            "BatchFailures",
            total(
                {key: metrics.batch(name, "Sum") for key, name in FAILED_EXECUTIONS.items()},
                "batch jobs failed",
            ),
            threshold=alarms.batch_failures,
            description="Batch jobs failed, timed out or were aborted",
        )
        add(
            "PrecomputedFallbackRate",
            cw.MathExpression(
                expression="IF(stored + live > 0, 100 * live / (stored + live), 0)",
                using_metrics={
                    "stored": metrics.app("PrecomputedRows", "Sum"),
                    "live": metrics.app("LiveFallbackRows", "Sum"),
                },
                label="fallback %",
                period=Duration.minutes(5),
            ),
            threshold=alarms.precomputed_fallback_percent,
            periods=3,
            description=f"More than {alarms.precomputed_fallback_percent}% of precomputed nodes' rows answered live "
            "for 15 minutes: a table not published or expired, or many entities missing",
        )
        for stream in streams:
            self._stream_alarms(stream, metrics, alarms.stream_error_percent)
        for entry in alarms.monitor_deployments:
            tenant, _, deployment = entry.partition("/")
            add(
                f"MonitorAlerts-{tenant}--{deployment}",
                monitor_metric("MonitorAlerts", tenant, deployment),
                threshold=alarms.monitor_alerts,
                description=f"Model monitoring: {alarms.monitor_alerts} or more columns of {entry} drifted "
                "or lost quality in the window the hourly check closed",
            )
        if lookups:  # graphs' lookup steps read the stores `graphs.lookups` lists
            add(
                "LookupErrorRate",
                percent(("errors", lookup_metric("LookupErrors")), ("lookups", lookup_metric("LookupCalls")), "lookup errors %"),
                threshold=alarms.lookup_error_percent,
                description=f"More than {alarms.lookup_error_percent}% of lookup steps failed reading their store",
            )
        self._dashboard(names, metrics, function_names)

    def _stream_alarms(self, stream: StreamWatch, metrics: Metrics, error_percent: float) -> None:
        """A stream falling behind (oldest message, iterator age, or offset lag), records in
        its dead-letter queue, and the share of its invocations that failed."""
        add, function_name = self.alarms.add, stream.function_name
        behind: cw.IMetric
        if stream.source_kind == "sqs":
            behind = metrics.queue(stream.source_queue, "ApproximateAgeOfOldestMessage")
            threshold: float = stream.iterator_age_alarm_s
        elif stream.source_kind == "kinesis":
            behind = metrics.function(function_name, "IteratorAge", "Maximum")
            threshold = stream.iterator_age_alarm_s * 1000
        else:
            behind = metrics.function(function_name, "OffsetLag", "Maximum")
            threshold = stream.offset_lag_alarm
        add(
            f"StreamBehind-{stream.name}",
            behind,
            threshold=threshold,
            periods=3,
            description=f"stream {stream.name} is falling behind its source",
        )
        if stream.dead_letter_queue is not None:
            add(
                f"StreamDeadLetters-{stream.name}",
                metrics.queue(stream.dead_letter_queue, "ApproximateNumberOfMessagesVisible"),
                threshold=1,
                description=f"records of stream {stream.name} reached its dead-letter queue",
            )
        rate = percent(
            ("errors", metrics.function(function_name, "Errors", "Sum")),
            ("invocations", metrics.function(function_name, "Invocations", "Sum")),
            f"{stream.name} errors %",
        )
        add(
            f"StreamErrorRate-{stream.name}",
            rate,
            threshold=error_percent,
            description=f"over {error_percent}% of stream {stream.name}'s invocations failed",
        )

    def _dashboard(
        self, names: ResourceNames, metrics: Metrics, function_names: Sequence[str]
    ) -> cw.Dashboard:
        def graph(
            title: str,
            left: Sequence[cw.IMetric],
            *,
            width: int = 8,
            right: Sequence[cw.IMetric] = (),
        ) -> cw.GraphWidget:
            return cw.GraphWidget(
                title=title, left=list(left), right=list(right), width=width, height=6
            )

        def per_function(metric: str, statistic: str) -> list[cw.IMetric]:
            return [metrics.function(n, metric, statistic, labelled=True) for n in function_names]

        dashboard = cw.Dashboard(self, "Dashboard", dashboard_name=names.dashboard)
        dashboard.add_widgets(
            cw.TextWidget(
                markdown=f"# {names.prefix}\nAPI, functions, predictions per deployment, shadows and batch.",
                width=24,
                height=2,
            ),
            graph(
                "API requests and errors",
                [metrics.api("Count", "Sum")],
                right=[metrics.api("4XXError", "Sum"), metrics.api("5XXError", "Sum")],
            ),
            graph(
                "API latency (ms)",
                [metrics.api("Latency", stat) for stat in ("p50", "p90", "p99")]
                + [metrics.api("IntegrationLatency", "p99")],
            ),
            cw.AlarmStatusWidget(title="Alarms", alarms=self.alarms.created, width=8, height=6),
            graph("Lambda duration p99 (ms)", per_function("Duration", "p99")),
            graph("Lambda errors", per_function("Errors", "Sum")),
            graph("Lambda throttles", per_function("Throttles", "Sum")),
            graph(
                "Predictions per deployment",
                [search("Predictions", "Sum", "predictions", "tenant", "deployment")],
                right=[search("Rows", "Sum", "rows", "tenant", "deployment")],
            ),
            graph(
                "Prediction latency p99 per deployment (ms)",
                [search("Latency", "p99", "p99", "tenant", "deployment")],
            ),
            graph(
                "Prediction errors per deployment",
                [
                    search("ClientErrors", "Sum", "4xx", "tenant", "deployment"),
                    search("BackendErrors", "Sum", "backend", "tenant", "deployment"),
                ],
            ),
            graph(
                "Model cache",
                [
                    search("ModelCacheHits", "Sum", "hits"),
                    search("ModelCacheMisses", "Sum", "misses"),
                ],
            ),
            graph(
                "Shadow agreement per deployment and mirror",
                [search("ShadowAgreement", "Average", "agreement", "tenant", "deployment", "mirror")],
            ),
            graph(
                "Batch job duration (ms)",
                [metrics.batch("ExecutionTime", "Average"), metrics.batch("ExecutionTime", "p90")],
            ),
            graph(
                "Batch jobs",
                [metrics.batch(n, "Sum") for n in ("ExecutionsStarted", "ExecutionsSucceeded")],
                right=[metrics.batch(n, "Sum") for n in FAILED_EXECUTIONS.values()],
                width=16,
            ),
        )
        return dashboard
