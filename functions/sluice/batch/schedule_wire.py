"""Batch schedules on the wire: what `POST /api/v1/batch-schedules` takes and the schedule
routes return. Apart from the jobs' models (`sluice.batch.wire`), whose part they reuse: what
runs a job (`sluice batch run`, a Score task) builds none of these."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from pydantic import ConfigDict, Field, field_validator

from sluice.batch.wire import CatalogIn, KeyColumns, PublishIn
from sluice.types.base import WireModel

if TYPE_CHECKING:
    from sluice.domain.locations import Roots

_FROM_JOB = ConfigDict(from_attributes=True)


def _checked(check: Any, value: Any) -> Any:
    """Run a domain check; its BadRequest becomes the ValueError pydantic reports as a 422
    naming the field."""
    from sluice.domain.errors import BadRequest

    try:
        return check(value)
    except BadRequest as exc:
        raise ValueError(exc.message) from None


class ScheduleCreate(WireModel):
    name: str = Field(description="The schedule's name, unique in your tenant.")
    deployment: str = Field(description="The deployment that scores every run.")
    input_uri: str = Field(
        description="Each run's input, a template of the scheduled time: `{date}`, `{hour}`, "
        "`{minute}`, `{year}`, `{month}`, `{day}`, `{time}`, `{timestamp}`; in your inbox."
    )
    expression: str = Field(
        description="`cron(<minute> <hour> <day of month> <month> <day of week>)` or "
        "`rate(<n> minutes|hours|days)`."
    )
    timezone: str = Field("UTC", description="The IANA time zone of the expression and the template.")
    overlap: Literal["skip", "queue"] = Field(
        "skip", description="When a run is due while the previous one still runs: skip it, or queue one."
    )
    format: Literal["parquet", "csv", "jsonl"] | None = None
    output_format: Literal["parquet", "csv", "jsonl"] | None = None
    key_columns: KeyColumns = Field(default_factory=list)
    paused: bool = Field(False, description="Create it paused.")
    catalog: CatalogIn | None = Field(None, description="Publish each successful run as a partition of this Glue table.")
    publish: PublishIn | None = Field(None, description="Publish each successful run's answers into this table of precomputed answers.")

    model_config = {
        "json_schema_extra": {
            "examples": [
                {
                    "name": "nightly",
                    "deployment": "churn",
                    "input_uri": "s3://sluice-batch-123456789012-eu-west-1/inbox/acme/churn/dt={date}/customers.parquet",
                    "expression": "cron(0 2 * * *)",
                    "timezone": "Europe/Paris",
                    "overlap": "skip",
                }
            ]
        },
        "extra": "forbid",
    }

    @field_validator("expression")
    @classmethod
    def _expression(cls, value: str) -> str:
        from sluice.domain.schedules import normalize_expression

        return _checked(normalize_expression, value)

    @field_validator("timezone")
    @classmethod
    def _timezone(cls, value: str) -> str:
        from sluice.batch.specs import zone

        _checked(zone, value)
        return value

    @field_validator("input_uri")
    @classmethod
    def _template(cls, value: str) -> str:
        from sluice.batch.specs import check_template

        return _checked(check_template, value)


class ScheduleOut(WireModel):
    model_config = _FROM_JOB

    name: str
    deployment: str
    input_uri: str
    expression: str
    timezone: str
    overlap: str
    format: str | None
    output_format: str | None
    key_columns: list[str]
    state: Literal["ENABLED", "PAUSED"]
    created_at: float
    catalog: CatalogIn | None = None
    publish: PublishIn | None = None
    last_fire: float | None = Field(description="The latest scheduled time run or skipped.")
    skipped: int = Field(description="Runs skipped because the previous one was still going.")
    refused: int = Field(
        0,
        description="Scheduled times in a row whose run was refused since a run was last made (its "
        "deployment deleted, its input outside the inbox); a refused run makes no job. 0: none.",
    )
    last_error: str | None = Field(None, description="Why the latest of them was refused; none once a run is made again.")
    last_refused_at: float | None = Field(None, description="The latest scheduled time whose run was refused.")
    invalid: str | None = Field(
        None,
        description="Why the schedule never runs, or none: its expression was stored before a bound "
        "now checked when a schedule is made (a rate longer than 30 years). Delete it and make it again.",
    )


class ScheduleRun(WireModel):
    model_config = _FROM_JOB

    job_id: str = Field(validation_alias="id")
    scheduled_for: float | None
    status: str
    rows_in: int
    rows_out: int
    rows_failed: int
    error: str | None


class ScheduleDetail(ScheduleOut):
    next_run_at: float | None = Field(None, description="The next scheduled time (none while paused).")
    runs: list[ScheduleRun] = Field(default_factory=list, description="Recent runs, newest first.")


def schedule_out(schedule: Any, roots: Roots | None = None) -> dict[str, Any]:
    out = ScheduleOut.model_validate(schedule).model_dump(mode="json")
    if roots is not None:
        out["input_uri"] = roots.shown(schedule.input_uri)
        out["last_error"] = roots.scrub(schedule.last_error)
    return out


def schedule_detail(view: Any, roots: Roots | None = None) -> dict[str, Any]:
    base = ScheduleOut.model_validate(view.schedule).model_dump()
    runs = [ScheduleRun.model_validate(j) for j in view.runs]
    if roots is not None:
        base["input_uri"] = roots.shown(view.schedule.input_uri)
        base["last_error"] = roots.scrub(view.schedule.last_error)
        runs = [run.model_copy(update={"error": roots.scrub(run.error)}) for run in runs]
    return ScheduleDetail(**base, next_run_at=view.next_run_at, runs=runs).model_dump(mode="json")
