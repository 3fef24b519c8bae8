"""The values a client may send as times, versions and other whole numbers: one parser per kind,
and one annotated type per kind that runs it. Path parameters, query values, body fields, the
CLI's arguments and the services' own arguments all go through these, so every door takes the
same spellings and says the same thing about the rest (a 422 naming the field).

Versions (and revisions) are whole numbers from 1 to 2**63 - 1, what SQLite's INTEGER and a
64-bit DynamoDB number both hold. Written as text they are ASCII digits without sign,
spaces or leading zeros (Python's `int()` also reads ` +٣_0 `; a URL must have one spelling);
as JSON they are integers (`1.0` and `1e3` are floats there, and refused).

Times are instants from 1970-01-01T00:00:00Z to 9999-12-30T00:00:00Z, chosen so that every
conversion made downstream (a `datetime` in any time zone, `isoformat`, `strftime`, an hour
added by the capture reader, SQLite REAL, a DynamoDB number) stays within what it can hold.
A time is written as
- RFC 3339: `2026-11-26T14:00:00Z`, `2026-11-26T15:00:00.5+01:00`; seconds and the zone may be
  left out (`2026-11-26T14:00`: a time without a zone is UTC), `T` may be `t` or a space, and a
  date alone is its midnight, UTC;
- epoch seconds: a JSON number, whole or not (never NaN, an infinity, true or false); as text
  digits would be read as a date by some and as seconds by others, so text is RFC 3339 only;
- where the field says so, a duration ago: a number and a unit, `90s`, `30m`, `2h`, `1.5d`.
Text is taken as written: surrounding spaces are refused, like any other character.
"""

from __future__ import annotations

import math
import re
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime, timedelta, timezone
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BeforeValidator, Field, StrictInt, WithJsonSchema
from pydantic_core import PydanticCustomError

from sluice.domain.errors import InvalidRequest

if TYPE_CHECKING:
    from collections.abc import Iterator

MAX_NUMBER = 2**63 - 1
EARLIEST_TIME = 0  # 1970-01-01T00:00:00Z, in epoch seconds
LATEST_TIME = 253_402_128_000  # 9999-12-30T00:00:00Z: a day short of what `datetime` holds
TIME_RANGE = "1970-01-01T00:00:00Z to 9999-12-30T00:00:00Z"

_NUMBER = re.compile(r"[1-9][0-9]{0,18}")  # [0-9], not \d: \d matches every script's digits
_MODEL = re.compile(r"[a-z0-9][a-z0-9._-]{0,62}")  # a model's name, as `check_name` takes it
_AGO = re.compile(r"(?P<n>[0-9]{1,12}(?:\.[0-9]{1,9})?)(?P<unit>[smhd])")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_RFC3339 = re.compile(
    r"(?P<year>[0-9]{4})-(?P<month>[0-9]{2})-(?P<day>[0-9]{2})"
    r"(?:[Tt ](?P<hour>[0-9]{2}):(?P<minute>[0-9]{2})(?::(?P<second>[0-9]{2})(?:\.(?P<fraction>[0-9]{1,9}))?)?"
    r"(?P<zone>[Zz]|[+-][0-9]{2}:[0-9]{2})?)?"
)
_EPOCH_START = datetime(1970, 1, 1, tzinfo=UTC)
VERSION_FORMS = f"a whole number from 1 to {MAX_NUMBER} (digits 0-9, no sign, spaces or leading zeros)"
TIME_FORMS = (
    "RFC 3339 such as 2026-11-26T14:00:00Z (UTC when it names no zone) or epoch seconds as a "
    f"JSON number, from {TIME_RANGE}"
)


class Refused(ValueError):
    """Why a value is not what its field takes (the message without the field's name)."""


def decimal(text: str, *, most: int = 18) -> int | None:
    """The count `text` writes in ASCII digits alone, at most `most` of them (a byte count,
    a header's length, a size parameter); None for anything else. `str.isdigit` also takes
    `²` and `٣`, which `int` then refuses (or reads): every such count is read here."""
    return int(text) if len(text) <= most and text.isascii() and text.isdigit() else None


# A number written as text, wherever sluice reads one (a CSV or JSON Lines cell, a header or a
# parameter a switch compares, a rollout's steps): ASCII digits with an optional sign, point and
# exponent, or nan / inf / infinity, spaces or tabs around it. Not Python's int() or float():
# no `1_0`, no digits of other scripts (Arabic-Indic ten was read as 10), no other white space.
NUMBER = re.compile(r"[ \t]*[+-]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|nan|inf|infinity)[ \t]*", re.ASCII | re.IGNORECASE)
_WHOLE = re.compile(r"[ \t]*[+-]?\d+[ \t]*", re.ASCII)
MAX_WHOLE_CHARS = 40  # a whole number read exactly up to this long (int64's are 20 at most); longer, as a float


def parse_number(text: str) -> float | None:
    """The number `text` writes (see NUMBER) as a float, or None when it is not one."""
    return float(text) if NUMBER.fullmatch(text) else None


def number_of(text: str) -> int | float | None:
    """The number `text` writes (see NUMBER), or None: a whole number as an integer, exactly (as
    a float an id past 2**53 would equal its neighbours), up to `MAX_WHOLE_CHARS` long."""
    if not NUMBER.fullmatch(text):
        return None
    if len(text) <= MAX_WHOLE_CHARS and _WHOLE.fullmatch(text):
        return int(text)
    return float(text)


def shown(value: Any) -> str:
    """A value as the client wrote it, short: for messages."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, int) and value.bit_length() > 256:  # Python writes at most 4300 digits
        return f"an integer of {value.bit_length()} bits"
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _refused(value: Any, what: str) -> Refused:
    return Refused(f"a {what} is {VERSION_FORMS}, not {shown(value)}")


# Versions and other whole numbers -------------------------------------------------------------
def _number(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise _refused(value, what)
    number = int(value) if isinstance(value, int) or _NUMBER.fullmatch(value) else 0
    if not 1 <= number <= MAX_NUMBER:
        raise _refused(value, what)
    return number


def _number_or_latest(value: Any, what: str) -> int | Literal["latest"]:
    if value == "latest":
        return "latest"
    try:
        return _number(value, what)
    except Refused:
        raise Refused(f"a {what} is 'latest' or {VERSION_FORMS}, not {shown(value)}") from None


def _model_version(value: Any, latest: bool) -> tuple[str, int | Literal["latest"]]:
    spelled = "MODEL:VERSION" + (" or MODEL (its latest)" if latest else "")
    if not isinstance(value, str):
        raise Refused(f"a model version is {spelled}, such as iris:2; not {shown(value)}")
    model, sep, number = value.partition(":")
    if not _MODEL.fullmatch(model) or not (sep or latest):
        raise Refused(f"{shown(value)} is not {spelled}, such as iris:2 (a model's name is 1-63 characters of a-z, 0-9, '.', '_' or '-')")
    if not sep:
        return model, "latest"
    try:
        return model, (_number_or_latest(number, "version") if latest else _number(number, "version"))
    except Refused as exc:
        raise Refused(f"{shown(value)} is not {spelled}: {exc}") from None


def parse_version(value: Any, *, field: str = "version", what: str = "version") -> int:
    """A version (or revision) number from a JSON integer or its text; else a 422 naming `field`."""
    try:
        return _number(value, what)
    except Refused as exc:
        raise InvalidRequest(f"{field}: {exc}", field=field) from None


def parse_version_or_latest(value: Any, *, field: str = "version") -> int | Literal["latest"]:
    """A version number, or `latest`."""
    try:
        return _number_or_latest(value, "version")
    except Refused as exc:
        raise InvalidRequest(f"{field}: {exc}", field=field) from None


def parse_model_version(value: Any, *, field: str) -> tuple[str, int]:
    """`MODEL:VERSION` as (model, version number)."""
    try:
        model, number = _model_version(value, latest=False)
    except Refused as exc:
        raise InvalidRequest(f"{field}: {exc}", field=field) from None
    return model, int(number)


def parse_model_ref(value: Any, *, field: str) -> tuple[str, int | Literal["latest"]]:
    """`MODEL:VERSION`, `MODEL:latest`, or `MODEL` (its latest version)."""
    try:
        return _model_version(value, latest=True)
    except Refused as exc:
        raise InvalidRequest(f"{field}: {exc}", field=field) from None


# Times ------------------------------------------------------------------------------------------
def _rfc3339(text: str, found: re.Match[str]) -> float:
    """Epoch seconds; compared with the range before they become a float, whose 52 bits do not
    hold every microsecond of the year 9999."""
    part = found.groupdict()
    if part["year"] == "0000":  # RFC 3339 has it, `datetime` does not: before the range anyway
        raise Refused(f"{shown(text)} is outside the times sluice takes, {TIME_RANGE}")
    try:
        zone = UTC
        if part["zone"] and part["zone"] not in "Zz":
            hours, minutes = int(part["zone"][1:3]), int(part["zone"][4:6])
            if hours > 23 or minutes > 59:
                raise ValueError("no such offset")
            sign = -1 if part["zone"][0] == "-" else 1
            zone = timezone(sign * timedelta(hours=hours, minutes=minutes))
        when = datetime(
            int(part["year"]), int(part["month"]), int(part["day"]),
            int(part["hour"] or 0), int(part["minute"] or 0), int(part["second"] or 0), tzinfo=zone,
        )  # fmt: skip
    except ValueError:
        raise Refused(f"{shown(text)} is not a date and time that exists (RFC 3339: seconds 00-59, offsets to 23:59)") from None
    # Subtracted, not `.timestamp()`: an instant past year 9999 in UTC is still compared.
    whole, fraction = (when - _EPOCH_START) // timedelta(seconds=1), (part["fraction"] or "").rstrip("0")
    if not EARLIEST_TIME <= whole <= LATEST_TIME or (whole == LATEST_TIME and fraction):
        raise Refused(f"{shown(text)} is outside the times sluice takes, {TIME_RANGE}")
    return whole + float("0." + (fraction or "0"))


def _time(value: Any, now: float | None) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | str) or (isinstance(value, float) and not math.isfinite(value)):
        raise Refused(f"a time is {_forms(now)}; not {shown(value)}")
    if isinstance(value, int | float):  # an int is compared as an int: no overflow however large
        seconds: float = value
    elif (found := _RFC3339.fullmatch(value)) is not None:
        seconds = _rfc3339(value, found)
    elif now is not None and (ago := _AGO.fullmatch(value)) is not None:
        seconds = now - float(ago["n"]) * _UNIT_S[ago["unit"]]
    else:
        raise Refused(f"a time is {_forms(now)}; not {shown(value)}")
    if not EARLIEST_TIME <= seconds <= LATEST_TIME:
        raise Refused(f"{shown(value)} is outside the times sluice takes, {TIME_RANGE}")
    return float(seconds)


def _forms(now: float | None) -> str:
    return TIME_FORMS + (", or a duration ago such as 2h, 30m, 90s or 1.5d" if now is not None else "")


def parse_time(value: Any, *, field: str, now: float | None = None) -> float:
    """Epoch seconds from a time as a client writes it (module docstring), within the range;
    given `now`, a duration ago too (`2h`). Anything else is a 422 naming `field`."""
    try:
        return _time(value, now)
    except Refused as exc:
        raise InvalidRequest(f"{field}: {exc}", field=field) from None


def isoformat(seconds: float) -> str:
    """A time in range as RFC 3339, UTC."""
    return datetime.fromtimestamp(seconds, UTC).isoformat()


# The same parsers as pydantic types -----------------------------------------------------------
def _validator(parse: Any) -> BeforeValidator:
    def run(value: Any) -> Any:
        try:
            return parse(value)
        except Refused as exc:  # pydantic puts the field's path in front, as for its own errors
            raise PydanticCustomError("invalid_value", "{reason}", {"reason": str(exc)}) from None

    return BeforeValidator(run)


# The one "now" a body's times are read against while it is validated (`one_now`): else each
# field would take its own, microseconds apart, and {"since": "1h", "until": "1h"} would be a
# window of those microseconds rather than an empty one.
_ONE_NOW: ContextVar[float | None] = ContextVar("sluice_one_now", default=None)


def _now() -> float:
    held = _ONE_NOW.get()
    if held is not None:
        return held
    import time

    return time.time()


@contextmanager
def one_now() -> Iterator[float]:
    """Within it, every `TimeOrAgo` read takes the same now (the one it yields)."""
    import time

    now = time.time()
    token = _ONE_NOW.set(now)
    try:
        yield now
    finally:
        _ONE_NOW.reset(token)


_VERSION_INT = {"type": "integer", "minimum": 1, "maximum": MAX_NUMBER}
_TIME_SCHEMA = {
    "anyOf": [
        {"type": "string", "description": "RFC 3339 (UTC when it names no zone), or a duration ago: 2h, 30m."},
        {"type": "number", "minimum": EARLIEST_TIME, "maximum": LATEST_TIME, "description": "Epoch seconds."},
    ]
}

# A model version's number: in a path, a query or a body (a JSON integer, or its digits).
VersionNumber = Annotated[int, _validator(lambda v: _number(v, "version")), WithJsonSchema(_VERSION_INT)]
# A deployment's policy revision.
RevisionNumber = Annotated[int, _validator(lambda v: _number(v, "revision")), WithJsonSchema(_VERSION_INT)]
# The same inside a policy, where only a JSON number is a number (the range is the same).
StrictVersionNumber = Annotated[StrictInt, Field(ge=1, le=MAX_NUMBER)]
# A version in a path that also takes `latest`.
VersionOrLatest = Annotated[
    int | Literal["latest"],
    _validator(lambda v: _number_or_latest(v, "version")),
    WithJsonSchema({"type": "string", "pattern": r"^(latest|[1-9][0-9]{0,18})$", "description": "A version number, or `latest`."}),
]
# A time in a body, as epoch seconds: RFC 3339, epoch seconds, or a duration ago (`2h`).
TimeOrAgo = Annotated[float, _validator(lambda v: _time(v, _now())), WithJsonSchema(_TIME_SCHEMA)]
