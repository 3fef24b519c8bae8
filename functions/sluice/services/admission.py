"""Admission: whether a request may start now.

`InFlight` counts the requests each API key has in flight in this process and refuses one past
a cap (`SLUICE_MAX_IN_FLIGHT_PER_KEY`), whatever carries it: the HTTP edge, the WebSocket
route and the gRPC service all enter and leave through the same object, the container's. A
key that holds every slot with requests it never finishes (bodies sent byte by byte, streams
left open) holds only its own: another key still gets in.

One event loop does the counting (the edge, the socket route and the gRPC service run on it),
so there is no lock: `enter` and `leave` never wait. In Lambda it is off: a container takes one
request at a time, and API Gateway's usage plans and throttling bound each tenant.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

from sluice.domain.errors import TooManyInFlight

if TYPE_CHECKING:
    from collections.abc import Iterator

RETRY_AFTER_S = 1  # nothing says when a request ends: a second is a polite guess


class InFlight:
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
        held = self._held.get(key, 0) - 1
        if held > 0:
            self._held[key] = held
        else:
            self._held.pop(key, None)

    @contextlib.contextmanager
    def held(self, key: str) -> Iterator[None]:
        """`enter`, then `leave` however the block ends."""
        self.enter(key)
        try:
            yield
        finally:
            self.leave(key)

    def count(self, key: str) -> int:
        return self._held.get(key, 0)
