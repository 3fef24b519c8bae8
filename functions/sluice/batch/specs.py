"""Job specifications: a batch job described by what to score, not by the id of a job that
already exists. The batch state machine accepts one as its input (and creates the job); a
schedule keeps one and starts it on every run, with the input named by a template of the
scheduled time.

Input templates: `{date}` (2026-11-26), `{hour}` (00-23), `{minute}`, `{year}`, `{month}`,
`{day}`, `{time}` (HHMM) and `{timestamp}` (2026-11-26T02:00:00+01:00), all in the
schedule's time zone. Anything else in braces is refused, naming the field.
"""

from __future__ import annotations

import string
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sluice.domain import check_name
from sluice.domain.errors import BadRequest
from sluice.domain.jobs import CatalogTarget, PublishTarget, check_format, check_key_columns
from sluice.domain.values import parse_time as parse_time_value

PLACEHOLDERS = ("date", "hour", "minute", "year", "month", "day", "time", "timestamp")
SPEC_FIELDS = frozenset(
    {
        "tenant",
        "deployment",
        "input_uri",
        "format",
        "output_format",
        "key_columns",
        "schedule",
        "scheduled_time",
        "timezone",
        "catalog",
        "publish",
        "queued_behind",  # set by the state machine while a queued run waits; ignored
    }
)


def check_template(template: str, *, field: str = "input_uri") -> str:
    """Refuse a template whose placeholders are not all known (or that does not parse)."""
    if not isinstance(template, str) or not template:
        raise BadRequest(f"{field} must be a non-empty string", field=field)
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as exc:
        raise BadRequest(f"{field} is not a valid template: {exc}", field=field) from None
    for _, name, spec, conversion in parsed:
        if name is not None and (name not in PLACEHOLDERS or spec or conversion):
            raise BadRequest(
                f"{field} may only use the placeholders {', '.join('{' + p + '}' for p in PLACEHOLDERS)}"
                f"; not {{{name}}}",
                field=field,
            )
    return template


def zone(name: str, *, field: str = "timezone") -> Any:
    """The time zone called `name` (IANA, e.g. `Europe/Paris`), or BadRequest naming the field."""
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    if not isinstance(name, str) or not name or name.startswith("/") or ".." in name:
        raise BadRequest(f"{field} must be an IANA time zone such as UTC or Europe/Paris", field=field)
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise BadRequest(f"{field} {name!r} is not a known IANA time zone", field=field) from None


def render(template: str, when: datetime, tz: str = "UTC") -> str:
    """`template` with the placeholders filled in from `when` in time zone `tz`."""
    check_template(template)
    local = when.astimezone(zone(tz))
    values = {
        "date": local.strftime("%Y-%m-%d"),
        "hour": local.strftime("%H"),
        "minute": local.strftime("%M"),
        "year": local.strftime("%Y"),
        "month": local.strftime("%m"),
        "day": local.strftime("%d"),
        "time": local.strftime("%H%M"),
        "timestamp": local.isoformat(timespec="seconds"),
    }
    return template.format_map(values)


def parse_time(value: Any, *, field: str = "scheduled_time") -> datetime:
    """A time as every door reads one (`sluice.domain.values.parse_time`): RFC 3339, as
    EventBridge Scheduler writes `<aws.scheduler.scheduled-time>`, or epoch seconds."""
    return datetime.fromtimestamp(parse_time_value(value, field=field), UTC)


@dataclass(frozen=True, slots=True)
class ExecutionSpec:
    """The job specification an execution is started with (see docs/batch.md)."""

    tenant: str
    deployment: str
    input_uri: str
    format: str | None = None
    output_format: str | None = None
    key_columns: tuple[str, ...] = ()
    schedule: str | None = None
    scheduled_for: float | None = None
    catalog: CatalogTarget | None = None
    publish: PublishTarget | None = None

    @classmethod
    def parse(cls, data: Any) -> ExecutionSpec:
        if not isinstance(data, dict):
            raise BadRequest("the execution input must be a JSON object", field="input")
        unknown = sorted(set(data) - SPEC_FIELDS)
        if unknown:
            raise BadRequest(f"unknown field {unknown[0]!r} in the job specification", field=unknown[0])
        for name in ("tenant", "deployment", "input_uri"):
            if not isinstance(data.get(name), str) or not data[name]:
                raise BadRequest(f"{name} is required (a string)", field=name)
        tenant = check_name(data["tenant"], field="tenant")
        deployment = check_name(data["deployment"], field="deployment")
        for name in ("format", "output_format"):
            if data.get(name) is not None:
                check_format(data[name], field=name)
        keys = data.get("key_columns") or ()
        if isinstance(keys, str):
            keys = keys.split(",")
        schedule = data.get("schedule")
        if schedule is not None:
            check_name(schedule, field="schedule")
        input_uri = data["input_uri"]
        scheduled_for = None
        if data.get("scheduled_time") is not None:
            when = parse_time(data["scheduled_time"])
            input_uri = render(input_uri, when, data.get("timezone") or "UTC")
            scheduled_for = when.timestamp()
        elif any(name is not None for _, name, _, _ in _parse(input_uri)):
            raise BadRequest("input_uri has placeholders but no scheduled_time is given", field="input_uri")
        return cls(
            tenant=tenant,
            deployment=deployment,
            input_uri=input_uri,
            format=data.get("format"),
            output_format=data.get("output_format"),
            key_columns=check_key_columns(keys, stored=schedule is not None),  # a schedule's run: its stored columns
            schedule=schedule,
            scheduled_for=scheduled_for,
            catalog=CatalogTarget.parse(data.get("catalog")),
            publish=PublishTarget.parse(data.get("publish")),
        )


def _parse(template: str) -> list[tuple[Any, ...]]:
    try:
        return list(string.Formatter().parse(template))
    except ValueError as exc:
        raise BadRequest(f"input_uri is not a valid template: {exc}", field="input_uri") from None
