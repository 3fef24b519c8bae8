"""Model monitoring's windows, closed on AWS: an EventBridge Scheduler schedule invokes one
function (sluice.handlers.monitor) five minutes past every hour, the default window's end
plus time for the containers' flushes (every 30 s); it checks the window that closed for every
deployment with a baseline and writes EMF metrics (`MonitorAlerts`, `MonitorDrift`, quality)
that the observability stack's alarms watch.

The function reads the tenant partitions' items (deployments, baselines, profiles, labelled
counts) and a scan of the table that may read each item's keys alone (which deployments have
a baseline). It writes nothing to the registry; it writes each window's result as JSON under
`monitor/` in the batch bucket (encrypted as the bucket is), and calls nothing else.
"""

from __future__ import annotations

from aws_cdk import aws_s3 as s3
from constructs import Construct

from infra.constructs.grants import grant_objects, invoke_on_schedule
from infra.constructs.registry_access import READ, RegistryWorker
from infra.naming import MONITOR_PREFIX

# What the scan of `monitored` may read: the keys of each item.
MONITOR_SCAN_ATTRIBUTES = ("pk", "sk")
# Five minutes past every hour (UTC): the hourly window (SLUICE_MONITOR_WINDOW_S's default)
# closed, and every container's last flush of it written.
MONITOR_SCHEDULE = "cron(5 * * * ? *)"


class MonitorSchedule:
    """The function ("Monitor"), and the schedule and its role, built into `scope`."""

    def __init__(self, scope: Construct, worker: RegistryWorker, *, bucket: s3.IBucket) -> None:
        self.function = fn = worker.function(
            scope, "Monitor", handler="sluice.handlers.monitor.handler",
            description="Checks every monitored deployment's closed window; EMF drift, alerts and quality",
            memory_mb=1024, timeout_s=300, actions=READ, scan=MONITOR_SCAN_ATTRIBUTES,
        )  # fmt: skip
        fn.function.add_environment("SLUICE_BATCH_BUCKET", bucket.bucket_name)
        grant_objects(fn, bucket, prefix=MONITOR_PREFIX, write=True, purpose="each monitoring window's result, one object per deployment and window")
        # The input carries the time the run was scheduled for, so a late or repeated delivery
        # checks the same window.
        self.schedule = invoke_on_schedule(
            scope, "Monitor", fn.invocable, name=worker.function_name, who="the sluice monitoring check",
            description="Checks the monitoring window that closed, every hour", expression=MONITOR_SCHEDULE,
            timezone="UTC", input='{"time": "<aws.scheduler.scheduled-time>"}', retries=2, max_age_s=900,
        )  # fmt: skip
