"""A schedule's run that cannot be made (its deployment deleted, its input outside the inbox:
a 4xx), recorded the same way by the local scheduler and by the state machine's CreateJob on
AWS: on the schedule itself, as a count of the scheduled times refused in a row, why the
latest was and when (`Schedule.refused`, `last_error`, `last_refused_at`), and, for the first
of a row only, a FAILED job saying why. A schedule every minute whose deployment is gone so
counts 1,440 refusals a day on itself, not 1,440 jobs that would push the tenant's own out
of its job list. A run made again ends the row (`run_made`).

Two schedulers recording the same refusal (two workers of `sluice serve`; an event delivered
twice on AWS) write it once: the write expects the latest refused time it read, and only the
one whose write is made logs it and makes the job."""

from __future__ import annotations

import logging
from contextlib import suppress
from typing import TYPE_CHECKING

from sluice.domain.errors import NotFound, StaleRead

if TYPE_CHECKING:
    from sluice.batch.service import BatchService
    from sluice.domain.jobs import BatchJob
    from sluice.domain.schedules import Schedule

log = logging.getLogger("sluice.batch.schedules")


def refuse_run(
    batch: BatchService,
    schedule: Schedule,
    *,
    scheduled_for: float,
    job_id: str,
    input_uri: str,
    created_by: str,
    error: str,
) -> BatchJob | None:
    """Record that `schedule`'s run for `scheduled_for` was refused with `error`, as `schedule`
    was read. The FAILED job of the first refusal in a row; None for a later one, or where
    another scheduler recorded this one (or the schedule is gone)."""
    if schedule.last_refused_at == scheduled_for:
        return None  # recorded already (this time, delivered again)
    try:
        batch.registry.update_schedule(
            schedule.tenant, schedule.name, expect={"last_refused_at": schedule.last_refused_at},
            refused=schedule.refused + 1, last_error=error, last_refused_at=scheduled_for,
        )  # fmt: skip
    except (StaleRead, NotFound):  # another scheduler's write was made first; or it was deleted
        return None
    log.warning(
        "schedule run refused",
        extra={"tenant": schedule.tenant, "schedule": schedule.name, "scheduled_for": scheduled_for,
               "refused": schedule.refused + 1, "error": error},
    )  # fmt: skip
    if schedule.refused:
        return None
    return batch.refused(
        schedule.tenant, job_id, deployment=schedule.deployment, input_uri=input_uri, source="schedule",
        created_by=created_by, error=error, schedule=schedule.name, scheduled_for=scheduled_for,
    )  # fmt: skip


def run_made(batch: BatchService, schedule: Schedule) -> None:
    """A run of `schedule` was made: a row of refusals it had is over (the next refusal is
    the first of a new row, a FAILED job again). The latest refused time is kept."""
    if schedule.refused or schedule.last_error is not None:
        with suppress(NotFound):  # deleted meanwhile
            batch.registry.update_schedule(schedule.tenant, schedule.name, refused=0, last_error=None)
