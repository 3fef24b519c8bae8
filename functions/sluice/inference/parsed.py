"""Deployments' policies, parsed once per write rather than once per read.

A process re-reads a deployment each time its cached copy expires (`deployment_cache_ttl_s`).
A re-read that finds the very record it read before hands back the objects it parsed then,
the deployment and its policy's node: what a node works out once (a sequence's plans, a
transform's compiled ops, `PredictionService.resolve`'s derived signatures) holds for as long
as the policy does, not for one TTL. A record that differs in anything is taken as read; its
node is parsed anew unless its policy is the same (a node is the policy's alone: parsed from
it and nothing else). So a change (a new revision, a rollout's step, a weight) is seen exactly
as soon as before.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sluice.caching import keep
from sluice.domain.policy import parse_policy

if TYPE_CHECKING:
    from sluice.domain import Deployment
    from sluice.domain.policy import Node

MAX_HELD = 4096  # deployments whose last parse is held, across tenants


class ParsedPolicies:
    def __init__(self, max_items: int = MAX_HELD) -> None:
        self.max_items = max_items
        self.parses = 0  # policies parsed: how often a re-read could not reuse one
        self._last: dict[tuple[str, str], tuple[Deployment, Node]] = {}

    def of(self, dep: Deployment) -> tuple[Deployment, Node]:
        """`dep` and its parsed policy; the pair held from the last read where `dep` equals it."""
        key = (dep.tenant, dep.name)
        last = self._last.get(key)
        if last is not None:
            held, node = last
            if held == dep:  # every field, the policy's whole tree included (a few µs, once per TTL)
                return last
            if held.policy == dep.policy:
                return self._keep(key, (dep, node))
        node = parse_policy(dep.policy)
        self.parses += 1
        return self._keep(key, (dep, node))

    def _keep(self, key: tuple[str, str], pair: tuple[Deployment, Node]) -> tuple[Deployment, Node]:
        return keep(self._last, key, pair, self.max_items)

    def forget(self, tenant: str, name: str) -> None:
        self._last.pop((tenant, name), None)
