"""A cron schedule's times across daylight saving, locally as EventBridge Scheduler keeps them
(its documented rule: a time the clocks skip in spring does not fire; a time they repeat in
autumn fires once). The cron fields name wall-clock times in the schedule's zone. Compared here
with a reference that reads the rule literally: every minute of the days around each clock
change, in zones that move by an hour, by half an hour (Lord Howe) or at midnight (Santiago),
is a fire exactly when its wall time matches the fields, exists, and is the first of its name.
cronsim on zoned times fired a skipped time at the jump (02:00 for 01:30), and a time of an
hour field `*` twice in the repeated hour."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from cronsim import CronSim
from hypothesis import given, settings
from hypothesis import strategies as st

from sluice.domain.schedules import Schedule, latest_fire, next_fire

ZONES = ["Europe/London", "America/New_York", "Australia/Lord_Howe", "America/Santiago", "Europe/Paris"]
YEARS = (2026, 2027)


def _changes(zone: str) -> list[datetime]:
    """The UTC instants the zone's offset changes in YEARS (by the minute)."""
    tz, found = ZoneInfo(zone), []
    start = datetime(YEARS[0], 1, 1, tzinfo=UTC)
    moment, offset = start, start.astimezone(tz).utcoffset()
    while moment.year <= YEARS[-1]:
        step = moment + timedelta(hours=1)
        if step.astimezone(tz).utcoffset() != offset:
            exact = moment
            while exact.astimezone(tz).utcoffset() == offset:
                exact += timedelta(minutes=1)
            found.append(exact)
            offset = exact.astimezone(tz).utcoffset()
        moment = step
    return found


CHANGES = {zone: _changes(zone) for zone in ZONES}


def _matches(line: str, wall: datetime) -> bool:
    """Whether the fields name this wall-clock minute (cronsim on naive times: no zone at all)."""
    return next(iter(CronSim(line, wall - timedelta(minutes=1)))) == wall


def _expected(line: str, tz: ZoneInfo, start: datetime, end: datetime) -> list[float]:
    """The rule read literally, minute by minute of UTC from `start` to `end`."""
    fires, seen = [], set()
    moment = start
    while moment <= end:
        wall = moment.astimezone(tz).replace(tzinfo=None)
        if wall not in seen and _matches(line, wall):  # exists (this instant shows it), first of its name
            fires.append(moment.timestamp())
        seen.add(wall)
        moment += timedelta(minutes=1)
    return fires


_MINUTE = st.one_of(st.integers(0, 59).map(str), st.just("*/15"), st.just("0,30"), st.just("*"))
_HOUR = st.one_of(st.integers(0, 23).map(str), st.just("*"), st.just("0-3"), st.just("1,2"), st.just("*/2"))


@settings(max_examples=30, deadline=None)
@given(zone=st.sampled_from(ZONES), minute=_MINUTE, hour=_HOUR, which=st.integers(0, 3))
def test_a_skipped_time_does_not_fire_and_a_repeated_one_fires_once(zone: str, minute: str, hour: str, which: int) -> None:
    change = CHANGES[zone][which]
    start, end = change - timedelta(hours=5), change + timedelta(hours=5)
    line = f"{minute} {hour} * * *"
    schedule = Schedule("acme", "s", "iris", "x", f"cron({line})", timezone=zone, created_at=start.timestamp())
    tz = ZoneInfo(zone)
    expected = _expected(line, tz, start + timedelta(minutes=1), end)
    got, moment = [], start.timestamp()
    while (fire := next_fire(schedule, moment)) <= end.timestamp():
        got.append(fire)
        moment = fire
    assert got == expected, (zone, line, [datetime.fromtimestamp(t, tz).isoformat() for t in got][:6])
    if expected:  # the latest fire at any moment is the last expected one before it
        assert latest_fire(schedule, expected[-1] + 30) == expected[-1]


@settings(max_examples=60, deadline=None)
@given(
    zone=st.sampled_from(ZONES), minute=_MINUTE, hour=_HOUR, which=st.integers(0, 3),
    since=st.integers(0, 600), until=st.integers(0, 600),
)  # fmt: skip
def test_the_latest_time_due_is_the_last_of_the_times_since_the_last_handled(zone: str, minute: str, hour: str, which: int, since: int, until: int) -> None:
    """Missed times fold into the latest: walking back from now finds the time walking forward
    from the last one handled would have ended on, around every clock change (and None when
    no time fell between them)."""
    from sluice.domain.schedules import _cron_fires

    change = CHANGES[zone][which].timestamp()
    after, moment = change - since * 60 - 7, change - 300 * 60 + until * 60 + 11
    line = f"{minute} {hour} * * *"
    schedule = Schedule("acme", "s", "iris", "x", f"cron({line})", timezone=zone, created_at=after - 86400, last_fire=after)
    walked = None
    for stamp in _cron_fires(schedule.expression, zone, after):
        if stamp > moment:
            break
        walked = stamp
    assert latest_fire(schedule, moment) == (walked if moment > after else None), (zone, line)


def test_a_time_in_the_first_pass_of_a_repeated_hour_is_due_during_the_second() -> None:
    """London, 25 October 2026: 01:30 first falls at 00:30 UTC; at 01:20 of the second pass
    (01:20 UTC) it is the latest time due, though 01:30 reads later on the wall than 01:20."""
    at = datetime(2026, 10, 25, 0, 30, tzinfo=UTC).timestamp()
    moment = datetime(2026, 10, 25, 1, 20, tzinfo=UTC).timestamp()
    schedule = Schedule("acme", "s", "iris", "x", "cron(30 1 * * *)", timezone="Europe/London", created_at=at - 86400, last_fire=at - 3600)
    assert latest_fire(schedule, moment) == at
    assert latest_fire(schedule, at - 1) is None
