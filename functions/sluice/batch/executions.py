"""Jobs that Step Functions executions start with a job specification (a scheduled run on
AWS, or an execution started by hand): the job is created by the first call and found by
every later one; a scheduled run may be skipped or held back by its schedule's `overlap`, and one refused
makes no job: it is counted on its schedule (`refused_runs`) and the execution fails at SpecRejected.
And the end of every execution of the batch state machine, as EventBridge reports it: a job
the execution left unfinished is FAILED, saying why (`record_execution_end`)."""

from __future__ import annotations

import json
from contextlib import suppress
from typing import TYPE_CHECKING, Any

from sluice.batch.refused_runs import refuse_run, run_made
from sluice.batch.specs import ExecutionSpec
from sluice.domain import Principal, now
from sluice.domain.errors import Conflict, NotFound, SluiceError
from sluice.domain.jobs import derived_job_id
from sluice.domain.liveness import execution_ended

if TYPE_CHECKING:
    from sluice.batch.service import BatchService
    from sluice.domain.jobs import BatchJob
    from sluice.domain.schedules import Schedule


class RunSkipped(Exception):
    """A scheduled run that does not happen (CreateJob says so; the execution succeeds)."""

    def __init__(self, schedule: str, reason: str, *, running: str | None = None) -> None:
        super().__init__(reason)
        self.schedule, self.reason, self.running = schedule, reason, running


class RunQueued(Exception):
    """A scheduled run that waits for the run still going (`overlap: queue`)."""

    def __init__(self, schedule: str, running: str) -> None:
        super().__init__(f"waiting for run {running}")
        self.schedule, self.running = schedule, running


def job_for_execution(batch: BatchService, spec: dict[str, Any], *, execution: str) -> BatchJob:
    """The job an execution started with a job specification runs: created by the first
    call, found by every later one (the id derives from the execution's ARN, that is the
    state machine and the execution's name, which Step Functions keeps unique). The spec
    is held to what an API caller of that tenant may do: a deployment of the tenant, an
    input in the tenant's inbox, results in the tenant's outbox."""
    request = ExecutionSpec.parse(spec)
    job_id = execution_job_id(request, execution)
    try:
        job = batch.registry.get_job(request.tenant, job_id)
    except NotFound:
        pass
    else:  # made by an earlier try of this execution (CreateJob retried), or another delivery of its time
        _not_another_delivery(request, job, execution)
        if request.schedule is not None:
            with suppress(SluiceError):  # deleted meanwhile: the job stands
                run_made(batch.registry, batch.registry.get_schedule(request.tenant, request.schedule))
        return job
    schedule = None if request.schedule is None else _check_overlap(batch, request.tenant, request.schedule, request.scheduled_for)
    # Only IAM principals start executions (an operator's workflow, or the scheduler for a
    # schedule an admin key made): a specification may publish (`require_publisher`).
    principal = Principal(request.tenant, frozenset({"predict", "admin"} if request.publish else {"predict"}), "execution")
    try:
        job = batch.submit(
            principal, deployment=request.deployment, input_uri=request.input_uri,
            format=request.format, output_format=request.output_format,
            key_columns=request.key_columns, source="schedule" if request.schedule else "execution",
            job_id=job_id, start=False, execution=execution, schedule=request.schedule,
            scheduled_for=request.scheduled_for, catalog=request.catalog, publish=request.publish,
        )  # fmt: skip
    except Conflict:
        job = batch.registry.get_job(request.tenant, job_id)  # the same execution, retried, or another delivery of its time
        _not_another_delivery(request, job, execution)
    except SluiceError as exc:
        if schedule is not None and exc.status < 500:  # counted on the schedule, as locally; no job, and the execution still fails
            scheduled_for = request.scheduled_for if request.scheduled_for is not None else now()
            refuse_run(batch.registry, schedule, scheduled_for=scheduled_for, error=exc.message)
        raise
    if schedule is not None:
        run_made(batch.registry, schedule)
    return job


def execution_job_id(request: ExecutionSpec, execution: str) -> str:
    """The id of the job an execution runs: for a scheduled time, the schedule's and the time's
    (as the local scheduler's), so that two deliveries of one time make one job, whichever asks
    first (the registry's create is conditional); else the execution's."""
    if request.schedule is not None and request.scheduled_for is not None:
        from datetime import UTC, datetime

        return derived_job_id("sc", request.tenant, request.schedule, datetime.fromtimestamp(request.scheduled_for, UTC).isoformat())
    return derived_job_id("ex", execution)


def _not_another_delivery(request: ExecutionSpec, job: BatchJob, execution: str) -> None:
    """A scheduled time's job made by another execution (Scheduler delivered the time again):
    this one is skipped, naming it."""
    if request.schedule is not None and job.execution and job.execution != execution:
        raise RunSkipped(request.schedule, f"run {job.id} is the schedule's run for this time ({_iso(request.scheduled_for)})", running=job.id)


def _check_overlap(batch: BatchService, tenant: str, name: str, when: float | None) -> Schedule:
    """A scheduled run on AWS (`when`: its scheduled time): skip it (paused, a run still going
    and `overlap: skip`, or a time the schedule has run, or is running, this or a later time
    of) or hold it back (`overlap: queue`) by raising RunSkipped or RunQueued; else the schedule.

    EventBridge Scheduler delivers a time at least once, each delivery an execution of its own,
    and queued executions wake in no set order: a time is run once, and never after a later one
    (whose answers, in a table it publishes to, an older input's would replace)."""
    registry = batch.registry
    schedule = registry.get_schedule(tenant, name)  # NotFound: deleted meanwhile
    if schedule.paused:
        raise RunSkipped(name, "the schedule is paused")
    runs = [j for j in registry.list_jobs(tenant, schedule=name) if schedule.ran(j)]
    if when is not None:
        made = max((j for j in runs if j.scheduled_for is not None and j.scheduled_for >= when), key=lambda j: j.scheduled_for or 0.0, default=None)
        if made is not None:
            if made.scheduled_for == when:  # another delivery of this time
                raise RunSkipped(name, f"run {made.id} is the schedule's run for this time ({_iso(when)})", running=made.id)
            _skip_counted(registry, schedule, when)  # a time not run: counted, once
            raise RunSkipped(name, f"run {made.id} is the schedule's run for a later time ({_iso(made.scheduled_for)})", running=made.id)
    going = next((j for j in runs if not batch.settled(j, ask=True).terminal), None)
    if going is None:
        if when is not None and schedule.overlap == "queue" and (schedule.queued_for or 0.0) > when:
            # A later time waits too: this one folds into it, as locally (each run in turn, the
            # times due during a long run never caught up)
            raise RunSkipped(name, f"a later time ({_iso(schedule.queued_for)}) waits to run: this one ({_iso(when)}) folds into it")
        return schedule
    if schedule.overlap == "queue":
        if when is not None:
            _wait_noted(registry, schedule, when)
        raise RunQueued(name, going.id)
    _skip_counted(registry, schedule, when)
    raise RunSkipped(name, f"run {going.id} is still {going.status}", running=going.id)


def _skip_counted(registry: Any, schedule: Schedule, when: float | None) -> None:
    """A scheduled time skipped, counted once however often it is delivered (EventBridge
    Scheduler delivers at least once; Step Functions retries CreateJob): `last_skipped_at` is
    the time skipped, as the local scheduler keeps it, and the count a conditional write on it,
    as refusals are counted (`refused_runs.refuse_run`). A run started by hand (no time) counts
    each skip."""
    from sluice.domain.errors import StaleRead

    for _ in range(5):
        if when is not None and schedule.last_skipped_at == when:
            return  # counted already: this time, delivered again
        try:
            registry.update_schedule(
                schedule.tenant, schedule.name, skipped=schedule.skipped + 1, last_skipped_at=when if when is not None else now(),
                expect={"last_skipped_at": schedule.last_skipped_at},
            )  # fmt: skip
            return
        except NotFound:  # deleted meanwhile
            return
        except StaleRead:  # another time's skip (or this one's) was counted first: read again
            try:
                schedule = registry.get_schedule(schedule.tenant, schedule.name)
            except NotFound:
                return


def _wait_noted(registry: Any, schedule: Schedule, when: float) -> None:
    """`when` kept as the schedule's latest waiting time, unless a later one is (a conditional
    write, read again when another waiting time wrote first)."""
    from sluice.domain.errors import StaleRead

    for _ in range(5):
        if (schedule.queued_for or 0.0) >= when:
            return
        try:
            registry.update_schedule(schedule.tenant, schedule.name, queued_for=when, expect={"queued_for": schedule.queued_for})
            return
        except StaleRead:
            schedule = registry.get_schedule(schedule.tenant, schedule.name)


def _iso(stamp: float | None) -> str:
    from datetime import UTC, datetime

    return "" if stamp is None else datetime.fromtimestamp(stamp, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def job_of_execution(execution: str, input: str | None) -> tuple[str, str] | None:
    """(tenant, job id) of the job an execution ran, read from the input it was started with:
    `{"job_id", "tenant"}` (the API, the S3 trigger), or a job specification, whose job's id
    derives from the execution (`job_for_execution`). None when the input says neither."""
    try:
        given = json.loads(input or "")
    except ValueError:
        return None
    if not isinstance(given, dict) or not isinstance(tenant := given.get("tenant"), str) or not tenant:
        return None
    job_id = given.get("job_id")
    if isinstance(job_id, str) and job_id:
        return tenant, job_id
    try:
        return tenant, execution_job_id(ExecutionSpec.parse(given), execution)
    except SluiceError:  # a specification refused: it made no job (its id, as it would have been, finds none)
        return tenant, derived_job_id("ex", execution)


def record_execution_end(
    batch: BatchService, *, execution: str, status: str, input: str | None, error: str | None = None, cause: str | None = None
) -> BatchJob | None:
    """The job of an execution that ended (SUCCEEDED, FAILED, TIMED_OUT, ABORTED), marked
    FAILED saying why when the execution left it unfinished: the whole execution timed out or
    was stopped from outside sluice, or failed where MarkFailed could not record it. A job the
    execution recorded (or that sluice cancelled) stays as it is, withdrawn from its table unless
    it succeeded (`withdraw_job`). None when the execution ran
    no job (a specification refused, a scheduled run skipped) or another execution runs it."""
    found = job_of_execution(execution, input)
    if found is None:
        return None
    tenant, job_id = found
    try:
        job = batch.registry.get_job(tenant, job_id)
    except NotFound:
        return None
    if job.execution and job.execution != execution:
        return job
    if job.terminal:  # cancelled through the API (whose role may not write the table): withdrawn here
        # NumPy and the codecs, imported here: not for a plain command
        from sluice.batch.publishing import withdraw_job

        withdraw_job(batch.precomputed, job)
        return job
    return batch.liveness.fail(job, execution_ended(status, error), cause or "", may_not_withdraw=False)
