"""The pieces of the observability stack: metrics of the API, the functions, the state machine
and queues, SEARCH expressions over the app's own EMF metrics, and alarms that notify one
topic."""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cw
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_sns as sns
from constructs import Construct

from infra.nag import acknowledge

METRICS_NAMESPACE = "sluice"
SERVICE = "sluice"  # POWERTOOLS_SERVICE_NAME, the `service` dimension of the EMF metrics
FIVE_MINUTES = Duration.minutes(5)


def search(metric: str, statistic: str, label: str, *dimensions: str) -> cw.MathExpression:
    """One line per value of `dimensions` (dimension names are search terms) for `metric`."""
    terms = " ".join((f'Namespace="{METRICS_NAMESPACE}"', f'MetricName="{metric}"', *dimensions))
    return cw.MathExpression(
        expression=f"SEARCH('{terms}', '{statistic}', 300)",
        label=label,
        period=FIVE_MINUTES,
    )


def percent(
    part: tuple[str, cw.IMetric], whole: tuple[str, cw.IMetric], label: str
) -> cw.MathExpression:
    """100 * part / whole, 0 when there is no whole: a share of requests or invocations."""
    (part_name, part_metric), (whole_name, whole_metric) = part, whole
    return cw.MathExpression(
        expression=f"IF({whole_name} > 0, 100 * {part_name} / {whole_name}, 0)",
        using_metrics={part_name: part_metric, whole_name: whole_metric},
        label=label,
        period=FIVE_MINUTES,
    )


def total(metrics: dict[str, cw.IMetric], label: str) -> cw.MathExpression:
    return cw.MathExpression(
        expression=" + ".join(metrics), using_metrics=metrics, label=label, period=FIVE_MINUTES
    )


def lookup_metric(name: str) -> cw.Metric:
    """A lookup steps' EMF metric (`LookupCalls`, `LookupErrors`), written with no dimension."""
    return cw.Metric(namespace=METRICS_NAMESPACE, metric_name=name, statistic="Sum", period=FIVE_MINUTES)


def monitor_metric(name: str, tenant: str, deployment: str) -> cw.Metric:
    """Model monitoring's hourly EMF metric of one deployment (sluice.handlers.monitor), its
    largest value in the hour: the scheduled check writes one a window."""
    return cw.Metric(
        namespace=METRICS_NAMESPACE,
        metric_name=name,
        dimensions_map={"service": SERVICE, "tenant": tenant, "deployment": deployment},
        statistic="Maximum",
        period=Duration.hours(1),
    )


class Metrics:
    """Five-minute metrics of one deployment of sluice."""

    def __init__(self, *, rest_api: str, stage: str, state_machine_arn: str) -> None:
        self._api = {"ApiName": rest_api, "Stage": stage}
        self._state_machine_arn = state_machine_arn

    def api(self, name: str, statistic: str) -> cw.Metric:
        return self._metric("AWS/ApiGateway", name, self._api, statistic)

    def function(
        self, function_name: str, name: str, statistic: str, *, labelled: bool = False
    ) -> cw.Metric:
        # A label turns an alarm's metric into a metric query; only graphs need one.
        return self._metric(
            "AWS/Lambda",
            name,
            {"FunctionName": function_name},
            statistic,
            label=function_name if labelled else None,
        )

    def batch(self, name: str, statistic: str) -> cw.Metric:
        return self._metric(
            "AWS/States", name, {"StateMachineArn": self._state_machine_arn}, statistic, label=name
        )

    def app(self, name: str, statistic: str) -> cw.Metric:
        """sluice's own EMF metrics, service-wide (`service` is the Powertools service name)."""
        return self._metric(METRICS_NAMESPACE, name, {"service": SERVICE}, statistic)

    def queue(self, queue: str, name: str) -> cw.Metric:
        return self._metric("AWS/SQS", name, {"QueueName": queue}, "Maximum")

    @staticmethod
    def _metric(
        namespace: str,
        name: str,
        dimensions: dict[str, str],
        statistic: str,
        *,
        label: str | None = None,
    ) -> cw.Metric:
        return cw.Metric(
            namespace=namespace,
            metric_name=name,
            dimensions_map=dimensions,
            statistic=statistic,
            period=FIVE_MINUTES,
            label=label,
        )


class Alarms:
    """Alarms built into `scope`, each notifying the topic ("AlarmTopic", with e-mail
    subscriptions "AlarmEmail<n>") of its alarm and its recovery, where there is one."""

    def __init__(
        self, scope: Construct, *, topic_name: str | None, emails: Sequence[str] = ()
    ) -> None:
        """`topic_name`: None for alarms that notify nobody."""
        self._scope = scope
        self.created: list[cw.Alarm] = []
        self.topic: sns.Topic | None = None
        if topic_name is None:
            return
        self.topic = sns.Topic(
            scope,
            "AlarmTopic",
            topic_name=topic_name,
            display_name="sluice alarms",
            enforce_ssl=True,
        )
        for index, email in enumerate(emails):
            subscription = sns.Subscription(
                scope,
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

    def add(
        self, id: str, metric: cw.IMetric, *, threshold: float, description: str, periods: int = 1
    ) -> cw.Alarm:
        """At or over `threshold` for `periods` five-minute periods; no data is not breaching."""
        created = cw.Alarm(
            self._scope,
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
        self.created.append(created)
        return created
