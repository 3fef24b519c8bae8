"""At which steady traffic each runtime is the cheapest: the rate axis cut into ranges, each with
the interactive runtime (meeting the p99 target, if any) that costs least per million there.

Per-request prices (Lambda on demand, SageMaker serverless) are flat in the rate; runtimes that
pay for instances (managed instances, real-time endpoints) fall as traffic spreads their hours
over more requests, stepping up where another instance is needed. The cheapest is read on a grid
of `PER_DECADE` rates a decade, and each change between two grid rates is pinned by bisection
to a relative `TOLERANCE` (a runtime cheapest only over a band narrower than a grid step, where
two instance staircases cross, can be missed).
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from sluice.cost import model

if TYPE_CHECKING:
    from collections.abc import Callable

LOW, HIGH = 1e-4, 1e4  # req/s: the curves' span
PER_DECADE = 16
TOLERANCE = 1e-6


def cheapest_at(prices: dict[str, Any], work: model.Workload, latencies: dict[str, model.Measured],
                p99_ms: float | None) -> Callable[[float], str | None]:  # fmt: skip
    """The cheapest interactive runtime meeting `p99_ms` at a rate (None: none meets it)."""

    def best(rate: float) -> str | None:
        found = model.recommend(model.options(prices, replace(work, rps=rate), latencies), p99_ms)
        return None if found is None else found.runtime

    return best


def grid(low: float = LOW, high: float = HIGH) -> list[float]:
    """The rates the cheapest is read at: `PER_DECADE` a decade, `low` and `high` included."""
    steps = round(math.log10(high / low) * PER_DECADE)
    return [low * (high / low) ** (i / steps) for i in range(steps + 1)]


def ranges(best: Callable[[float], str | None], low: float = LOW, high: float = HIGH) -> list[dict[str, Any]]:
    """`[{"runtime", "from_rps", "to_rps"}, ...]`, ascending and contiguous from `low` to `high`,
    neighbours naming different runtimes (`runtime` None: none meets the target there)."""
    rates = grid(low, high)
    names = [best(rate) for rate in rates]
    edges: list[tuple[float, str | None]] = [(low, names[0])]
    for i in range(len(rates) - 1):
        if names[i] != names[i + 1]:
            edges += _edges(best, rates[i], rates[i + 1], names[i], names[i + 1])
    bounds = [rate for rate, _ in edges[1:]] + [high]
    return [
        {"runtime": name, "from_rps": start, "to_rps": end}
        for (start, name), end in zip(edges, bounds, strict=True)
    ]


def _edges(best: Callable[[float], str | None], low: float, high: float, left: str | None, right: str | None
           ) -> list[tuple[float, str | None]]:  # fmt: skip
    """Where the cheapest changes between two rates (`left` at `low`, `right` at `high`): each
    change as (the first rate found with the new runtime, that runtime)."""
    out: list[tuple[float, str | None]] = []
    while left != right:
        lo, hi = low, high
        while hi / lo > 1 + TOLERANCE:
            mid = math.sqrt(lo * hi)
            if best(mid) == left:
                lo = mid
            else:
                hi = mid
        left, low = best(hi), hi
        out.append((hi, left))
    return out

