"""One dashboard and the alarms that page: API errors and latency, Lambda errors and
throttles, batch failures; per-deployment prediction metrics from the app's EMF output.

Per-deployment series come from CloudWatch SEARCH expressions over the `sluice` namespace,
so a new deployment shows up without redeploying this stack. (Alarms cannot use SEARCH;
they watch the API, the functions and the state machine instead.)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from aws_cdk import Duration, Stack
from aws_cdk import aws_cloudwatch as cw
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_sns as sns
from constructs import Construct

from infra.config import AlarmsConfig
from infra.constructs.grants import state_machine_arn
from infra.constructs.stream_pipeline import StreamWatch
from infra.nag import acknowledge
from infra.naming import ResourceNames

METRICS_NAMESPACE = "sluice"
FIVE_MINUTES = Duration.minutes(5)


def search(metric: str, statistic: str, label: str, *dimensions: str) -> cw.MathExpression:
    """One line per value of `dimensions` (dimension names are search terms) for `metric`."""
    terms = " ".join((f'Namespace="{METRICS_NAMESPACE}"', f'MetricName="{metric}"', *dimensions))
    return cw.MathExpression(
        expression=f"SEARCH('{terms}', '{statistic}', 300)",
        label=label,
        period=FIVE_MINUTES,
    )


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
        **kwargs,
    ) -> None:
        """`function_names`: the functions the other stacks made; `streams`: what the streams
        stack watches (none without it); `api_stage`: the REST API's stage."""
        super().__init__(scope, id, **kwargs)
        self._stream_error_percent = alarms.stream_error_percent
        api_dimensions = {"ApiName": names.rest_api, "Stage": api_stage}
        machine_arn = state_machine_arn(self, names.state_machine)

        def api_metric(name: str, statistic: str) -> cw.Metric:
            return cw.Metric(
                namespace="AWS/ApiGateway",
                metric_name=name,
                dimensions_map=api_dimensions,
                statistic=statistic,
                period=FIVE_MINUTES,
            )

        def lambda_metric(
            function_name: str, name: str, statistic: str, *, labelled: bool = False
        ) -> cw.Metric:
            # A label turns an alarm's metric into a metric query; only graphs need one.
            return cw.Metric(
                namespace="AWS/Lambda",
                metric_name=name,
                dimensions_map={"FunctionName": function_name},
                statistic=statistic,
                period=FIVE_MINUTES,
                label=function_name if labelled else None,
            )

        def batch_metric(name: str, statistic: str) -> cw.Metric:
            return cw.Metric(
                namespace="AWS/States",
                metric_name=name,
                dimensions_map={"StateMachineArn": machine_arn},
                statistic=statistic,
                period=FIVE_MINUTES,
                label=name,
            )

        # Alarms -------------------------------------------------------------------------
        self.topic: sns.Topic | None = None
        if alarms.wants_topic:
            self.topic = sns.Topic(
                self,
                "AlarmTopic",
                topic_name=names.alarm_topic,
                display_name="sluice alarms",
                enforce_ssl=True,
            )
            for index, email in enumerate(alarms.emails):
                subscription = sns.Subscription(
                    self,
                    f"AlarmEmail{index}",
                    topic=self.topic,
                    protocol=sns.SubscriptionProtocol.EMAIL,
                    endpoint=email,
                )
                acknowledge(
                    subscription,
                    "Serverless-SNSRedrivePolicy",
                    "An e-mail notification of an alarm: SNS retries delivery, and the alarm's "
                    "state and history stay in CloudWatch, so a dead-letter queue adds nothing.",
                )
        self.alarms: list[cw.Alarm] = []

        def alarm(
            id: str, metric: cw.IMetric, *, threshold: float, description: str, periods: int = 1
        ) -> cw.Alarm:
            created = cw.Alarm(
                self,
                id,
                metric=metric,
                threshold=threshold,
                evaluation_periods=periods,
                datapoints_to_alarm=periods,
                alarm_description=description,
                comparison_operator=cw.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
                treat_missing_data=cw.TreatMissingData.NOT_BREACHING,
            )
            if self.topic is not None:
                created.add_alarm_action(cw_actions.SnsAction(self.topic))
                created.add_ok_action(cw_actions.SnsAction(self.topic))
            self.alarms.append(created)
            return created

        error_rate = cw.MathExpression(
            expression="IF(requests > 0, 100 * errors / requests, 0)",
            using_metrics={
                "errors": api_metric("5XXError", "Sum"),
                "requests": api_metric("Count", "Sum"),
            },
            label="5xx %",
            period=FIVE_MINUTES,
        )
        alarm(
            "Api5xxRate",
            error_rate,
            threshold=alarms.api_5xx_percent,
            description=f"More than {alarms.api_5xx_percent}% of API requests failed with 5xx",
        )
        alarm(
            "ApiLatencyP99",
            api_metric("Latency", "p99"),
            threshold=alarms.api_p99_latency_ms,
            periods=3,
            description=f"API p99 latency at or over {alarms.api_p99_latency_ms} ms for 15 minutes",
        )
        for function_name in function_names:
            alarm(
                f"Errors-{function_name}",
                lambda_metric(function_name, "Errors", "Sum"),
                threshold=alarms.lambda_errors,
                description=f"{function_name} is failing",
            )
            alarm(
                f"Throttles-{function_name}",
                lambda_metric(function_name, "Throttles", "Sum"),
                threshold=alarms.lambda_throttles,
                description=f"{function_name} is throttled",
            )
        batch_failures = cw.MathExpression(
            expression="failed + timedOut + aborted",
            using_metrics={
                "failed": batch_metric("ExecutionsFailed", "Sum"),
                "timedOut": batch_metric("ExecutionsTimedOut", "Sum"),
                "aborted": batch_metric("ExecutionsAborted", "Sum"),
            },
            label="batch jobs failed",
            period=FIVE_MINUTES,
        )
        alarm(
            "BatchFailures",
            batch_failures,
            threshold=alarms.batch_failures,
            description="Batch jobs failed, timed out or were aborted",
        )

        for stream in streams:
            self._stream_alarms(stream, alarm, lambda_metric)

        # Dashboard ----------------------------------------------------------------------
        dashboard = cw.Dashboard(self, "Dashboard", dashboard_name=names.dashboard)

        def graph(
            title: str,
            metrics: Sequence[cw.IMetric],
            *,
            width: int = 8,
            right: Sequence[cw.IMetric] = (),
        ) -> cw.GraphWidget:
            return cw.GraphWidget(
                title=title, left=list(metrics), right=list(right), width=width, height=6
            )

        dashboard.add_widgets(
            cw.TextWidget(
                markdown=f"# {names.prefix}\nAPI, functions, predictions per deployment, shadows and batch.",
                width=24,
                height=2,
            ),
            graph(
                "API requests and errors",
                [api_metric("Count", "Sum")],
                right=[api_metric("4XXError", "Sum"), api_metric("5XXError", "Sum")],
            ),
            graph(
                "API latency (ms)",
                [api_metric("Latency", stat) for stat in ("p50", "p90", "p99")]
                + [api_metric("IntegrationLatency", "p99")],
            ),
            cw.AlarmStatusWidget(title="Alarms", alarms=self.alarms, width=8, height=6),
            graph(
                "Lambda duration p99 (ms)",
                [lambda_metric(n, "Duration", "p99", labelled=True) for n in function_names],
            ),
            graph(
                "Lambda errors",
                [lambda_metric(n, "Errors", "Sum", labelled=True) for n in function_names],
            ),
            graph(
                "Lambda throttles",
                [lambda_metric(n, "Throttles", "Sum", labelled=True) for n in function_names],
            ),
            graph(
                "Predictions per deployment",
                [search("Predictions", "Sum", "predictions", "deployment")],
                right=[search("Rows", "Sum", "rows", "deployment")],
            ),
            graph(
                "Prediction latency p99 per deployment (ms)",
                [search("Latency", "p99", "p99", "deployment")],
            ),
            graph(
                "Prediction errors per deployment",
                [
                    search("ClientErrors", "Sum", "4xx", "deployment"),
                    search("BackendErrors", "Sum", "backend", "deployment"),
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
                [search("ShadowAgreement", "Average", "agreement", "deployment", "mirror")],
            ),
            graph(
                "Batch job duration (ms)",
                [batch_metric("ExecutionTime", "Average"), batch_metric("ExecutionTime", "p90")],
            ),
            graph(
                "Batch jobs",
                [batch_metric(n, "Sum") for n in ("ExecutionsStarted", "ExecutionsSucceeded")],
                right=[
                    batch_metric(n, "Sum")
                    for n in ("ExecutionsFailed", "ExecutionsTimedOut", "ExecutionsAborted")
                ],
                width=16,
            ),
        )

    def _stream_alarms(self, stream: StreamWatch, alarm: Any, lambda_metric: Any) -> None:
        """A stream falling behind (oldest message, iterator age, or offset lag), records in
        its dead-letter queue, and the share of its invocations that failed."""
        function_name = stream.function_name
        kind = stream.source_kind

        def queue_metric(queue: str, name: str) -> cw.Metric:
            return cw.Metric(namespace="AWS/SQS", metric_name=name, dimensions_map={"QueueName": queue}, statistic="Maximum", period=FIVE_MINUTES)

        if kind == "sqs":
            behind: cw.IMetric = queue_metric(stream.source_queue, "ApproximateAgeOfOldestMessage")
            threshold: float = stream.iterator_age_alarm_s
        elif kind == "kinesis":
            behind, threshold = lambda_metric(function_name, "IteratorAge", "Maximum"), stream.iterator_age_alarm_s * 1000
        else:
            behind, threshold = lambda_metric(function_name, "OffsetLag", "Maximum"), stream.offset_lag_alarm
        alarm(f"StreamBehind-{stream.name}", behind, threshold=threshold, periods=3, description=f"stream {stream.name} is falling behind its source")
        if stream.dead_letter_queue is not None:
            alarm(
                f"StreamDeadLetters-{stream.name}",
                queue_metric(stream.dead_letter_queue, "ApproximateNumberOfMessagesVisible"),
                threshold=1,
                description=f"records of stream {stream.name} reached its dead-letter queue",
            )
        rate = cw.MathExpression(
            expression="IF(invocations > 0, 100 * errors / invocations, 0)",
            using_metrics={
                "errors": lambda_metric(function_name, "Errors", "Sum"),
                "invocations": lambda_metric(function_name, "Invocations", "Sum"),
            },
            label=f"{stream.name} errors %",
            period=FIVE_MINUTES,
        )
        percent = self._stream_error_percent
        alarm(f"StreamErrorRate-{stream.name}", rate, threshold=percent, description=f"over {percent}% of stream {stream.name}'s invocations failed")
