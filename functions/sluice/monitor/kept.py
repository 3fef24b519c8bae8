"""Predictions kept for their ground truth: for each answered request with an id, what it
predicted (`sluice.monitor.quality.predicted`), with its revision, variant and monitoring
window, so that a label posted later (`POST /api/v1/deployments/{name}/labels`) is joined to it
and counted in the window the prediction was made in, however late it comes.

A request costs a list append under a lock (its result held as it is); the flush, on the
statistics timer and at shutdown like profiles', turns the held answers into records and writes
them to the registry, one per request (`MonitorRegistry.keep_predictions`), each until `ttl_s`
has passed. Which deployments keep them is `mode`: `baseline` (those with a baseline, looked up
once a minute per deployment at the flush, never on the request path), `all`, or `off`. Under
`baseline` a request of a deployment the keeper found without a baseline when it last looked is
not held at all (once that finding is a minute old, the next flush looks again, so a baseline
set is seen within a minute and `flush_every_s`), and one of a deployment it has never looked
at makes it due `LOOK_SOON_S` after its last flush rather than `flush_every_s` (after a flush
or a lookup that failed, at `flush_every_s`). At a few thousand requests a second, answers held
30 s only to be left at the flush were a few hundred thousand objects for the garbage collector
to walk (pauses of tens of milliseconds). At most `max_rows` rows per deployment, revision,
variant and window are kept by one process; the rest are counted (`not_kept`) and left. A
record too large for the registry to store ever is counted (`too_large`), logged and left; the
others are written.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from sluice.monitor.quality import predicted
from sluice.observability import get_logger
from sluice.registry.scope import use_tenant
from sluice.stats import timer

if TYPE_CHECKING:
    from collections.abc import Callable

    from sluice.domain.results import InferenceResult
    from sluice.domain.signature import Signature
    from sluice.registry import MonitorRegistry

Key = tuple[str, str, int, str]  # tenant, deployment, revision, variant
MAX_HELD = 100_000  # requests held unwritten (a registry refusing writes) before new ones are left
MONITORED_TTL_S = 60.0
LOOK_SOON_S = 1.0  # a deployment not looked at yet: the flush that looks comes this soon after the last


class PredictionKeeper(timer.Flushed):
    registry: MonitorRegistry

    def __init__(
        self,
        registry: MonitorRegistry,
        *,
        mode: str = "baseline",
        window_s: int = 3600,
        flush_every_s: float = 30.0,
        ttl_s: int = 14 * 86400,
        max_rows: int = 100_000,
        timed: bool | None = None,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        """`clock`: wall-clock seconds (the windows); `monotonic`: seconds for the flushes' and
        the baseline lookups' ages."""
        super().__init__(registry, flush_every_s=flush_every_s, timed=timed)
        self.monotonic = monotonic
        self._last_flush = monotonic()
        self.mode = mode
        self.window_s = window_s
        self.ttl_s = ttl_s
        self.max_rows = max_rows
        self.clock = clock
        self._held: list[tuple[Key, int, str, Signature, InferenceResult]] = []
        self._rows: dict[tuple[Key, int], int] = {}  # rows taken per window (the cap)
        self._monitored: dict[tuple[str, str], tuple[bool, float]] = {}
        self.not_kept = 0
        self.too_large = 0  # requests whose record the registry cannot store (DynamoDB's 400 KB item)
        self._unknown = False  # something held for a deployment never looked at: looked at soon (`due`)
        self._failed = False  # the last flush failed: the next comes at `flush_every_s`, not sooner
        self._recheck: set[tuple[str, str]] = set()  # deployments found without a baseline over a minute ago, requested since

    def observe(self, key: Key, signature: Signature, result: InferenceResult, request_id: str | None, rows: int) -> None:
        """One answered request (`key`: tenant, deployment, revision, variant)."""
        if request_id is None or self.mode == "off":
            return
        unknown = False
        if self.mode == "baseline":
            deployment = key[:2]
            found = self._monitored.get(deployment)
            if found is None:
                unknown = True  # never looked at: looked at soon (`due`)
            elif not found[0]:  # no baseline when last looked at: nothing held
                if self._stale(found) and deployment not in self._recheck:
                    with self._lock:  # the next flush looks again
                        self._recheck.add(deployment)
                        self._watched()
                return
        window = int(self.clock()) // self.window_s * self.window_s
        with self._lock:
            taken = self._rows.get((key, window), 0)
            if taken + rows > self.max_rows or len(self._held) >= MAX_HELD:
                self.not_kept += rows
                return
            self._rows[(key, window)] = taken + rows
            self._held.append((key, window, request_id, signature, result))
            if unknown:
                self._unknown = True
            self._watched()

    # Flushing (the timer's interface, `timer.Flushed`) --------------------------------------------
    def pending(self) -> bool:
        return bool(self._held) or bool(self._recheck)

    def due(self) -> bool:
        if not self._held and not self._recheck:
            return False
        since = self.monotonic() - self._last_flush
        return since >= self.flush_every_s or (self._unknown and not self._failed and since >= LOOK_SOON_S)

    def flush(self) -> bool:
        """Write every request held; what the registry refuses is kept for the next flush."""
        with self._flushing:
            self._last_flush = self.monotonic()
            current = int(self.clock()) // self.window_s * self.window_s
            with self._lock:
                taken, self._held, self._unknown = self._held, [], False
                recheck, self._recheck = self._recheck, set()
                self._rows = {k: n for k, n in self._rows.items() if k[1] >= current}
            groups: dict[tuple[str, str], list[tuple[Key, int, str, Signature, InferenceResult]]] = {}
            for entry in taken:
                groups.setdefault(entry[0][:2], []).append(entry)
            failed: Exception | None = None
            for (tenant, deployment), entries in groups.items():
                try:
                    with use_tenant(tenant):
                        if self._keeps(tenant, deployment):
                            records = [r for r in map(_record, entries) if r is not None]
                            if records:
                                too_large = self.registry.keep_predictions(tenant, deployment, records, expires_at=time.time() + self.ttl_s)
                                self._count_too_large(tenant, deployment, too_large)
                except Exception as exc:  # kept, to be tried again
                    failed = exc
                    with self._lock:
                        self._held[:0] = entries[: max(0, MAX_HELD - len(self._held))]
            unlooked: Exception | None = None
            for tenant, deployment in recheck.difference(groups):  # nothing held: only looked at again
                try:
                    with use_tenant(tenant):
                        self._keeps(tenant, deployment)
                except Exception as exc:  # the old finding stands; its deployment's next request asks again
                    unlooked = exc
            self._failed = failed is not None or unlooked is not None
            if unlooked is not None:
                get_logger().warning("monitoring baselines not looked up again: the last findings stand", extra={"error": repr(unlooked)})
            if failed is not None:
                get_logger().warning("kept predictions not written: held to try again", extra={"error": repr(failed)})
            return failed is None

    def _count_too_large(self, tenant: str, deployment: str, request_ids: list[str]) -> None:
        """Records the registry can never store are left, each counted and logged: held, they
        would stop every later record of their deployment."""
        self.too_large += len(request_ids)
        for request_id in request_ids:
            get_logger().error("kept prediction too large to store: left", extra={"tenant": tenant, "deployment": deployment, "request_id": request_id})

    def _keeps(self, tenant: str, deployment: str) -> bool:
        if self.mode == "all":
            return True
        found = self._monitored.get((tenant, deployment))
        if found is None or self._stale(found):
            found = (self.registry.has_baseline(tenant, deployment), self.monotonic())
            self._monitored[(tenant, deployment)] = found
        return found[0]

    def _stale(self, found: tuple[bool, float]) -> bool:
        """A baseline lookup (found, when) over `MONITORED_TTL_S` old: looked up again at a flush."""
        return self.monotonic() - found[1] > MONITORED_TTL_S

    def _drop(self, *, refused: bool) -> int:
        if not refused:
            return 0
        lost, self._held, self._unknown = len(self._held), [], False
        self._recheck = set()
        return lost

    def _dropped(self, lost: int) -> None:
        if lost:
            get_logger().error("kept predictions dropped", extra={"requests": lost})


def _record(entry: tuple[Key, int, str, Signature, InferenceResult]) -> dict[str, Any] | None:
    (_, _, revision, variant), window, request_id, signature, result = entry
    said = predicted(signature, result)
    if said is None:
        return None
    return {"request_id": request_id, "revision": revision, "variant": variant, "window": window, **said}
