"""Batch schedules: a tenant's standing order to score an input on a cron or rate expression.

An expression is `cron(<minute> <hour> <day of month> <month> <day of week>)` (the five fields
of cron, evaluated in the schedule's time zone) or `rate(<n> minute|minutes|hour|hours|day|days)`, whose period is at most `HORIZON_YEARS` (EventBridge
Scheduler documents no bound: `n` is "a positive integer"; a cron's next time is looked for
that far ahead). A bare five-field cron line is taken as `cron(…)`. A schedule stored before
a bound held stays readable: it is `invalid` (saying why), never due, with no next time. On AWS the same schedule becomes an
EventBridge Scheduler schedule (`aws_expression` writes its six-field form).

Each run is an ordinary batch job that names its schedule. A run that cannot be made (its
deployment deleted) makes no job: it is counted on the schedule (`refused`, `last_error`). When the previous run is still
going, `overlap` decides: `skip` the run (counted in `skipped`), or `queue` one run that starts
as soon as the previous one ends (runs due meanwhile collapse into that one).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from typing import TYPE_CHECKING, Literal

from sluice.domain.errors import BadRequest
from sluice.domain.jobs import CatalogTarget, PublishTarget
from sluice.domain.objects import now

if TYPE_CHECKING:
    from collections.abc import Iterator

    from sluice.domain.jobs import BatchJob

Overlap = Literal["skip", "queue"]
OVERLAPS: tuple[str, ...] = ("skip", "queue")
ScheduleState = Literal["ENABLED", "PAUSED"]
# The fields `Registry.update_schedule` may set.
SCHEDULE_UPDATABLE: frozenset[str] = frozenset(
    {"state", "last_fire", "skipped", "last_skipped_at", "updated_at", "refused", "last_error", "last_refused_at", "queued_for"}
)
_RATE = re.compile(r"^rate\(\s*(\d+)\s+(minute|minutes|hour|hours|day|days)\s*\)\Z")
_CRON = re.compile(r"^cron\((.*)\)\Z")
_UNIT_S = {"minute": 60, "hour": 3600, "day": 86400}
HORIZON_YEARS = 30  # how far a cron's next time is looked for (a leap day on a Monday: 28 years)
MAX_RATE_S = HORIZON_YEARS * 365 * 86400  # a rate's longest period: 10950 days


@dataclass(frozen=True, slots=True)
class Schedule:
    tenant: str
    name: str
    deployment: str
    input_uri: str  # a template of the scheduled time (see sluice.batch.specs)
    expression: str  # normalized: cron(…) or rate(…)
    timezone: str = "UTC"
    overlap: Overlap = "skip"
    format: str | None = None
    output_format: str | None = None
    key_columns: tuple[str, ...] = ()
    state: ScheduleState = "ENABLED"
    operator: bool = False  # made from the CLI: its input may lie outside the inbox (locally)
    created_at: float = field(default_factory=now)
    created_by: str = ""
    updated_at: float | None = None
    last_fire: float | None = None  # the latest scheduled time that was run or skipped
    skipped: int = 0
    last_skipped_at: float | None = None
    catalog: CatalogTarget | None = None  # each run's output becomes a partition of this table
    publish: PublishTarget | None = None  # each run's answers are published into this table of precomputed answers
    # When it was made by the wall clock (jobs are stamped by it; `created_at` is the scheduler's
    # clock, which its fire times count from): its runs are jobs made since (`ran`). 0: made
    # before this was kept, and every job naming it is its.
    made_at: float = 0.0
    # Its runs refused (the deployment deleted, the input outside the inbox): how many scheduled
    # times in a row since the last run made (0: none, or a run made since), why the latest was,
    # and that latest time (kept after a run is made). A refused run makes no job: it is
    # counted here only (`sluice.batch.refused_runs`).
    refused: int = 0
    last_error: str | None = None
    last_refused_at: float | None = None
    # On AWS with `overlap: queue`: the latest scheduled time whose run waited for one still going.
    # A waiting time earlier than it folds into it, as the local scheduler runs only the latest.
    queued_for: float | None = None

    @property
    def paused(self) -> bool:
        return self.state == "PAUSED"

    @property
    def invalid(self) -> str | None:
        """Why this schedule cannot run (its expression, stored before a bound now checked
        where expressions are made, is refused by `normalize_expression`), or None."""
        return expression_problem(self.expression)

    def ran(self, job: BatchJob) -> bool:
        """Whether `job` is one of this schedule's runs: it names the schedule and was made
        since the schedule was (a schedule deleted before it under the same name made the
        others). Both times are the wall clock's in milliseconds, as jobs are stamped: a run
        made in the schedule's own millisecond is its (an old one's would have had to be made,
        the old schedule deleted and this one made, all in that millisecond)."""
        return bool(job.schedule == self.name and job.created_at >= self.made_at)


def check_overlap(value: str) -> str:
    if value not in OVERLAPS:
        raise BadRequest(f"overlap must be one of {', '.join(OVERLAPS)}", field="overlap")
    return value


def normalize_expression(expression: str, *, field: str = "expression") -> str:
    """`cron(m h dom mon dow)` or `rate(n unit)`, checked; a bare cron line gets `cron(…)`."""
    if not isinstance(expression, str) or not expression.strip():
        raise BadRequest(f"{field} must be a cron(…) or rate(…) expression", field=field)
    text = " ".join(expression.split())
    rate = _RATE.match(text)
    if rate:
        n, unit = _rate(rate, field)
        return f"rate({n} {unit}{'' if n == 1 else 's'})"
    if text.lower().startswith("rate("):  # a rate _RATE does not read: said as one, not as a cron line
        raise BadRequest(f"{field} {expression!r} is no rate: a rate is rate(<n> minutes|hours|days), n a whole number from 1", field=field)
    cron = _CRON.match(text)
    line = cron.group(1).strip() if cron else text
    fields = _one_value_ranges(line).split()
    if len(fields) != 5:
        raise BadRequest(
            f"{field} must be rate(<n> minutes|hours|days) or cron(<minute> <hour> <day of month> "
            f"<month> <day of week>); {expression!r} has {len(fields)} cron fields, not 5",
            field=field,
        )
    line = " ".join(fields)
    from cronsim import CronSim, CronSimError

    try:
        CronSim(line, datetime(2026, 1, 1, tzinfo=UTC))
    except (CronSimError, ValueError, IndexError, KeyError, OverflowError) as exc:
        raise BadRequest(f"{field} is not a valid cron expression: {exc}", field=field) from None
    return f"cron({line})"


_MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_DAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")


def _one_value_ranges(line: str) -> str:
    """A cron line whose ranges of one value with a step (`1-1/1`, `mon-1/2`) are written as
    that value: cron and EventBridge read `a-a/s` as `a` alone, where cronsim reads it as `a/s`
    (from `a` to the field's end, every `s`: a monthly `0 0 1-1/1 * *` ran every day). A step
    that is no whole number from 1 is left for cronsim to refuse."""

    def value(text: str, position: int) -> int | None:
        low = text.lower()
        if low.isascii() and low.isdigit() and len(low) <= 4:  # a field's values are below 100: more digits are cronsim's to refuse
            return int(low)
        names = {3: _MONTHS, 4: _DAYS}.get(position, ())
        return (names.index(low) + (position == 3)) if low in names else None

    fields = line.split()
    for position, field_ in enumerate(fields):
        items = field_.split(",")
        for i, item in enumerate(items):
            term, slash, step = item.partition("/")
            first, dash, last = term.partition("-")
            stepped = slash and dash and step.isascii() and step.isdigit() and len(step) <= 4 and int(step) > 0
            if stepped and (one := value(first, position)) is not None and one == value(last, position):
                items[i] = first
        fields[position] = ",".join(items)
    return " ".join(fields)


def _rate(rate: re.Match[str], field: str) -> tuple[int, str]:
    """A rate's number and unit (singular), from 1 to `HORIZON_YEARS` in that unit. The digits
    are measured before they are read: a number of thousands of digits is refused as any
    other too large, not by `int`'s own limit."""
    digits, unit = rate.group(1).lstrip("0"), rate.group(2).rstrip("s")
    if not digits:
        raise BadRequest(f"{field}: a rate must be at least 1 {unit}", field=field)
    most = MAX_RATE_S // _UNIT_S[unit]
    if len(digits) > len(str(most)) or int(digits) > most:
        raise BadRequest(f"{field}: a rate is at most {most} {unit}s ({HORIZON_YEARS} years)", field=field)
    return int(digits), unit


@lru_cache(maxsize=1024)
def expression_problem(expression: str) -> str | None:
    """Why a stored expression is refused now (`normalize_expression`'s message), or None."""
    try:
        normalize_expression(expression)
    except BadRequest as exc:
        return exc.message
    return None


def period_s(expression: str) -> float | None:
    """A rate's period in seconds; None for a cron. (Of an expression `normalize_expression`
    accepted: a stored one is checked first, `Schedule.invalid`.)"""
    rate = _RATE.match(expression)
    return int(rate.group(1)) * _UNIT_S[rate.group(2).rstrip("s")] if rate else None


def latest_fire(schedule: Schedule, moment: float) -> float | None:
    """The latest scheduled time at or before `moment` and after the last one handled (or the
    schedule's creation); None when nothing is due (or ever will be: `Schedule.invalid`).
    Missed times collapse into the latest."""
    if schedule.invalid is not None:
        return None
    after = schedule.last_fire if schedule.last_fire is not None else schedule.created_at
    if moment <= after:
        return None
    period = period_s(schedule.expression)
    if period is not None:
        anchor = schedule.created_at
        k = math.floor((moment - anchor) / period)
        fire = anchor + k * period
        return fire if fire > after else None
    return _latest_cron_fire(schedule.expression, schedule.timezone, after, moment)


def check_fires(expression: str, timezone: str, now: float, *, field: str = "expression") -> None:
    """Refuse a cron that never fires in `timezone` (within `HORIZON_YEARS`): its only times
    fall where the clocks skip (01:30 on the last Sunday of March, in London)."""
    if period_s(expression) is None and next(_cron_fires(expression, timezone, now), None) is None:
        raise BadRequest(f"{field}: {expression} never fires in {timezone} (its times fall where the clocks skip)", field=field)




def next_fire(schedule: Schedule, moment: float) -> float | None:
    """The first scheduled time after `moment`; None where a cron fires no more within
    `HORIZON_YEARS` (its only times fall where the clocks skip), or for an invalid schedule."""
    if schedule.invalid is not None:
        return None
    period = period_s(schedule.expression)
    if period is not None:
        anchor = schedule.created_at
        return anchor + (math.floor((moment - anchor) / period) + 1) * period
    return next(_cron_fires(schedule.expression, schedule.timezone, moment), None)


def _cron_fires(expression: str, timezone: str, after: float) -> Iterator[float]:
    """The times a cron schedule fires after `after`, as EventBridge Scheduler keeps them across
    daylight saving: the cron fields name wall-clock times in the schedule's zone; a time the
    clocks skip (spring) does not fire that day, and a time they repeat (autumn) fires once, at
    its first occurrence. (cronsim on zoned times fired a skipped time at the jump, and a time
    of an hour field `*` twice in the repeated hour.)"""
    from zoneinfo import ZoneInfo

    from cronsim import CronSim

    tz = ZoneInfo(timezone)
    line = _one_value_ranges(_CRON.match(expression).group(1))  # type: ignore[union-attr]  # stored before the rule too
    start = datetime.fromtimestamp(after, tz).replace(tzinfo=None)
    walls = CronSim(line, start)
    while True:
        try:
            wall = next(walls)
        except (StopIteration, OverflowError, ValueError):  # past the calendar: no more times
            return
        if wall.year > start.year + HORIZON_YEARS:  # a time that only ever falls where the clocks skip
            return
        local = wall.replace(tzinfo=tz)  # fold 0: the first of a repeated time
        if local.astimezone(UTC).astimezone(tz).replace(tzinfo=None) != wall:
            continue  # in the gap the clocks skip: no such time that day
        stamp = local.timestamp()
        if stamp > after:
            yield stamp


def _latest_cron_fire(expression: str, timezone: str, after: float, moment: float) -> float | None:
    """The latest of `_cron_fires(expression, timezone, after)` at or before `moment`, found
    walking back from `moment` (walking forward from `after` took seconds for an every-minute
    schedule down a year). The walk starts at a wall-clock time a few hours past `moment`'s: the
    first pass of an hour the clocks repeat reads later on the wall than a moment in its second.
    Wall times map to instants in order (each at its first occurrence), so the first found at or
    before `moment` is the latest."""
    from zoneinfo import ZoneInfo

    from cronsim import CronSim

    tz = ZoneInfo(timezone)
    line = _one_value_ranges(_CRON.match(expression).group(1))  # type: ignore[union-attr]
    start = datetime.fromtimestamp(moment, tz).replace(tzinfo=None) + timedelta(hours=3)
    oldest = datetime.fromtimestamp(after, tz).year - 1
    walls = CronSim(line, start, reverse=True)
    while True:
        try:
            wall = next(walls)
        except (StopIteration, OverflowError, ValueError):  # before the calendar: none
            return None
        if wall.year < oldest:  # past `after` (its times fell where the clocks skip)
            return None
        local = wall.replace(tzinfo=tz)
        if local.astimezone(UTC).astimezone(tz).replace(tzinfo=None) != wall:
            continue  # in the gap the clocks skip: no such time that day
        stamp = local.timestamp()
        if stamp <= moment:
            return stamp if stamp > after else None


def aws_expression(expression: str) -> str:
    """The EventBridge Scheduler form: rate(…) as it is; cron with six fields, one of the two
    day fields `?`, and days of the week numbered 1 (Sunday) to 7."""
    if expression.startswith("rate("):
        return expression
    minute, hour, dom, month, dow = _one_value_ranges(_CRON.match(expression).group(1)).split()  # type: ignore[union-attr]
    if dow == "*":
        return f"cron({minute} {hour} {dom} {month} ? *)"
    if dom == "*":
        return f"cron({minute} {hour} ? {month} {_aws_weekdays(dow)} *)"
    raise BadRequest(
        "expression: on AWS a cron expression may restrict the day of the month or the day of "
        "the week, not both",
        field="expression",
    )


def _aws_weekdays(dow: str) -> str:
    """A standard day-of-week field as EventBridge writes it: the days cronsim reads from it
    (what a local schedule runs on: 0-7, Sunday 0 or 7, names, ranges, steps, `N#k`, `NL`),
    numbered 1 (Sunday) to 7, listed (EventBridge has no steps in this field, and no range
    that wraps past Saturday); `#` and `L` alone in the field, as EventBridge requires."""
    from cronsim import CronSim
    from cronsim.cronsim import Field

    read = Field.DOW.parse(dow.upper())
    marked = [item for item in read if isinstance(item, tuple)]
    if marked:
        if len(read) > 1:
            raise BadRequest("expression: on AWS a day of the week with # or L stands alone in its field", field="expression")
        day, which = marked[0]
        return f"{day % 7 + 1}{'L' if which == CronSim.LAST else f'#{which}'}"
    runs: list[list[int]] = []
    for d in sorted({int(item) % 7 + 1 for item in read}):  # type: ignore[call-overload]
        if runs and runs[-1][-1] == d - 1:
            runs[-1].append(d)
        else:
            runs.append([d])
    return ",".join(f"{r[0]}-{r[-1]}" if len(r) > 2 else ",".join(map(str, r)) for r in runs)
