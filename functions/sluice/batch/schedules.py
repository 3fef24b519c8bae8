"""Batch schedules as callers see them (create, list, show, pause, resume, delete), and the
local scheduler that runs them.

Every call is scoped to the principal's tenant; another tenant's schedule is NotFound. A
schedule made through the API must name an input in the tenant's inbox (checked on a sample
rendering of its template now, and on each run); the CLI acts as the operator of its machine
and, locally, may name any path.

Where the time is kept:
- on AWS (`SLUICE_SCHEDULE_GROUP` set), each schedule is an EventBridge Scheduler schedule that
  starts the batch state machine with a job specification (sluice.batch.eventbridge); the
  state machine's CreateJob applies `overlap` and creates the run's job;
- locally, `sluice serve` runs `LocalScheduler`, which calls `run_due` every few seconds.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from sluice.batch.refused_runs import refuse_run, run_made
from sluice.batch.service import input_format
from sluice.batch.specs import check_template, render, zone
from sluice.batch.uris import as_uri, file_url
from sluice.domain import Principal, check_name, now
from sluice.domain.errors import BadRequest, Conflict, NotFound, SluiceError
from sluice.domain.jobs import (
    CatalogTarget,
    PublishTarget,
    check_format,
    check_key_columns,
    derived_job_id,
    require_publisher,
)
from sluice.domain.schedules import (
    Schedule,
    check_fires,
    check_overlap,
    latest_fire,
    next_fire,
    normalize_expression,
)
from sluice.polling import Poller

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from sluice.batch.service import BatchService
    from sluice.domain.jobs import BatchJob
    from sluice.registry import Registry

log = logging.getLogger(__name__)
RECENT_RUNS = 20


class ScheduleTimer(Protocol):
    """Who keeps a schedule's time, where it is not this process (EventBridge Scheduler)."""

    def check(self, schedule: Schedule) -> None: ...  # refuses, naming the field, what it cannot keep
    def put(self, schedule: Schedule) -> None: ...
    def delete(self, schedule: Schedule) -> None: ...


@dataclass(frozen=True, slots=True)
class ScheduleView:
    schedule: Schedule
    runs: list[BatchJob]
    next_run_at: float | None


class ScheduleService:
    def __init__(
        self,
        registry: Registry,
        batch: BatchService,
        timer: ScheduleTimer | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.registry = registry
        self.batch = batch
        self.timer = timer
        self.clock = clock

    # What callers do ---------------------------------------------------------------------
    def create(
        self,
        principal: Principal,
        *,
        name: str,
        deployment: str,
        input_uri: str,
        expression: str,
        timezone: str = "UTC",
        overlap: str = "skip",
        format: str | None = None,
        output_format: str | None = None,
        key_columns: Sequence[str] = (),
        state: str = "ENABLED",
        operator: bool = False,
        catalog: dict[str, str] | None = None,
        publish: dict[str, Any] | None = None,
    ) -> Schedule:
        principal.require("predict")
        if publish is not None:
            require_publisher(principal)
        check_name(name, field="name")
        check_name(deployment, field="deployment")
        expression = normalize_expression(expression)
        zone(timezone)
        check_fires(expression, timezone, time.time())
        check_overlap(overlap)
        if state not in ("ENABLED", "PAUSED"):
            raise BadRequest("state must be ENABLED or PAUSED", field="state")
        for field, value in (("format", format), ("output_format", output_format)):
            if value is not None:
                check_format(value, field=field)
        check_template(input_uri)
        keys = check_key_columns(key_columns)
        target = CatalogTarget.parse(catalog)
        published = PublishTarget.parse(publish)
        if target is not None and (output_format or "parquet") != "parquet":
            raise BadRequest("a schedule published to the catalog writes parquet (output_format)", field="output_format")
        if operator and self.timer is None:
            input_uri = _absolute(input_uri)
        sample = render(input_uri, datetime.now(UTC), timezone)
        if not operator or self.timer is not None:  # on AWS the state machine confines every run
            sample = self.batch.input_location(principal.tenant, sample).uri
        input_format(as_uri(sample) if operator and self.timer is None else sample, format)  # what every run would be refused for
        self.registry.get_deployment(principal.tenant, deployment)  # NotFound across tenants
        schedule = Schedule(
            tenant=principal.tenant, name=name, deployment=deployment, input_uri=input_uri,
            expression=expression, timezone=timezone, overlap=overlap,  # type: ignore[arg-type]
            format=format, output_format=output_format,
            key_columns=keys,
            state=state, operator=operator, created_at=self.clock(),  # type: ignore[arg-type]
            created_by=principal.subject, catalog=target, publish=published, made_at=now(),
        )  # fmt: skip
        if self.timer is not None:
            self.timer.check(schedule)  # what it cannot take, refused before anything is written
        self.registry.create_schedule(schedule)
        if self.timer is not None:
            try:
                self.timer.put(schedule)
            except Exception:
                self.registry.delete_schedule(schedule.tenant, schedule.name)
                raise
        return schedule

    def list(self, principal: Principal) -> list[Schedule]:
        principal.require("predict")
        return self.registry.list_schedules(principal.tenant)

    def show(self, principal: Principal, name: str) -> ScheduleView:
        principal.require("predict")
        schedule = self.registry.get_schedule(principal.tenant, name)
        after = max(self.clock(), schedule.last_fire or 0.0)
        return ScheduleView(schedule, self.runs(schedule), None if schedule.paused else next_fire(schedule, after))

    def pause(self, principal: Principal, name: str) -> Schedule:
        return self._set_state(principal, name, "PAUSED")

    def resume(self, principal: Principal, name: str) -> Schedule:
        return self._set_state(principal, name, "ENABLED")

    def delete(self, principal: Principal, name: str) -> None:
        principal.require("predict")
        schedule = self.registry.get_schedule(principal.tenant, name)
        if self.timer is not None:
            self.timer.delete(schedule)
        self.registry.delete_schedule(principal.tenant, name)

    def runs(self, schedule: Schedule, limit: int = RECENT_RUNS) -> list[BatchJob]:
        """The schedule's recent runs, newest first (`Schedule.ran`); a run whose process is
        gone reads as FAILED, so it never holds the next run back."""
        jobs = self.registry.list_jobs(schedule.tenant, limit=limit, schedule=schedule.name)
        return [self.batch.settled(j) for j in jobs if schedule.ran(j)]

    # Running (locally) --------------------------------------------------------------------
    def run_due(self, moment: float | None = None, schedules: Sequence[Schedule] | None = None) -> list[BatchJob]:
        """Start the run of every enabled schedule that is due at `moment` (now by default):
        one job per scheduled time, whose id derives from the schedule and that time, so two
        schedulers seeing the same time start it once. A run refused (`start_run`) makes no
        job and is not among those returned; a fault that may pass leaves its time due, for
        the next call."""
        moment = self.clock() if moment is None else moment
        if schedules is None:
            every = getattr(self.registry, "all_schedules", None)
            if every is None:
                return []  # on AWS, EventBridge Scheduler keeps the time
            schedules = every()
        started = []
        for schedule in schedules:
            if schedule.paused:
                continue
            try:
                job = self._run_if_due(schedule, moment)
            except SluiceError as exc:  # a fault that may pass (5xx): the next poll tries this time again
                log.warning("schedule run not started", extra={"tenant": schedule.tenant, "schedule": schedule.name, "error": exc.message})
                continue
            except Exception:  # one schedule's fault never stops the others' (every tenant's)
                log.exception("schedule run not started", extra={"schedule": schedule.name, "tenant": schedule.tenant})
                continue
            if job is not None:
                started.append(job)
        return started

    def _run_if_due(self, schedule: Schedule, moment: float) -> BatchJob | None:
        fire = latest_fire(schedule, moment)
        if fire is None:
            return None
        # This time's own run, made by a poll that failed after it (or by another scheduler),
        # is not one going before it: `start_run` finds it.
        going = [j for j in self.runs(schedule, limit=5) if not j.terminal and j.scheduled_for != fire]
        if going:
            if schedule.overlap == "queue":
                return None  # not handled: it starts once the run going ends
            self.registry.update_schedule(
                schedule.tenant, schedule.name, last_fire=fire, skipped=schedule.skipped + 1, last_skipped_at=fire
            )
            log.info("schedule run skipped", extra={"tenant": schedule.tenant, "schedule": schedule.name, "running": going[0].id})
            return None
        job = self.start_run(schedule, fire)
        self.registry.update_schedule(schedule.tenant, schedule.name, last_fire=fire)
        return job

    def start_run(self, schedule: Schedule, fire: float) -> BatchJob | None:
        """Start the job of one scheduled time (once: the job id derives from the time). A run
        refused (its deployment deleted, its input outside the inbox: a 4xx) makes no job: it
        is counted on the schedule, as CreateJob counts it on AWS (`refused_runs.refuse_run`),
        and None is returned; the time is handled. A run made, whoever made it, ends a row of
        refusals (`refused_runs.run_made`). A fault that may pass (5xx) while making the run
        raises, and the time stays due."""
        when = datetime.fromtimestamp(fire, UTC)
        job_id = derived_job_id("sc", schedule.tenant, schedule.name, when.isoformat())
        job: BatchJob | None
        try:
            job = self.registry.get_job(schedule.tenant, job_id)
        except NotFound:
            job = self._submit(schedule, when, fire, job_id)
        if job is not None:
            run_made(self.registry, schedule)
        return job

    def _submit(self, schedule: Schedule, when: datetime, fire: float, job_id: str) -> BatchJob | None:
        # A publishing schedule was made with the admin scope publishing needs (`require_publisher`).
        principal = Principal(schedule.tenant, frozenset({"predict", "admin"} if schedule.publish else {"predict"}), f"schedule:{schedule.name}")
        try:
            return self.batch.submit(
                principal, deployment=schedule.deployment,
                input_uri=render(schedule.input_uri, when, schedule.timezone),
                format=schedule.format, output_format=schedule.output_format,
                key_columns=schedule.key_columns, operator=schedule.operator, source="schedule",
                job_id=job_id, schedule=schedule.name, scheduled_for=fire,
                catalog=schedule.catalog, publish=schedule.publish,
            )  # fmt: skip
        except Conflict:  # another scheduler made it meanwhile
            return self.registry.get_job(schedule.tenant, job_id)
        except SluiceError as exc:
            if exc.status >= 500:
                raise
            refuse_run(self.registry, schedule, scheduled_for=fire, error=exc.message)
            return None

    # Helpers -------------------------------------------------------------------------------
    def _set_state(self, principal: Principal, name: str, state: str) -> Schedule:
        principal.require("predict")
        current = self.registry.get_schedule(principal.tenant, name)
        if state == "ENABLED" and current.publish is not None:
            require_publisher(principal)  # its runs would publish again, as if it were made anew
        fields: dict[str, Any] = {"state": state, "updated_at": now()}
        if state == "ENABLED" and current.paused:
            fields["last_fire"] = self.clock()  # a resumed schedule does not run what it missed
        schedule = self.registry.update_schedule(principal.tenant, name, **fields)
        if self.timer is not None:
            self.timer.put(schedule)
        return schedule


def _absolute(template: str) -> str:
    """A local path template as an absolute file:// URI (placeholders kept)."""
    if template[:5].lower() == "s3://":
        return "s3://" + template[5:]
    url = file_url(template)  # read as a job's input is (`as_uri`): `FILE:///x` and `file:/x` name /x
    if url is not None:
        return url
    # Not Path.as_uri: it would quote the braces (and `=`), and file:// URIs are read unquoted.
    return "file://" + str(Path(template).expanduser().resolve())


class LocalScheduler(Poller):
    """`sluice serve`'s thread: every `interval_s`, start the runs that are due."""

    thread_name = "sluice-schedules"
    what = "schedule scan"

    def __init__(self, service: ScheduleService, *, interval_s: float) -> None:
        super().__init__(interval_s=interval_s)
        self.service = service

    def look(self) -> object:
        return self.service.run_due()
