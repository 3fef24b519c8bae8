"""Schedules on AWS: each sluice schedule is an EventBridge Scheduler schedule in the stack's
schedule group, whose target starts the batch state machine with a job specification.

The target's input is the specification (sluice.batch.specs) with `scheduled_time` set to
`<aws.scheduler.scheduled-time>`, which Scheduler fills in on every run, so CreateJob fills the
input template with the time the run was due, not the time it started. The role Scheduler
assumes is the stack's: it may start the batch state machine and nothing else.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from typing import TYPE_CHECKING, Any

from sluice.clients import lazy_client
from sluice.domain.schedules import aws_expression

if TYPE_CHECKING:
    from typing import Unpack

    from sluice.clients import AwsArgs
    from sluice.domain.schedules import Schedule

SCHEDULED_TIME = "<aws.scheduler.scheduled-time>"
_NAME_CHARS = 64


def schedule_name(tenant: str, name: str) -> str:
    """The Scheduler schedule's name: `<tenant>.<name>` where that fits its 64 characters,
    else a digest (its description names the schedule either way)."""
    readable = f"{tenant}.{name}"
    if len(readable) <= _NAME_CHARS:
        return readable
    return f"{tenant[:20]}.{hashlib.sha256(readable.encode()).hexdigest()[:40]}"


def target_input(schedule: Schedule) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "tenant": schedule.tenant,
        "deployment": schedule.deployment,
        "input_uri": schedule.input_uri,
        "key_columns": list(schedule.key_columns),
        "schedule": schedule.name,
        "scheduled_time": SCHEDULED_TIME,
        "timezone": schedule.timezone,
    }
    if schedule.format:
        spec["format"] = schedule.format
    if schedule.output_format:
        spec["output_format"] = schedule.output_format
    if schedule.catalog is not None:
        spec["catalog"] = schedule.catalog.to_dict()
    if schedule.publish is not None:
        spec["publish"] = schedule.publish.to_dict()
    return spec


class EventBridgeSchedules:
    def __init__(self, *, group: str, role_arn: str, state_machine_arn: str, **aws: Unpack[AwsArgs]) -> None:
        self.group = group
        self.role_arn = role_arn
        self.state_machine_arn = state_machine_arn
        self._scheduler = lazy_client("scheduler", aws)

    @property
    def client(self) -> Any:
        return self._scheduler()

    def put(self, schedule: Schedule) -> None:
        """Create the schedule, or bring an existing one in line (pause, resume)."""
        params = {
            "Name": schedule_name(schedule.tenant, schedule.name),
            "GroupName": self.group,
            "Description": f"sluice batch schedule '{schedule.name}' of tenant '{schedule.tenant}'",
            "ScheduleExpression": aws_expression(schedule.expression),
            "ScheduleExpressionTimezone": schedule.timezone,
            "FlexibleTimeWindow": {"Mode": "OFF"},
            "State": "DISABLED" if schedule.paused else "ENABLED",
            "Target": {
                "Arn": self.state_machine_arn,
                "RoleArn": self.role_arn,
                "Input": json.dumps(target_input(schedule)),
                "RetryPolicy": {"MaximumEventAgeInSeconds": 3600, "MaximumRetryAttempts": 10},
            },
        }
        client = self.client
        try:
            client.create_schedule(**params)
        except client.exceptions.ConflictException:
            client.update_schedule(**params)

    def delete(self, schedule: Schedule) -> None:
        client = self.client
        with contextlib.suppress(client.exceptions.ResourceNotFoundException):  # gone already
            client.delete_schedule(Name=schedule_name(schedule.tenant, schedule.name), GroupName=self.group)
