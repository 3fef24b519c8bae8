"""A caching deployment's answers (`sluice.inference.prediction_cache`) on the request path:
looked up before the request runs, kept after it computed, each counted in the deployment's
statistics as Triton counts its response cache: a hit is an answered request and a
`cache_hits` (its lookup's time, and its request's), not an execution; an answer computed is a
`cache_misses`, with the time spent looking it up and keeping it."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sluice.inference.prediction_cache import answer_key, route_of
from sluice.stats.recorder import LAST_REQUEST

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    import numpy as np

    from sluice.domain import Deployment
    from sluice.domain.policy import Node
    from sluice.domain.results import Answer
    from sluice.inference.execution import Call
    from sluice.inference.prediction_cache import PredictionCache
    from sluice.inference.predictions import PredictionService
    from sluice.stats.recorder import StatsRecorder


@dataclass(slots=True)
class Lookup:
    """The request's key in the cache, the answer found there (None: a miss) and the time the
    lookup took, ms."""

    key: str
    hit: Answer | None
    ms: float


async def look_up(
    service: PredictionService, cache: PredictionCache, dep: Deployment, node: Node, call: Call, outputs: Sequence[str] | None,
    arrays: Mapping[str, np.ndarray],
) -> Lookup | None:  # fmt: skip
    """The request's answer in the cache (this process's, then the shared tier); None where
    its route is not one the cache answers (it then runs, and is not kept)."""
    looking = time.perf_counter()
    functions = service.runner.functions
    refused = None if functions is None else (lambda n: functions.refusal(n, call.tenant) is not None)  # type: ignore[arg-type]
    route = await route_of(node, call, service.referenced, refused)  # a reference as the call follows it
    if route is None:
        return None
    key = answer_key(dep, route, outputs, arrays)
    hit = cache.get(dep, key)
    if hit is None and cache.shared is not None:
        hit = await cache.get_shared(dep, key, service.version_of)
    return Lookup(key, hit, (time.perf_counter() - looking) * 1000)


async def keep(cache: PredictionCache, stats: StatsRecorder, dep: Deployment, lookup: Lookup, answer: Answer) -> None:
    """The computed `answer` kept under the lookup's key, and counted a miss."""
    keeping = time.perf_counter()
    cache.put(dep, lookup.key, answer)
    if cache.shared is not None:
        await cache.put_shared(dep, lookup.key, answer)
    ms = lookup.ms + (time.perf_counter() - keeping) * 1000
    stats.add(_deployment(dep), {"cache_misses": 1, "cache_miss_ms_sum": ms})


def count_hit(stats: StatsRecorder, dep: Deployment, lookup: Lookup, latency_ms: float) -> None:
    """A request the cache answered, `latency_ms` from its start."""
    counted: dict[str, Any] = {"requests": 1, "cache_hits": 1, "cache_hit_ms_sum": lookup.ms, "cache_hit_request_ms_sum": latency_ms}
    stats.add(_deployment(dep), counted, {LAST_REQUEST: time.time() * 1000})


def _deployment(dep: Deployment) -> tuple[str, str, int, str]:
    return (dep.tenant, dep.name, dep.revision, "deployment")
