"""Model monitoring's windows, closed on AWS: an EventBridge Scheduler schedule invokes one
function (sluice.handlers.monitor) five minutes past every hour, the default window's end
plus time for the containers' flushes (every 30 s); it checks the window that closed for every
deployment with a baseline and writes EMF metrics (`MonitorAlerts`, `MonitorDrift`, quality)
that the observability stack's alarms watch.

The function only reads: the tenant partitions' items (deployments, baselines, profiles,
labelled counts) and a scan of the table that may read each item's keys alone (which
deployments have a baseline). It writes nothing to the registry and calls nothing else.
"""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import Duration
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_scheduler as scheduler
from constructs import Construct

from infra.constructs.functions import FunctionPlatform, SluiceFunction
from infra.constructs.grants import scheduler_principal
from infra.constructs.python_layer import PythonLayer
from infra.constructs.registry_access import READ, grant_registry

# What the scan of `monitored` may read: the keys of each item.
MONITOR_SCAN_ATTRIBUTES = ("pk", "sk")
# Five minutes past every hour (UTC): the hourly window (SLUICE_MONITOR_WINDOW_S's default)
# closed, and every container's last flush of it written.
MONITOR_SCHEDULE = "cron(5 * * * ? *)"


class MonitorSchedule:
    """The function ("Monitor"), and the schedule and its role, built into `scope`."""

    def __init__(
        self,
        scope: Construct,
        *,
        function_name: str,
        platform: FunctionPlatform,
        layers: Sequence[PythonLayer],
        reserved_concurrency: int | None,
        table: dynamodb.ITableV2,
    ) -> None:
        self.function = fn = SluiceFunction(
            scope,
            "Monitor",
            function_name=function_name,
            handler="sluice.handlers.monitor.handler",
            description="Checks every monitored deployment's closed window; EMF drift, alerts and quality",
            platform=platform,
            layers=layers,
            memory_mb=1024,
            timeout=Duration.minutes(5),
            invoked_async=True,
            reserved_concurrency=reserved_concurrency,
        )
        role = fn.role
        grant_registry(role, table, actions=READ)
        role.add_to_principal_policy(
            iam.PolicyStatement(
                actions=["dynamodb:Scan"],
                resources=[table.table_arn],
                conditions={
                    "StringEquals": {"dynamodb:Select": "SPECIFIC_ATTRIBUTES"},
                    "ForAllValues:StringEquals": {"dynamodb:Attributes": list(MONITOR_SCAN_ATTRIBUTES)},
                },
            )
        )
        self.schedule = self._schedule(scope, function_name, fn)

    @staticmethod
    def _schedule(scope: Construct, name: str, fn: SluiceFunction) -> scheduler.CfnSchedule:
        """As the rollout controller's: EventBridge Scheduler invokes the function
        asynchronously (a failed check lands in its dead-letter queue after Lambda's retries),
        assuming a role that may invoke that function alone. The input carries the time the
        run was scheduled for, so a late or repeated delivery checks the same window."""
        role = iam.Role(
            scope,
            "MonitorSchedulerRole",
            description="EventBridge Scheduler invokes the sluice monitoring check",
            assumed_by=scheduler_principal(scope),
        )
        role.add_to_principal_policy(
            iam.PolicyStatement(actions=["lambda:InvokeFunction"], resources=[fn.invocable.function_arn])
        )
        return scheduler.CfnSchedule(
            scope,
            "MonitorSchedule",
            name=name,
            description="Checks the monitoring window that closed, every hour",
            schedule_expression=MONITOR_SCHEDULE,
            schedule_expression_timezone="UTC",
            flexible_time_window=scheduler.CfnSchedule.FlexibleTimeWindowProperty(mode="OFF"),
            state="ENABLED",
            target=scheduler.CfnSchedule.TargetProperty(
                arn=fn.invocable.function_arn,
                role_arn=role.role_arn,
                input='{"time": "<aws.scheduler.scheduled-time>"}',
                retry_policy=scheduler.CfnSchedule.RetryPolicyProperty(
                    maximum_retry_attempts=2, maximum_event_age_in_seconds=900
                ),
            ),
        )
