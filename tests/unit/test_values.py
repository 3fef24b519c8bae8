"""The parsers every door reads times and versions with (`sluice.domain.values`): their
boundaries, the spellings they take and refuse, and that a refusal is a 422 naming the field."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from sluice.batch.specs import ExecutionSpec
from sluice.domain.errors import InvalidRequest
from sluice.domain.values import (
    EARLIEST_TIME,
    LATEST_TIME,
    MAX_NUMBER,
    isoformat,
    parse_model_ref,
    parse_model_version,
    parse_time,
    parse_version,
    parse_version_or_latest,
)

NOW = 1_795_701_600.0  # 2026-11-26T14:00:00Z


def refused(parse: Any, value: Any, field: str, **kw: Any) -> str:
    with pytest.raises(InvalidRequest) as caught:
        parse(value, field=field, **kw)
    assert caught.value.status == 422 and caught.value.field == field
    assert caught.value.message.startswith(f"{field}: ")
    return caught.value.message


# Versions ----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("value", "number"),
    [("1", 1), (1, 1), ("42", 42), (str(MAX_NUMBER), MAX_NUMBER), (MAX_NUMBER, MAX_NUMBER), ("9" * 18, int("9" * 18))],
)
def test_a_version_is_a_whole_number_from_1_to_the_largest_63_bit_one(value: Any, number: int) -> None:
    assert parse_version(value, field="version") == number


@pytest.mark.parametrize(
    "value",
    [
        "0", 0, -1, "-1", str(MAX_NUMBER + 1), MAX_NUMBER + 1, 2**64, 10**400, "9" * 5000,  # out of range
        "01", "007", "+1", " 1", "1 ", "1\n", "1_000", "0x10", "1e3", "",  # one spelling: digits, no sign or padding
        "\u0661\u0662", "\u0663", "\u00b3", "\uff11",  # other scripts' digits: `int()` reads them, a URL must not
        1.0, 1e3, 2.5, float("nan"), float("inf"), True, False, None, [1], {"v": 1}, "latest",
    ],
)  # fmt: skip
def test_anything_else_is_not_a_version(value: Any) -> None:
    message = refused(parse_version, value, "version")
    assert str(MAX_NUMBER) in message


def test_a_revision_is_the_same_number_under_its_own_name() -> None:
    assert parse_version("3", field="revision", what="revision") == 3
    assert "a revision is" in refused(parse_version, "3.0", "revision", what="revision")


def test_latest_is_a_version_only_where_it_is_taken() -> None:
    assert parse_version_or_latest("latest", field="version") == "latest"
    assert parse_version_or_latest("7", field="version") == 7
    for bad in ("Latest", "latest ", "0", str(MAX_NUMBER + 1), None):
        refused(parse_version_or_latest, bad, "version")


def test_model_version_spellings() -> None:
    assert parse_model_version("iris:2", field="to") == ("iris", 2)
    assert parse_model_version(f"a.b_c-d:{MAX_NUMBER}", field="to") == ("a.b_c-d", MAX_NUMBER)
    for bad in ("iris", "iris:", ":2", "iris:latest", "iris:02", "iris:+2", "iris:\u0662", f"iris:{MAX_NUMBER + 1}",
                "Iris:2", "iris:2:3", " iris:2", "iris:2 ", "x" * 64 + ":1", 2, None, True):  # fmt: skip
        refused(parse_model_version, bad, "to")
    assert parse_model_ref("iris", field="version") == ("iris", "latest")
    assert parse_model_ref("iris:latest", field="version") == ("iris", "latest")
    assert parse_model_ref("iris:3", field="version") == ("iris", 3)
    for bad in ("", ":3", "iris:", "iris:0", f"iris:{MAX_NUMBER + 1}"):
        refused(parse_model_ref, bad, "version")


# Times -------------------------------------------------------------------------------------------
def test_the_range_is_1970_to_9999_12_30_both_included() -> None:
    assert datetime(1970, 1, 1, tzinfo=UTC).timestamp() == EARLIEST_TIME
    assert datetime(9999, 12, 30, tzinfo=UTC).timestamp() == LATEST_TIME
    first, last = "1970-01-01T00:00:00Z", "9999-12-30T00:00:00Z"
    assert parse_time(first, field="t") == 0.0 and parse_time(0, field="t") == 0.0 and parse_time(0.0, field="t") == 0.0
    assert parse_time(last, field="t") == LATEST_TIME == parse_time(LATEST_TIME, field="t")
    assert parse_time("9999-12-30T01:00:00+01:00", field="t") == LATEST_TIME
    # One past each: a second, a microsecond, and one nanosecond of a fraction after the last.
    for past in (-1, -0.001, "1969-12-31T23:59:59Z", "1969-12-31T23:59:59.999999Z", "1970-01-01T00:00:00+00:01",
                 LATEST_TIME + 1, LATEST_TIME + 0.001, "9999-12-30T00:00:01Z", "9999-12-30T00:00:00.000001Z",
                 "9999-12-30T00:00:00.000000001Z", "9999-12-29T23:59:59-00:01"):  # fmt: skip
        assert "is outside the times sluice takes" in refused(parse_time, past, "t")


def test_every_time_in_range_survives_the_conversions_made_downstream() -> None:
    """The reason for the range: a date in any zone, an hour more (the capture reader), isoformat."""
    for seconds in (EARLIEST_TIME, LATEST_TIME):
        when = datetime.fromtimestamp(seconds, UTC)
        for zone in ("Pacific/Kiritimati", "Etc/GMT+12", "Europe/Paris"):
            local = when.astimezone(ZoneInfo(zone))
            assert local.strftime("%Y-%m-%dT%H:%M") and local.isoformat()
        assert (when + timedelta(hours=1, days=1)).isoformat() and (when - timedelta(days=1)).isoformat()
        assert isoformat(seconds)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-11-26T14:00:00Z", datetime(2026, 11, 26, 14, tzinfo=UTC)),
        ("2026-11-26T14:00:00z", datetime(2026, 11, 26, 14, tzinfo=UTC)),
        ("2026-11-26t14:00:00+00:00", datetime(2026, 11, 26, 14, tzinfo=UTC)),
        ("2026-11-26 15:30:00+01:30", datetime(2026, 11, 26, 14, tzinfo=UTC)),
        ("2026-11-26T09:00:00-05:00", datetime(2026, 11, 26, 14, tzinfo=UTC)),
        ("2026-11-26T14:00", datetime(2026, 11, 26, 14, tzinfo=UTC)),  # no zone: UTC
        ("2026-11-26T14:00:00", datetime(2026, 11, 26, 14, tzinfo=UTC)),
        ("2026-11-26", datetime(2026, 11, 26, tzinfo=UTC)),  # a date alone: its midnight, UTC
        ("2026-11-26T14:00:00.25Z", datetime(2026, 11, 26, 14, 0, 0, 250000, tzinfo=UTC)),
        ("2026-11-26T14:00:00.123456789Z", datetime(2026, 11, 26, 14, 0, 0, 123457, tzinfo=UTC)),
        ("2026-11-26T14:00:00+23:59", datetime(2026, 11, 26, 14, tzinfo=timezone(timedelta(hours=23, minutes=59)))),
    ],
)
def test_rfc_3339_times(text: str, expected: datetime) -> None:
    assert parse_time(text, field="t") == pytest.approx(expected.timestamp(), abs=1e-6)


@pytest.mark.parametrize(
    "value",
    [
        "", " 2026-11-26T14:00Z", "2026-11-26T14:00Z ", "2026-11-26T14:00Z\n",  # taken as written
        "2026-02-30", "2026-13-01", "2026-11-26T24:00", "2026-11-26T14:60", "2026-11-26T23:59:60Z",  # no such moment
        "2026-11-26T14:00+24:00", "2026-11-26T14:00+05:60", "2026-11-26T14:00+0100", "2026-11-26T14:00 +01:00",
        "2026-11-26T14", "2026-11-26T14:00:00.", "2026-11-26T14:00:00.1234567890Z", "2026-11-26Z",
        "20261126", "20261126T140000Z", "2026-W48-4", "2026-330", "+2026-11-26", "12026-11-26",  # other ISO 8601 forms
        "\u0661\u0669\u0667\u0660-\u0660\u0661-\u0660\u0661", "\uff12\uff10\uff12\uff16-11-26", "1764165600", "1764165600.5",  # digits as text are not seconds
        "now", "yesterday", "2h", "tomorrow",  # a duration ago only where `now` is given
        float("nan"), float("-nan"), float("inf"), float("-inf"), True, False, None, [1], {"t": 1},
    ],
)  # fmt: skip
def test_anything_else_is_not_a_time(value: Any) -> None:
    refused(parse_time, value, "scheduled_time")


def test_epoch_seconds_are_a_json_number() -> None:
    assert parse_time(1_795_701_600, field="t") == NOW
    assert parse_time(1_795_701_600.5, field="t") == NOW + 0.5
    assert parse_time(1e3, field="t") == 1000.0
    for huge in (10**400, -(10**400), 10**5000, 1e308, -1e308, 2**63, 253402300800, -62135596900):
        assert "outside" in refused(parse_time, huge, "t")
    assert "an integer of 16610 bits" in refused(parse_version, 10**5000, "version")  # too long for `str()`


def test_a_duration_ago_where_the_field_takes_one() -> None:
    assert parse_time("2h", field="since", now=NOW) == NOW - 7200
    assert parse_time("30m", field="since", now=NOW) == NOW - 1800
    assert parse_time("90s", field="since", now=NOW) == NOW - 90
    assert parse_time("1.5d", field="since", now=NOW) == NOW - 1.5 * 86400
    assert parse_time("0s", field="since", now=NOW) == NOW
    for bad in ("2 h", "2H", "-2h", "+2h", "2w", "h", "2", ".5h", "2.h", "\u0661h", "1e3h", " 2h"):
        refused(parse_time, bad, "since", now=NOW)
    assert "outside" in refused(parse_time, "999999999999d", "since", now=NOW)
    # Absolute forms are read the same with or without `now`.
    assert parse_time("2026-11-26T14:00Z", field="since", now=0.0) == NOW


def test_a_scheduled_time_reads_through_the_same_parser() -> None:
    spec = {"tenant": "acme", "deployment": "iris", "input_uri": "s3://b/in/{date}.csv", "timezone": "Pacific/Kiritimati"}
    assert ExecutionSpec.parse({**spec, "scheduled_time": "2026-11-26T14:00:00Z"}).input_uri == "s3://b/in/2026-11-27.csv"
    # The last day of the year 9999 in UTC is the year 10000 at UTC+14: it used to overflow.
    for bad in ("9999-12-31T23:00:00Z", "2026-11-26T14:00:00 ", 1e308, True):
        with pytest.raises(InvalidRequest) as caught:
            ExecutionSpec.parse({**spec, "scheduled_time": bad})
        assert caught.value.field == "scheduled_time"
