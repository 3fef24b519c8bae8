"""The results of each closed monitoring window, kept as history: one JSON document per
deployment and window, `<batch root>monitor/<tenant>/<deployment>/<window start>.json` (the
start in UTC, `2026-11-26T150000Z`: names sort in time order), in the batch bucket on AWS
(the bucket's own encryption) and in the batch folder locally (owner-only). A window closed
again (a retried schedule) writes the same document again.

On AWS the scheduled monitoring function writes them; `sluice serve` has a thread
(`WindowCloser`) that closes each window once it has ended (and the last one at its start).
"""

from __future__ import annotations

import datetime as dt
import json
import time
from typing import TYPE_CHECKING, Any

from sluice.polling import Poller

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from sluice.batch.filestore import FileStore
    from sluice.services.monitoring import MonitorService

PREFIX = "monitor/"


def result_uri(root: str, tenant: str, deployment: str, window_start: int) -> str:
    stamp = dt.datetime.fromtimestamp(window_start, dt.UTC).strftime("%Y-%m-%dT%H%M%SZ")
    return f"{root}{PREFIX}{tenant}/{deployment}/{stamp}.json"


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
