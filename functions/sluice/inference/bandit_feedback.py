"""A bandit's side of a prediction: the rewards its variants earned so far, read for each
choice (kept briefly per revision), and a request's choices written as its one assignment, so
that feedback for the request rewards each (`DeploymentService.feedback`)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from sluice.caching import TTLCache
from sluice.domain.policy_paths import legacy_bandit_subject

if TYPE_CHECKING:
    from sluice.domain import Deployment
    from sluice.inference.execution import Call
    from sluice.inference.parsed import ParsedPolicies
    from sluice.registry.ports import Registry

REWARDS_KEPT_S = 2.0  # how long a revision's rewards are read once for every choice


class BanditFeedback:
    def __init__(self, registry: Registry, parsed: ParsedPolicies) -> None:
        self.registry, self.parsed = registry, parsed
        self._rewards: TTLCache[tuple[str, str, int], dict[str, tuple[int, float]]] = TTLCache(REWARDS_KEPT_S)

    async def rewards_of(self, dep: Deployment) -> dict[str, tuple[int, float]]:
        """The rewards of `dep`'s revision, by variant path: (count, sum). Those that releases
        which counted a nested split's variants by their own names stored for the policy's one
        bandit (`legacy_bandit_subject`) count with its variants' paths."""
        key = (dep.tenant, dep.name, dep.revision)
        found = self._rewards.get(key)
        if found is None:
            stats = await asyncio.to_thread(self.registry.read_stats, dep.tenant, dep.name, dep.revision)
            found = {}
            node = self.parsed.of(dep)[1]
            for subject, c in stats.items():
                if subject.startswith("variant:"):
                    name = subject.removeprefix("variant:")
                    name = legacy_bandit_subject(node, name) or name
                    n, total = found.get(name, (0, 0.0))
                    found[name] = (n + int(c.get("reward_n", 0)), total + float(c.get("reward_sum", 0.0)))
            self._rewards.put(key, found)
        return found

    async def assign(self, call: Call) -> None:
        """The request's bandit choices (`Call.chosen`) as its one assignment, at the revision
        that answered it."""
        dep = call.deployment
        await asyncio.to_thread(self.registry.put_assignment, dep.tenant, dep.name, call.request_id, tuple(call.chosen or ()), revision=dep.revision)
