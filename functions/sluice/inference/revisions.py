"""Deployments as they stood at an earlier revision: what a request pinned to one is served by (a
batch job's, pinned when it started: one job is scored by one policy), read from the name's
history (a revision's policy never changes) and kept briefly per process."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import TYPE_CHECKING

from sluice.caching import TTLCache
from sluice.domain.errors import NotFound
from sluice.domain.objects import made_at_revision, policy_at_revision
from sluice.domain.policy import parse_policy

if TYPE_CHECKING:
    from sluice.domain import Deployment
    from sluice.domain.policy import Node
    from sluice.registry import Registry


class Revisions:
    def __init__(self, registry: Registry, ttl_s: float) -> None:
        self.registry = registry
        self._kept: TTLCache[tuple[str, str, int], tuple[Deployment, Node]] = TTLCache(ttl_s)

    async def at(self, dep: Deployment, revision: int) -> tuple[Deployment, Node]:
        """`dep` as it stood at `revision`, another of its revisions than the one read here (an
        earlier one, or a later one this process has not read yet); NotFound where the history
        no longer holds it (the deployment deleted, or deleted and made again)."""
        key = (dep.tenant, dep.name, revision)
        found = self._kept.get(key)
        if found is not None:
            return found
        history = await asyncio.to_thread(self.registry.deployment_history, dep.tenant, dep.name)
        policy = policy_at_revision(history, revision)
        if policy is None:
            why = "the deployment was deleted and made again since" if revision < made_at_revision(history) else "its history does not hold it"
            raise NotFound(
                f"revision {revision} of deployment '{dep.name}' can no longer be read: {why} (it is at revision {dep.revision} now)",
                field="deployment",
            )
        pinned = dataclasses.replace(dep, policy=policy, revision=revision)
        return self._kept.put(key, (pinned, parse_policy(policy)))

    def clear(self) -> None:
        """A change seen (it may be a delete): earlier revisions are read again, once each."""
        self._kept.clear()
