"""What a lookup step did (`Looked`: its outputs, its store calls, the rows the feature cache
answered) and how it is reported (`sluice.runtimes.lookups`): the step's line in the answer's
`steps`, and, in Lambda, one log line per lookup that is also an EMF record, `LookupCalls` and
`LookupErrors` (a store that failed: 5xx), with `LookupCacheHits` and `LookupCacheMisses` for a
cached lookup, which the observability stack alarms on as a rate.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, NamedTuple

from sluice.millis import ms3
from sluice.observability import get_logger
from sluice.observability.formatter import log_info

if TYPE_CHECKING:
    import numpy as np

    from sluice.domain.lookups import Lookup


class Looked(NamedTuple):
    """A lookup's outputs, its store calls, and the rows the feature cache answered and those
    whose entity was read from the store (None, None: not cached)."""

    outputs: dict[str, np.ndarray]
    store_calls: int
    cache_hits: int | None = None
    cache_misses: int | None = None

    def report(self, step: str, ms: float) -> dict[str, Any]:
        """The step's line in the answer's `steps`."""
        out = {"name": step, "kind": "lookup", "latency_ms": ms3(ms), "store_calls": self.store_calls}
        return out if self.cache_hits is None else out | {"cache_hits": self.cache_hits, "cache_misses": self.cache_misses}


def log_lookup(
    namespace: str | None, emf_meta: dict[bool, list[dict[str, Any]]], node: Lookup, tenant: str, looked: Looked | None, *, failed: bool
) -> None:
    """One lookup's log line and EMF record in `namespace`; `emf_meta`: the records' metadata
    kept by shape (cached or not), built on first use."""
    cached = looked is not None and looked.cache_hits is not None
    fields: dict[str, Any] = {"tenant": tenant, "store": node.store, "table": node.table, "store_calls": looked.store_calls if looked else 0}
    fields["LookupCalls"], fields["LookupErrors"] = 1.0, float(failed)
    if cached:
        fields["LookupCacheHits"], fields["LookupCacheMisses"] = float(looked.cache_hits or 0), float(looked.cache_misses or 0)  # type: ignore[union-attr]
    meta = emf_meta.get(cached)
    if meta is None:  # the record's metadata, built once per shape (cached or not)
        from sluice.observability.telemetry import emf

        names = ("LookupCalls", "LookupErrors", *(("LookupCacheHits", "LookupCacheMisses") if cached else ()))
        meta = emf_meta[cached] = emf(namespace, [[]], dict.fromkeys(names, (0.0, "Count")))["CloudWatchMetrics"]  # type: ignore[arg-type]
    fields["_aws"] = {"Timestamp": int(time.time() * 1000), "CloudWatchMetrics": meta}
    log_info(get_logger(), "lookup", fields)
