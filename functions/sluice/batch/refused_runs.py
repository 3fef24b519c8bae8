"""A schedule's run that cannot be made (its deployment deleted, its input outside the inbox:
a 4xx), recorded the same way by the local scheduler and by the state machine's CreateJob on
AWS: on the schedule only, as a count of the scheduled times refused in a row, why the latest
was and when (`Schedule.refused`, `last_error`, `last_refused_at`). No job is made for it, so
a schedule every minute whose deployment is gone counts 1,440 refusals a day on itself and
leaves the tenant's own jobs listed. A run made again ends the row (`run_made`).

Two schedulers recording the same refusal (two workers of `sluice serve`; an event delivered
twice, or CreateJob retried, on AWS) write it once: the write expects the latest refused time
it read, and only the one whose write is made logs it.

Both records are best effort: a fault while writing one is logged, and what the run itself
does stays as it was (refused: the execution fails at SpecRejected with the real reason, the
local scheduler moves on; made: the job is returned)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from sluice.domain.errors import NotFound, SluiceError, StaleRead

if TYPE_CHECKING:
    from sluice.domain.schedules import Schedule
    from sluice.registry import Registry

log = logging.getLogger("sluice.batch.schedules")


def refuse_run(registry: Registry, schedule: Schedule, *, scheduled_for: float, error: str) -> None:
    """Record on `schedule` (as it was read) that its run for `scheduled_for` was refused with
    `error`, and log it, once: nothing where that time is recorded already, another scheduler
    recorded it first, or the schedule is gone."""
    if schedule.last_refused_at == scheduled_for:
        return  # recorded already (this time, delivered again)
    count = schedule.refused + 1
    try:
        registry.update_schedule(
            schedule.tenant, schedule.name, expect={"last_refused_at": schedule.last_refused_at},
            refused=count, last_error=error, last_refused_at=scheduled_for,
        )  # fmt: skip
    except (StaleRead, NotFound):  # another scheduler's write was made first; or it was deleted
        return
    except Exception as exc:  # never what the run does: it stays refused for its own reason
        _not_recorded("schedule run refused, not counted", schedule, exc, scheduled_for=scheduled_for, error=error)
        return
    log.warning(
        "schedule run refused",
        extra={"tenant": schedule.tenant, "schedule": schedule.name, "scheduled_for": scheduled_for,
               "refused": count, "error": error},
    )  # fmt: skip


def run_made(registry: Registry, schedule: Schedule) -> None:
    """A run of `schedule` (as it was read) was made: a row of refusals it had is over (the next
    refusal starts a new one). The latest refused time is kept."""
    if not schedule.refused and schedule.last_error is None:
        return
    try:
        registry.update_schedule(schedule.tenant, schedule.name, refused=0, last_error=None)
    except NotFound:  # deleted meanwhile
        return
    except Exception as exc:  # never what the run does: it was made
        _not_recorded("schedule refusals not cleared", schedule, exc)


def _not_recorded(message: str, schedule: Schedule, exc: Exception, **extra: object) -> None:
    fields = {"tenant": schedule.tenant, "schedule": schedule.name, **extra}
    if isinstance(exc, SluiceError):  # a fault that may pass (the registry unavailable)
        log.warning(message, extra=fields | {"fault": exc.message})
    else:
        log.exception(message, extra=fields)
