"""A cron schedule fires on the minutes its fields name as cron reads them, locally and on
EventBridge alike: compared with a reader of the fields written here from cron's rules (a
value, a range `a-b`, a step over `*`, over a range or from a value to the field's end, lists
of those; a day of the month and `*` for the day of the week), minute by minute of the UTC
calendar. cronsim read a range of one value with a step (`1-1/1`) as from that value to the
field's end: a monthly schedule ran every day, and EventBridge was given the field as written."""

from __future__ import annotations

import calendar
from datetime import UTC, datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from sluice.domain.schedules import Schedule, aws_expression, next_fire, normalize_expression

BOUNDS = ((0, 59), (0, 23), (1, 31), (1, 12))  # minute, hour, day of the month, month
MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
START = datetime(2026, 1, 1, tzinfo=UTC)
FIRES = 6


def _read(field: str, position: int) -> set[int]:
    """The values a standard cron field names."""
    low, high = BOUNDS[position]

    def value(text: str) -> int:
        return MONTHS.index(text.lower()) + 1 if position == 3 and text.lower() in MONTHS else int(text)

    named: set[int] = set()
    for item in field.split(","):
        term, _, step = item.partition("/")
        if term == "*":
            first, last = low, high
        elif "-" in term:
            a, b = term.split("-")
            first, last = value(a), value(b)
        else:
            first = value(term)
            last = high if step else first  # `a/s`: from a to the field's end
        named.update(range(first, last + 1, int(step or 1)))
    return named


def _item(position: int) -> st.SearchStrategy[str]:
    low, high = BOUNDS[position]
    one = st.integers(low, high).map(lambda v: MONTHS[v - 1] if position == 3 and v % 3 == 0 else str(v))
    pair = st.tuples(st.integers(low, high), st.integers(0, 3)).map(lambda t: (t[0], min(high, t[0] + t[1])))
    span = pair.map(lambda p: f"{p[0]}-{p[1]}")
    step = st.integers(1, 7)
    return st.one_of(
        one,
        span,
        st.builds(lambda s, k: f"{s}/{k}", span, step),  # a range with a step, one value wide at times
        st.builds(lambda v, k: f"{v}/{k}", st.integers(low, high), step),
        st.builds(lambda k: f"*/{k}", step),
    )


def _field(position: int) -> st.SearchStrategy[str]:
    return st.one_of(st.just("*"), st.lists(_item(position), min_size=1, max_size=3).map(",".join))


def _expected(line: str) -> list[float]:
    """The first FIRES minutes after START the fields name (the day of the week `*`), in UTC."""
    minute, hour, dom, month = (_read(f, i) for i, f in enumerate(line.split()[:4]))
    found: list[float] = []
    for year in range(START.year, START.year + 9):
        for m in sorted(month):
            for d in sorted(x for x in dom if x <= calendar.monthrange(year, m)[1]):
                for h in sorted(hour):
                    for mi in sorted(minute):
                        when = datetime(year, m, d, h, mi, tzinfo=UTC)
                        if when > START:
                            found.append(when.timestamp())
                            if len(found) == FIRES:
                                return found
    return found


@settings(max_examples=120, deadline=None)
@given(minute=_field(0), hour=_field(1), dom=_field(2), month=_field(3))
def test_a_cron_fires_on_the_minutes_its_fields_name_locally_and_on_eventbridge(minute: str, hour: str, dom: str, month: str) -> None:
    line = f"{minute} {hour} {dom} {month} *"
    expression = normalize_expression(line)
    schedule = Schedule("acme", "s", "iris", "x", expression, created_at=START.timestamp())
    got, moment = [], START.timestamp()
    while len(got) < FIRES and (fire := next_fire(schedule, moment)) is not None:
        got.append(fire)
        moment = fire
    assert got == _expected(line), (line, expression, [datetime.fromtimestamp(t, UTC).isoformat() for t in got])
    # EventBridge is given fields naming the same minutes (its own first four read as cron's).
    aws = aws_expression(expression).removeprefix("cron(").removesuffix(")").split()
    assert [_read(f, i) for i, f in enumerate(aws[:4])] == [_read(f, i) for i, f in enumerate(line.split()[:4])], (line, aws)


def test_a_number_of_thousands_of_digits_in_a_field_is_refused_naming_the_expression() -> None:
    """Read as a number only once it is short enough to be one of a field's (Python refuses
    to read an integer past 4,300 digits with a ValueError of its own)."""
    import pytest

    from sluice.domain.errors import BadRequest

    for line in ("0 0 1-1/" + "9" * 5000 + " * *", "0 0 " + "9" * 5000 + "-1/2 * *"):
        with pytest.raises(BadRequest) as refused:
            normalize_expression(line)
        assert refused.value.field == "expression"
