"""Reading captured records back, one tenant's deployment over a time window: JSON Lines
files under a folder (locally) or objects under `capture/` in the batch bucket (AWS, as the
Firehose delivery stream writes them). Partitions outside the window are never opened."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from sluice.clients import lazy_client
from sluice.domain.errors import InvalidRequest
from sluice.domain.objects import made_at_revision
from sluice.domain.values import parse_time, parse_version

if TYPE_CHECKING:
    from collections.abc import Iterator
    from typing import Unpack

    from sluice.clients import AwsArgs
    from sluice.domain.errors import SluiceError
    from sluice.registry.ports import DeploymentRegistry

MAX_WINDOW_S = 31 * 86400  # a read of capture (a replay, a baseline) covers at most 31 days


def capture_window(since: Any, until: Any, *, now: float, what: str, field: str = "") -> tuple[float, float]:
    """The (start, end) of the capture `what` reads: `since` and `until` as
    `sluice.domain.values.parse_time` reads them, a duration ago included (`2h`); `until` None
    is `now`. A time that does not read, `until` before `since`, or more than `MAX_WINDOW_S`
    after it: a 422 naming `field` + `since` or `until`, whichever reads it (a replay, a
    baseline)."""
    start = parse_time(since, field=f"{field}since", now=now)
    end = now if until is None else parse_time(until, field=f"{field}until", now=now)
    check_order(start, end, field=f"{field}until")
    if end - start > MAX_WINDOW_S:
        raise InvalidRequest(f"{what} reads at most 31 days of capture", field=f"{field}since")
    return start, end


def check_order(since: float | None, until: float | None, *, field: str = "until", error: type[SluiceError] | None = None) -> None:
    """A window's `until` after its `since` (either open: any), or `error` (by default a 422)
    naming `field`: a capture read's, a monitoring history's."""
    if since is not None and until is not None and until <= since:
        raise (error or InvalidRequest)("until must come after since", field=field)


class CaptureReader(Protocol):
    def records(self, tenant: str, deployment: str, since: float, until: float) -> Iterator[dict[str, Any]]:
        """Records of `tenant`'s `deployment` with `since <= time < until` (epoch seconds)."""
        ...


def deployment_records(
    reader: CaptureReader, registry: DeploymentRegistry, tenant: str, deployment: str, since: float, until: float
) -> Iterator[dict[str, Any]]:
    """`reader.records` of the deployment now under this name: one captured at a revision
    before it was made was another's, deleted before it (`made_at_revision`)."""
    first = made_at_revision(registry.deployment_history(tenant, deployment))
    return (r for r in reader.records(tenant, deployment, since, until) if int(r.get("revision") or first) >= first)


def _hours(since: float, until: float) -> list[dt.datetime]:
    start = dt.datetime.fromtimestamp(since, dt.UTC).replace(minute=0, second=0, microsecond=0)
    end = dt.datetime.fromtimestamp(until, dt.UTC)
    hours = []
    while start <= end:
        hours.append(start)
        start += dt.timedelta(hours=1)
    return hours


def _lines(text: str | bytes, since: float, until: float) -> Iterator[dict[str, Any]]:
    """Records in the window. Times are compared as text (ISO 8601 in UTC, `Z`, milliseconds:
    text order is time order), so a record is parsed once and its time never."""
    import orjson

    low, high = _stamp(since), _stamp(until)
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            record = orjson.loads(line)
            at = record["time"]
            if not isinstance(at, str):
                raise TypeError(at)
        except (ValueError, KeyError, TypeError):
            yield {"unreadable": bytes(line[:200]).decode("utf-8", "replace") if isinstance(line, bytes) else line[:200]}
            continue
        if low <= at < high:
            wrong = _ill_formed(record)
            if wrong is not None:  # read as what it is not, it stopped a whole replay (a 500) or counted negative rows
                shown = bytes(line[:200]).decode("utf-8", "replace") if isinstance(line, bytes) else line[:200]
                rows = record.get("rows")
                yield {"unreadable": f"{wrong}: {shown}", **({"rows": rows} if _count(rows) else {})}
                continue
            yield record


def _count(value: Any) -> bool:
    return type(value) is int and value >= 0


def _ill_formed(record: Any) -> str | None:
    """What is wrong with a captured record's shape, if anything: checked once as it is read, so
    every reader (replay, monitoring from capture) takes only records of the shape it expects."""
    if not isinstance(record, dict):
        return "not an object"
    if "rows" in record and not _count(record["rows"]):
        return "rows is not a count"
    if record.get("revision") is not None and type(record["revision"]) is not int:
        return "revision is not a whole number"
    if record.get("version") is not None:
        try:  # the rule every version is read by (a version kept as its text, "1", reads as 1)
            parse_version(record["version"], field="version")
        except InvalidRequest:
            return "version is not a version"
    for name in ("model", "variant"):
        if record.get(name) is not None and not isinstance(record[name], str):
            return f"{name} is not text"
    for part in ("inputs", "outputs"):
        tensors = record.get(part)
        if tensors is None:
            continue
        if not isinstance(tensors, dict):
            return f"{part} is not an object of tensors"
        for tensor in tensors.values():
            if not isinstance(tensor, dict) or not isinstance(tensor.get("datatype"), str) or not (
                isinstance(tensor.get("shape"), list) and all(_count(d) for d in tensor["shape"])
            ) or ("data" in tensor and not isinstance(tensor["data"], list)):
                return f"{part} holds a tensor that is not one"
    return None


def _stamp(at: float) -> str:
    return dt.datetime.fromtimestamp(at, dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class FolderCapture:
    def __init__(self, root: Path | str) -> None:
        self.root = Path(root)

    def records(self, tenant: str, deployment: str, since: float, until: float) -> Iterator[dict[str, Any]]:
        base = self.root / f"tenant={tenant}" / f"deployment={deployment}"
        for hour in _hours(since, until):
            folder = base / f"dt={hour:%Y-%m-%d}" / f"hour={hour:%H}"
            for path in sorted(folder.glob("*.jsonl")) if folder.is_dir() else ():
                yield from _lines(path.read_bytes(), since, until)


class S3Capture:
    """`s3://<bucket>/<prefix>tenant=…/deployment=…/dt=…/hour=…/<objects>`."""

    def __init__(self, bucket: str, prefix: str = "capture/", **aws: Unpack[AwsArgs]) -> None:
        self.bucket = bucket
        self.prefix = prefix
        self._s3 = lazy_client("s3", aws, region=aws.get("region"))

    @property
    def client(self) -> Any:
        return self._s3()

    def records(self, tenant: str, deployment: str, since: float, until: float) -> Iterator[dict[str, Any]]:
        for hour in _hours(since, until):
            where = f"{self.prefix}tenant={tenant}/deployment={deployment}/dt={hour:%Y-%m-%d}/hour={hour:%H}/"
            for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=where):
                for item in page.get("Contents", []):
                    body = self.client.get_object(Bucket=self.bucket, Key=item["Key"])["Body"].read()
                    yield from _lines(body, since, until)
