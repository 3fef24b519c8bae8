"""A per-key request rate for the local service (`SLUICE_RATE_LIMIT`), counted by the `limits`
package in a moving window. Off by default; `limits` is imported only when it is on, and never
in Lambda, where API Gateway usage plans throttle each tenant instead."""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, NoReturn

from sluice.domain.errors import RateLimited

if TYPE_CHECKING:
    from limits import RateLimitItem

    from sluice.observability.telemetry import Telemetry
    from sluice.settings import AdmissionSettings


class RateLimit:
    def __init__(
        self, spec: str, storage: str = "memory://", *, namespace: str = "sluice", what: str = "this key", field: str = "key", telemetry: Telemetry | None = None
    ) -> None:  # fmt: skip
        from limits import parse_many
        from limits.aio.strategies import MovingWindowRateLimiter
        from limits.storage import storage_from_string

        self.items = parse_many(spec)
        # The edge runs on the event loop: an async storage never blocks it on a remote store.
        uri = storage if storage.startswith("async+") else f"async+{storage}"
        # Redis through redis-py's asyncio client (the `redis` package), not limits' default, coredis.
        options = {"implementation": "redispy"} if uri.startswith("async+redis") else {}
        self.strategy = MovingWindowRateLimiter(storage_from_string(uri, **options))
        self.namespace, self.what, self.field = namespace, what, field
        self.telemetry = telemetry  # told of every refusal, as admission tells it (`Telemetry.refused`)

    @classmethod
    def from_settings(cls, settings: AdmissionSettings, telemetry: Telemetry | None = None) -> RateLimit | None:
        return cls(settings.rate_limit, settings.rate_limit_storage, telemetry=telemetry) if settings.rate_limit else None

    async def check(self, subject: str, tenant: str | None = None) -> None:
        """Count one request of `subject` (an API key id, of `tenant`); RateLimited when it is over."""
        # Every window is tested before any is counted: a refused request costs nothing.
        for item in self.items:
            if not await self.strategy.test(item, self.namespace, subject):
                await self._refuse(item, subject, tenant)
        for item in self.items:
            if not await self.strategy.hit(item, self.namespace, subject):  # another request won the race
                await self._refuse(item, subject, tenant)

    async def _refuse(self, item: RateLimitItem, subject: str, tenant: str | None) -> NoReturn:
        stats = await self.strategy.get_window_stats(item, self.namespace, subject)
        wait = max(1, math.ceil(stats.reset_time - time.time()))
        if self.telemetry is not None and tenant is not None:
            self.telemetry.refused(tenant=tenant, code=RateLimited.code)
        raise RateLimited(
            f"{self.what} is over its rate of {item}: retry in {wait} s",
            field=self.field,
            retry_after_s=wait,
            limit=str(item),
        )

