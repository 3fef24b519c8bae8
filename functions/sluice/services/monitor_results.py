"""The results of each closed monitoring window, kept as history: one JSON document per
deployment and window, `<batch root>monitor/<tenant>/<deployment>/<window start>.json` (the
start in UTC, `2026-11-26T150000Z`: names sort in time order), in the batch bucket on AWS
(the bucket's own encryption) and in the batch folder locally (owner-only). A window closed
again (a retried schedule) writes the same document again.

On AWS the scheduled monitoring function writes them; `sluice serve` has a thread
(`WindowCloser`) that closes each window once it has ended (and the last one at its start).

`history` reads them back, the caller's tenant's only, newest first, a page at a time. A
document keeps the window as it was closed; the model quality it shows is computed when it is
read, from the labels joined to the window's predictions so far (the registry's outcomes, which
every label post adds to, however late), the quality written at close kept beside it as
`quality_at_close`. Rewriting the documents as labels come was not chosen: two label posts
for one window (two containers) would each read, change and write it, one losing the other's
labels, and the API would need to write where only the scheduled function writes.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from typing import TYPE_CHECKING, Any

from sluice.domain.objects import made_at_revision
from sluice.polling import Poller

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from sluice.batch.filestore import FileStore
    from sluice.domain import Principal
    from sluice.services.monitoring import MonitorService

PREFIX = "monitor/"
STAMP = "%Y-%m-%dT%H%M%SZ"
HISTORY_LIMIT = 24  # windows a page by default (a day of hourly windows)
MAX_HISTORY = 168  # and at most (a week): each is one read of the batch store


def result_uri(root: str, tenant: str, deployment: str, window_start: int) -> str:
    return f"{_folder(root, tenant, deployment)}{dt.datetime.fromtimestamp(window_start, dt.UTC).strftime(STAMP)}.json"


def _folder(root: str, tenant: str, deployment: str) -> str:
    return f"{root}{PREFIX}{tenant}/{deployment}/"


def parse_when(text: str | None, *, field: str, now: float) -> float | None:
    """A bound of the history as a query string or the command line gives it, read as every
    text time is (`parse_time`: RFC 3339 or a duration ago, `24h`); None where none is given."""
    from sluice.domain.values import parse_time

    return None if text is None else parse_time(text, field=field, now=now)


def _start(name: str) -> int | None:
    """The window start a document's name says (`2026-11-26T150000Z.json`); None for any other name."""
    try:
        return int(dt.datetime.strptime(name, STAMP + ".json").replace(tzinfo=dt.UTC).timestamp())
    except ValueError:
        return None


class MonitorResults:
    """Closes windows (`MonitorService.closed`) and writes each deployment's result."""

    def __init__(self, monitor: MonitorService, files: FileStore, root: str) -> None:
        self.monitor = monitor
        self.files = files
        self.root = root  # the batch root: `s3://<batch bucket>/`, or the local batch folder's URL

    def close(self, at: float) -> Iterator[tuple[str, dict[str, Any] | None, Exception | None]]:
        """For each deployment with a baseline, in every tenant: the tenant, its closed window
        (None when the deployment or its baseline is gone), or the error that stopped it. Each
        window closed is written before it is yielded."""
        for tenant, name in self.monitor.registry.monitored():
            try:
                closed = self.monitor.closed(tenant, name, at=at)
                if closed is not None:
                    self.write(tenant, closed)
            except Exception as exc:  # one broken record must not hide every other deployment
                yield tenant, {"deployment": name}, exc
                continue
            yield tenant, closed, None

    def write(self, tenant: str, closed: dict[str, Any]) -> str:
        start = int(closed["window_start"])
        doc = {
            "tenant": tenant, **closed, "window_end": start + self.monitor.settings.monitor_window_s,
            "closed_at": round(time.time(), 3),
        }  # fmt: skip
        uri = result_uri(self.root, tenant, closed["deployment"], start)
        self.files.write_bytes(uri, json.dumps(doc, separators=(",", ":"), default=str).encode(), content_type="application/json")
        return uri

    def history(
        self, principal: Principal, name: str, *, since: float | None = None, until: float | None = None,
        before: int | None = None, limit: int = HISTORY_LIMIT,
    ) -> dict[str, Any]:  # fmt: skip
        """The closed windows of the caller's tenant's deployment that started from `since` to
        before `until` (and before `before`, the `next` of the page before), newest first, at
        most `limit`; `next`: where the next page starts (None on the last). Each is the
        document written at close with its quality as the labels so far make it (module docstring)."""
        principal.require("admin")
        from sluice.capture.reader import check_order

        check_order(since, until)  # as a capture window's
        tenant = principal.tenant
        self.monitor.registry.get_deployment(tenant, name)  # another tenant's, or none: not found
        first = made_at_revision(self.monitor.registry.deployment_history(tenant, name))
        folder = _folder(self.root, tenant, name)
        starts = sorted(
            (start for start in map(_start, self.files.names(folder)) if start is not None
             and (since is None or start >= since) and (until is None or start < until) and (before is None or start < before)),
            reverse=True,
        )  # fmt: skip
        limit = max(1, min(limit, MAX_HISTORY))
        page = starts[:limit]
        docs = []
        for start in page:
            doc = self._read(folder, start)
            if int(doc["revision"]) < first:  # a deployment's deleted before this one was made under its name: so is every older one
                starts = []
                break
            docs.append(doc)
        more = len(starts) > limit and int(self._read(folder, starts[limit])["revision"]) >= first
        qualities: dict[int, dict[int, dict[str, Any]]] = {}
        for doc in docs:
            revision = int(doc["revision"])
            if revision not in qualities:
                qualities[revision] = {q["window_start"]: q for q in self.monitor.quality(tenant, name, revision)}
            doc["quality_at_close"] = doc.get("quality")
            doc["quality"] = qualities[revision].get(int(doc["window_start"]))
        return {"deployment": name, "windows": docs, "next": page[-1] if more else None}

    def _read(self, folder: str, start: int) -> dict[str, Any]:
        doc: dict[str, Any] = json.loads(self.files.read_bytes(f"{folder}{dt.datetime.fromtimestamp(start, dt.UTC).strftime(STAMP)}.json"))
        return doc


class WindowCloser(Poller):
    """`sluice serve`'s closer: looks every `interval_s`; once a window has ended `grace_s`
    ago (every process's last flush of it written), writes its results."""

    thread_name = "sluice-monitor-windows"
    what = "monitoring windows' close"

    def __init__(
        self, results: MonitorResults, *, interval_s: float = 60.0, grace_s: float = 120.0, clock: Callable[[], float] = time.time
    ) -> None:
        super().__init__(interval_s=interval_s)
        self.results = results
        self.grace_s = grace_s
        self.clock = clock
        self.last: int | None = None

    def look(self) -> object:
        at = self.clock() - self.grace_s
        window = self.results.monitor.window_before(at)
        if window == self.last:
            return []
        done = [(tenant, closed, error) for tenant, closed, error in self.results.close(at)]
        self.last = window
        return done
