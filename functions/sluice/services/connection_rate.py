"""A WebSocket connection's message rate where no one process sees all its messages (the
WebSocket Lambda: each message may reach another container).

`SLUICE_WEBSOCKET_RATE_LIMIT` (`100/second`, `600 per minute;20/second`, …) is counted in
fixed windows in the registry (`count_message`: every rate's window tested, then all counted,
at once; DynamoDB on AWS), so every container answering the connection sees one count. A
fixed window lets a client send up to twice a rate across a window's edge; the local service
counts a moving window in memory instead (`sluice.services.ratelimit`).
"""

from __future__ import annotations

import asyncio
import math
import re
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sluice.domain.errors import RateLimited
from sluice.registry.ports import MessageWindow

if TYPE_CHECKING:
    from collections.abc import Callable

    from sluice.registry.ports import ConnectionRegistry

SECONDS = {"second": 1, "minute": 60, "hour": 3600, "day": 86_400, "month": 30 * 86_400, "year": 365 * 86_400}
_RATE = re.compile(r"\s*([1-9][0-9]*)\s*(?:/|per)\s*([1-9][0-9]*)?\s*(second|minute|hour|day|month|year)s?\s*")
KEEP_S = 60  # how long a window's count outlives the window (the table's time to live is coarse)


@dataclass(frozen=True, slots=True)
class Rate:
    count: int
    seconds: int
    text: str


def parse_rates(spec: str) -> list[Rate]:
    """The rates of a `limits`-style spec, one a window length (two of one length would share
    a window and count each message twice in it: the lower binds); ValueError naming the
    part that is not one."""
    rates: dict[int, Rate] = {}
    for part in re.split(r"[;,]", spec):
        found = _RATE.fullmatch(part)
        if found is None:
            raise ValueError(f"{part.strip()!r} is not a rate such as 100/second or 600 per minute")
        count, every, unit = found.groups()
        rate = Rate(int(count), int(every or 1) * SECONDS[unit], part.strip())
        if rate.seconds not in rates or rate.count < rates[rate.seconds].count:
            rates[rate.seconds] = rate
    return list(rates.values())


class ConnectionRate:
    """The rates of one tenant's connections, counted in the registry."""

    def __init__(self, registry: ConnectionRegistry, spec: str, tenant: str, *, clock: Callable[[], float] | None = None) -> None:
        self.registry = registry
        self.rates = parse_rates(spec)
        self.tenant = tenant
        self.clock = clock or time.time

    async def check(self, connection: str) -> None:
        """Count one message of `connection` in the window of every rate; RateLimited, and
        counted in none of them, when one is full (as on `sluice serve`: a refused message
        costs nothing)."""
        now = self.clock()
        windows = [
            MessageWindow(f"{rate.seconds}s#{int(now // rate.seconds)}", rate.count, self._ends(rate, now) + KEEP_S)
            for rate in self.rates
        ]
        full = await asyncio.to_thread(self.registry.count_message, self.tenant, connection, windows)
        if full is not None:
            rate = self.rates[full]
            wait = max(1, math.ceil(self._ends(rate, now) - now))
            raise RateLimited(
                f"this connection is over its rate of {rate.text}: retry in {wait} s",
                field="connection", retry_after_s=wait, limit=rate.text,
            )  # fmt: skip

    @staticmethod
    def _ends(rate: Rate, now: float) -> int:
        """When the window of `rate` that holds `now` ends (epoch seconds)."""
        return (int(now // rate.seconds) + 1) * rate.seconds
