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
    from collections.abc import Iterator
    from typing import Unpack

    from sluice.clients import AwsArgs
    from sluice.domain.schedules import Schedule

SCHEDULED_TIME = "<aws.scheduler.scheduled-time>"
_NAME_CHARS = 64
_DIGEST = 24  # hex digits: 96 bits of the (tenant, name) pair


def schedule_name(tenant: str, name: str) -> str:
    """The Scheduler schedule's name, one per (tenant, name) pair: `<tenant>.<name>` cut to
    what fits, then a digest of the pair itself. The readable part is for a person reading the
    group; the digest tells pairs apart, as a name joined by `.` could not where tenant and
    schedule names may hold dots (tenant `acme.prod`'s `nightly` and `acme`'s `prod.nightly`)."""
    digest = hashlib.sha256(f"{tenant}\x1f{name}".encode()).hexdigest()[:_DIGEST]
    return f"{tenant}.{name}"[: _NAME_CHARS - _DIGEST - 1] + "." + digest


def legacy_schedule_name(tenant: str, name: str) -> str:
    """The name an earlier release gave the pair (two pairs could share it): read only to move
    a schedule made then to its own name, never to write."""
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

    def check(self, schedule: Schedule) -> None:
        check_bounds(schedule)

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
        with _refusals():
            try:
                client.create_schedule(**params)
            except client.exceptions.ConflictException:  # this pair's, left by a create that failed later
                client.update_schedule(**params)
            self._retire_legacy(schedule)

    def delete(self, schedule: Schedule) -> None:
        client = self.client
        with _refusals():
            with contextlib.suppress(client.exceptions.ResourceNotFoundException):  # gone already
                client.delete_schedule(Name=schedule_name(schedule.tenant, schedule.name), GroupName=self.group)
            self._retire_legacy(schedule)

    def _retire_legacy(self, schedule: Schedule) -> None:
        """The schedule an earlier release made for this pair under its old name, deleted, so it
        neither fires beside the new one nor outlives the sluice schedule: only where its target
        names this tenant and schedule (another pair may hold that name)."""
        client, name = self.client, legacy_schedule_name(schedule.tenant, schedule.name)
        try:
            found = client.get_schedule(Name=name, GroupName=self.group)
        except client.exceptions.ResourceNotFoundException:
            return
        try:
            spec = json.loads(found["Target"]["Input"])
        except (KeyError, TypeError, ValueError):
            return
        if isinstance(spec, dict) and spec.get("tenant") == schedule.tenant and spec.get("schedule") == schedule.name:
            with contextlib.suppress(client.exceptions.ResourceNotFoundException):
                client.delete_schedule(Name=name, GroupName=self.group)


@contextlib.contextmanager
def _refusals() -> Iterator[None]:
    """Scheduler's refusals as the API's: what it will not take is a 400 (the expression, the
    time zone or the target's input past its bounds, which `check_bounds` names first), its
    throttling a 503."""
    from botocore.exceptions import ClientError

    from sluice.domain.errors import BadRequest, Unavailable

    try:
        yield
    except ClientError as exc:
        error = exc.response.get("Error", {})
        code, message = error.get("Code", ""), error.get("Message", "")
        if code == "ValidationException":
            raise BadRequest(f"EventBridge Scheduler refused the schedule: {message}", field="expression") from exc
        if code in ("ThrottlingException", "ServiceQuotaExceededException", "InternalServerException"):
            raise Unavailable(f"EventBridge Scheduler could not take the schedule now ({code}): try again") from exc
        raise


def check_bounds(schedule: Schedule) -> None:
    """What Scheduler cannot express (`aws_expression`) or its model bounds (the expression 256
    characters, the time zone 50, the target's input 8,192), refused naming the field."""
    from sluice.domain.errors import BadRequest

    expression = aws_expression(schedule.expression)
    if len(expression) > 256:
        raise BadRequest(f"expression: on AWS it is {len(expression)} characters written as EventBridge writes it ({expression}); at most 256", field="expression")
    if len(schedule.timezone) > 50:
        raise BadRequest("timezone: at most 50 characters on AWS", field="timezone")
    size = len(json.dumps(target_input(schedule)))
    if size > 8192:
        raise BadRequest(f"input_uri: the schedule's run specification is {size} characters; EventBridge takes at most 8,192", field="input_uri")
