"""A schedule's days of the week mean the same days locally (cronsim reads the standard field)
and on EventBridge (`aws_expression` writes its field: 1 is Sunday, no steps, no range past
Saturday, `#` and `L` alone). The EventBridge side is read here by a reader of its own, written
from EventBridge's cron reference, and the two are compared day by day over a year, for any
field cronsim takes."""

from __future__ import annotations

import calendar
from datetime import UTC, date, datetime, timedelta

import pytest
from cronsim import CronSim
from hypothesis import assume, given
from hypothesis import settings as examples
from hypothesis import strategies as st

from sluice.domain.errors import BadRequest
from sluice.domain.schedules import aws_expression, normalize_expression

NAMES = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"]
YEAR = [date(2026, 1, 1) + timedelta(days=n) for n in range(365)]


def _day(n: int, named: bool) -> str:
    return NAMES[n % 7].lower() if named and n < 7 else str(n)


_DAY = st.builds(_day, st.integers(0, 7), st.booleans())
_PLAIN = st.one_of(
    _DAY,
    st.just("*"),
    st.builds(lambda a, b: f"{a}-{b}", _DAY, _DAY),
    st.builds(lambda b, s: f"{b}/{s}", st.one_of(st.just("*"), _DAY, st.builds(lambda a, b: f"{a}-{b}", _DAY, _DAY)), st.integers(1, 4)),
)
_FIELD = st.one_of(
    st.lists(_PLAIN, min_size=1, max_size=3).map(",".join),
    st.builds(lambda d, k: f"{d}#{k}", _DAY, st.integers(1, 5)),
    st.builds(lambda d: f"{d}L", _DAY),
)


def _standard(dow: str) -> set[date]:
    """The days of the year cronsim runs `0 2 * * <dow>` on (the field as sluice keeps it: a
    range of one value with a step is that value, `tests/unit/test_schedule_fields.py`)."""
    days, start = set(), datetime(2025, 12, 31, 12, tzinfo=UTC)
    for when in CronSim(f"0 2 * * {dow}", start):
        if when.year > 2026:
            break
        days.add(when.date())
    return days


def _eventbridge(field: str) -> set[date]:
    """The days of the year an EventBridge day-of-week field names: a list of N (1-7, 1 is
    Sunday) or N-M (M not below N), or one N#k (the k-th such day of the month) or NL (the last)."""

    def weekday(d: date) -> int:  # EventBridge's number of the day
        return (d.weekday() + 1) % 7 + 1

    if "#" in field:
        n, k = map(int, field.split("#"))
        return {d for d in YEAR if weekday(d) == n and (d.day - 1) // 7 + 1 == k}
    if field.endswith("L"):
        n = int(field[:-1])
        return {d for d in YEAR if weekday(d) == n and d.day + 7 > calendar.monthrange(d.year, d.month)[1]}
    named: set[int] = set()
    for item in field.split(","):
        low, _, high = item.partition("-")
        assert low.isdigit() and (not high or high.isdigit()), field  # no step, no name, no wildcard
        first, last = int(low), int(high or low)
        assert 1 <= first <= last <= 7, field  # nothing that wraps
        named.update(range(first, last + 1))
    return {d for d in YEAR if weekday(d) in named}


@examples(max_examples=150, deadline=None)
@given(dow=_FIELD)
def test_a_day_of_week_field_names_the_same_days_locally_and_on_eventbridge(dow: str) -> None:
    try:
        expression = normalize_expression(f"0 2 * * {dow}")
    except BadRequest:
        assume(False)  # cronsim refuses it: so does sluice, everywhere
    assume(dow != "*")
    aws = aws_expression(expression)
    field = aws.removeprefix("cron(").removesuffix(")").split()[4]
    assert _eventbridge(field) == _standard(expression.removeprefix("cron(0 2 * * ").removesuffix(")")), (dow, aws)


def test_a_mark_in_a_list_is_refused_as_eventbridge_refuses_it() -> None:
    with pytest.raises(BadRequest, match="stands alone"):
        aws_expression(normalize_expression("0 2 * * 5L,1"))
