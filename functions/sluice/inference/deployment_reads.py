"""Reading a tenant's deployments, and the model versions they name, for predictions: each
deployment read at most once per
`deployment_cache_ttl_s`, requests that find one expired together waiting on one read (on their
event loop) rather than each queueing its own on the loop's few threads, where the last of a
burst would start late; and a change made in this process seen at once (`forget`)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from sluice.caching import TTLCache

if TYPE_CHECKING:
    from sluice.domain import Deployment, ModelVersion
    from sluice.domain.policy import Node
    from sluice.inference.parsed import ParsedPolicies
    from sluice.registry import Registry


class DeploymentReads:
    def __init__(self, registry: Registry, parsed: ParsedPolicies, ttl_s: float) -> None:
        self.registry = registry
        self.parsed = parsed  # a re-read of the same record keeps its parsed policy (and its plans)
        self.cache: TTLCache[tuple[str, str], tuple[Deployment, Node]] = TTLCache(ttl_s)
        self._reading: dict[tuple[int, tuple[str, str]], asyncio.Future[tuple[Deployment, Node]]] = {}
        self._forgotten = 0  # changes seen here (`forget`): a read one overtook is not kept
        # The versions the deployments name, trusted as long as the deployments: a number names
        # another artifact once its model is deleted and made again (numbers start again at 1).
        self.versions: TTLCache[tuple[str, str, int], ModelVersion] = TTLCache(ttl_s)

    async def of(self, tenant: str, name: str) -> tuple[Deployment, Node]:
        """The deployment and its parsed policy."""
        key = (tenant, name)
        found = self.cache.get(key)
        if found is not None:
            return found
        flight = (id(asyncio.get_running_loop()), key)
        reading = self._reading.get(flight)
        if reading is None:
            reading = self._reading[flight] = asyncio.ensure_future(self._read(key))
            reading.add_done_callback(lambda done: self._reading.pop(flight) if self._reading.get(flight) is done else None)
        return await asyncio.shield(reading)

    def cached(self, tenant: str, name: str) -> tuple[Deployment, Node] | None:
        return self.cache.get((tenant, name))

    async def version_of(self, tenant: str, model: str, number: int) -> ModelVersion:
        key = (tenant, model, number)
        found = self.versions.get(key)
        if found is None:
            found = self.versions.put(key, await asyncio.to_thread(self.registry.get_version, tenant, model, number))
        return found

    def forget(self, tenant: str, name: str) -> None:
        """Drop the cached deployment: a read of it in flight is neither joined by a later
        request nor kept (`_read`). A version's number names another artifact only once nothing
        routes to it (its model deleted, refused while deployed, and made again): a deployment
        change is where this process starts routing to one, so the versions are read again from
        here (once each)."""
        self._forgotten += 1
        for flight in [f for f in list(self._reading) if f[1] == (tenant, name)]:  # a copy: requests add to it on their loops
            self._reading.pop(flight, None)
        self.cache.pop((tenant, name))
        self.versions.clear()
        self.parsed.forget(tenant, name)

    async def _read(self, key: tuple[str, str]) -> tuple[Deployment, Node]:
        """The deployment read, kept unless a change was made here while it was read (`forget`):
        what that read found answers the requests that waited on it, not those after."""
        forgotten = self._forgotten
        found = self.parsed.of(await asyncio.to_thread(self.registry.get_deployment, *key))
        return self.cache.put(key, found) if self._forgotten == forgotten else found
