"""Admission: whether a request may start now, decided before its body is read.

Three counts, all of this process, each refusing at once rather than letting work queue:

- `InFlight`: the requests each API key has in flight, every route (`SLUICE_MAX_IN_FLIGHT_PER_KEY`);
  past its cap a 429 `too_many_in_flight`. A key that holds every slot with requests it never
  finishes (bodies sent byte by byte, streams left open) holds only its own.
- `Capacity`: the predictions the process works on at once, every key and tenant together
  (`SLUICE_MAX_PREDICTIONS_IN_FLIGHT`); past it a 503 `overloaded`. It bounds what a worker
  holds in memory and how long an admitted request waits behind the others: the rest are told
  to come back (Retry-After) instead of waiting in queues until their clients give up.
- and within it each tenant's share (`SLUICE_TENANT_SHARE`), held only while another tenant
  wants the process too (it has predictions in flight, or was refused for lack of room in the
  last `CONTENDED_S`): past it a 429 `tenant_overloaded`. A tenant alone may use every slot;
  once another one shows up, the first gets no new slot above its share, so the slots it gives
  back go to the other. A slot is taken before the request's body is read (it bounds the bodies
  held too); one whose body is still arriving is taken back for a tenant that finds the process
  full, from a tenant above its share (`Capacity.reading`: one slot for one request), so bodies
  trickled in for as long as each may take cannot keep another tenant out.

`Admission` puts them together for the transports: the HTTP edge, the WebSocket route and the
gRPC service all enter and leave through the same object, the container's. One event loop does
the counting (the edge, the socket route and the gRPC service run on it), so there is no lock:
`enter` and `leave` never wait. In Lambda all three are off: a container takes one request at a
time, and API Gateway's usage plans and throttling bound each tenant.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import math
import time
from typing import TYPE_CHECKING

from sluice.counting import count_down
from sluice.domain.errors import Overloaded, SluiceError, TenantOverloaded, TooManyInFlight

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from sluice.domain import Principal
    from sluice.observability import Telemetry
    from sluice.settings import AdmissionSettings

RETRY_AFTER_S = 1  # nothing says when a request ends: a second is a polite guess
CONTENDED_S = 2.0  # a tenant refused for lack of room keeps the others to their shares this long


class _Held(abc.ABC):
    """`held(key)`: `enter(key)`, then `leave(key)` however the block ends; a counter says
    what entering and leaving are (`InFlight`, `Capacity`)."""

    @abc.abstractmethod
    def enter(self, key: str) -> None: ...

    @abc.abstractmethod
    def leave(self, key: str) -> None: ...

    @contextlib.contextmanager
    def held(self, key: str) -> Iterator[None]:
        self.enter(key)
        try:
            yield
        finally:
            self.leave(key)


class InFlight(_Held):
    """Requests in flight per key id, at most `limit` each."""

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError("an in-flight cap is 1 or more")
        self.limit = limit
        self._held: dict[str, int] = {}

    def enter(self, key: str) -> None:
        """Count one more request of `key`; TooManyInFlight (429) when it already has `limit`."""
        held = self._held.get(key, 0)
        if held >= self.limit:
            raise TooManyInFlight(
                f"this key has {held} requests in flight, its most at once: retry when one has been answered",
                field="key",
                retry_after_s=RETRY_AFTER_S,
                limit=self.limit,
            )
        self._held[key] = held + 1

    def leave(self, key: str) -> None:
        """One request of `key` is over (answered, failed or abandoned)."""
        count_down(self._held, key)

    def count(self, key: str) -> int:
        return self._held.get(key, 0)


class Reading:
    """A prediction whose slot is held while its body arrives (`Capacity.reading`): the task
    waiting for it, cancelled if the slot is taken back for another tenant (`evicted`)."""

    __slots__ = ("evicted", "task", "tenant")

    def __init__(self, tenant: str, task: asyncio.Task[object] | None) -> None:
        self.tenant = tenant
        self.task = task
        self.evicted = False


class Capacity(_Held):
    """Predictions in flight in this process, at most `limit`; a tenant at most `share` of
    them while another tenant wants some (see the module's text)."""

    def __init__(self, limit: int, tenant_share: float = 1.0, *, what: str = "predictions", clock: Callable[[], float] = time.monotonic) -> None:
        if limit < 1:
            raise ValueError(f"a process's {what} in flight are 1 or more")
        if not 0 < tenant_share <= 1:
            raise ValueError("a tenant's share is more than 0 and at most 1")
        self.limit = limit
        self.what = what  # what is counted, as the refusals name it
        self.share = max(1, math.ceil(limit * tenant_share))
        self.total = 0
        self.refused = 0  # predictions refused since the process started, either way
        self._held: dict[str, int] = {}
        self._turned_away: dict[str, float] = {}  # tenants refused for lack of room, and when
        self._reading: dict[str, list[Reading]] = {}  # predictions waiting for their bodies, by tenant
        self._clock = clock

    def enter(self, tenant: str) -> None:
        """Count one more prediction of `tenant`: TenantOverloaded (429) past its share while
        another tenant wants room, Overloaded (503) when the process is full."""
        held = self._held.get(tenant, 0)
        if held >= self.share and self.share < self.limit and self._contended(tenant):
            self.refused += 1
            raise TenantOverloaded(
                f"this tenant has {held} {self.what} in flight on this worker, its share while other tenants are "
                "served: retry when one has been answered",
                field="tenant",
                retry_after_s=RETRY_AFTER_S,
                limit=self.share,
            )
        if self.total >= self.limit and not self._room_from_readers(tenant):
            self.refused += 1
            self._turned_away[tenant] = self._clock()
            raise Overloaded(
                f"the service is at capacity ({self.limit} {self.what} in flight on this worker): retry in {RETRY_AFTER_S} s",
                retry_after_s=RETRY_AFTER_S,
                limit=self.limit,
            )
        self._held[tenant] = held + 1
        self.total += 1

    def leave(self, tenant: str) -> None:
        """One prediction of `tenant` is over (answered, failed or abandoned)."""
        count_down(self._held, tenant)
        self.total = max(0, self.total - 1)

    def count(self, tenant: str | None = None) -> int:
        return self.total if tenant is None else self._held.get(tenant, 0)

    def reading(self, tenant: str, task: asyncio.Task[object] | None) -> Reading:
        """A prediction of `tenant` (entered) starts reading its body: until `read`, its slot may
        be taken back for another tenant turned away while `tenant` holds more than its share."""
        reading = Reading(tenant, task)
        self._reading.setdefault(tenant, []).append(reading)
        return reading

    def read(self, reading: Reading) -> None:
        """Its body is in (or it failed): its slot is its own until `leave`."""
        readers = self._reading.get(reading.tenant)
        if readers is not None and not reading.evicted:
            readers.remove(reading)
            if not readers:
                del self._reading[reading.tenant]

    def _room_from_readers(self, tenant: str) -> bool:
        """Room for `tenant` in a full process, taken from a tenant above its share whose
        predictions still wait for their bodies (bodies trickled in hold no slot against
        another tenant, however long each may take): the newest such prediction of the tenant
        holding the most slots (by name where two hold as many) cancelled and its slot given
        back, one slot for one request. Whether there is room now."""
        while self.total >= self.limit:
            over = [(self._held.get(other, 0), other) for other in self._reading if other != tenant and self._held.get(other, 0) > self.share]
            if not over:
                return False
            victim = min(over, key=lambda held_other: (-held_other[0], held_other[1]))[1]
            readers = self._reading[victim]
            reading = readers.pop()
            if not readers:
                del self._reading[victim]
            reading.evicted = True
            count_down(self._held, victim)  # its `leave` gives back nothing more (the edge's)
            self.total -= 1
            if reading.task is not None:
                reading.task.cancel()
        self._turned_away[tenant] = self._clock()  # it wanted room: the others keep to their shares
        return True


    def _contended(self, tenant: str) -> bool:
        """Whether another tenant wants room: it has predictions in flight here, or it was
        turned away for lack of room in the last `CONTENDED_S`."""
        if len(self._held) > 1:  # `tenant` holds some (it is at its share): another does too
            return True
        if self._turned_away:
            since = self._clock() - CONTENDED_S
            for other, at in list(self._turned_away.items()):
                if at < since:
                    del self._turned_away[other]
                elif other != tenant:
                    return True
        return False


class Admission:
    """What every transport asks before it starts a request: its key's count (every request)
    and, for a prediction, the process's capacity and the tenant's share. Either may be off."""

    def __init__(self, per_key: InFlight | None, capacity: Capacity | None, *, telemetry: Telemetry | None = None) -> None:
        self.per_key = per_key
        self.capacity = capacity
        self.telemetry = telemetry  # told of every refusal (`Telemetry.refused`)

    @classmethod
    def from_settings(cls, settings: AdmissionSettings, telemetry: Telemetry | None = None) -> Admission | None:
        """None when every count is off (in Lambda)."""
        per_key = InFlight(settings.max_in_flight_per_key) if settings.max_in_flight_per_key else None
        limit = settings.max_predictions_in_flight
        capacity = Capacity(limit, settings.tenant_share) if limit else None
        return cls(per_key, capacity, telemetry=telemetry) if per_key is not None or capacity is not None else None

    def enter(self, principal: Principal, *, key: bool = True, prediction: bool = True) -> None:
        """Count a request of `principal`: against its key (`key`) and, for a prediction,
        against the process and its tenant. Raises (counting nothing) when one is full."""
        try:
            if key and self.per_key is not None:
                self.per_key.enter(principal.subject)
            if prediction and self.capacity is not None:
                try:
                    self.capacity.enter(principal.tenant)
                except SluiceError:
                    if key and self.per_key is not None:
                        self.per_key.leave(principal.subject)
                    raise
        except SluiceError as refused:
            if self.telemetry is not None:
                self.telemetry.refused(tenant=principal.tenant, code=refused.code)
            raise

    def reading(self, principal: Principal) -> Reading | None:
        """This task's prediction (entered) is reading its body (`Capacity.reading`); None where
        predictions are not counted."""
        return self.capacity.reading(principal.tenant, asyncio.current_task()) if self.capacity is not None else None

    def read(self, reading: Reading | None) -> None:
        if reading is not None and self.capacity is not None:
            self.capacity.read(reading)

    def leave(self, principal: Principal, *, key: bool = True, prediction: bool = True) -> None:
        """The request `enter` counted is over, however it ended (a prediction whose slot was
        taken back while it read its body gives back its key's alone: `prediction` False)."""
        if prediction and self.capacity is not None:
            self.capacity.leave(principal.tenant)
        if key and self.per_key is not None:
            self.per_key.leave(principal.subject)

    @contextlib.contextmanager
    def held(self, principal: Principal, *, key: bool = True, prediction: bool = True) -> Iterator[None]:
        """`enter`, then `leave` however the block ends."""
        self.enter(principal, key=key, prediction=prediction)
        try:
            yield
        finally:
            self.leave(principal, key=key, prediction=prediction)
