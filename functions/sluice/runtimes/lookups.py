"""Running `lookup` steps (`sluice.domain.lookups`): the rows' entity keys read from their
inputs, each distinct key fetched once, in as few store calls as the store's limit allows (one
call for a request of up to 100 entities; a batch chunk's keys in calls of 100, several at
once), and the features put beside the rows in the rows' order.

Who may read what is one rule, `LookupSteps.refusal`, asked when a policy is saved (a 422 naming
the field) and again on every call: a DynamoDB table or a feature group must be on the tenant's
list (`lookup_sources`, set from `graphs.lookups` in the deployment's config, with the grants
to match), and so must a Feast feature view, read through the operator's Feast repository
(`lookup_feast_repo`, `{tenant}` filled in; `sluice.runtimes.feast_store`); a SQLite table is
read from the tenant's own file (`lookup_sqlite`, `{tenant}` filled in), locally only.

A value that is missing (its entity, its feature, or a null), or whose record is older than
`max_age_s` (or has no event time to tell), takes the feature's default; without one the
request fails with a 422 naming the input, the key and the entity, so a batch job fails that
record alone. A store's failure maps as a runtime's: throttling 503, a store that refuses or
holds values that are not of the declared type 502, the deadline 504. In Lambda each lookup
writes one log line that is also an EMF record (`sluice.runtimes.lookup_reports`).

A lookup with a cache time to live (`ttl`: its `cache_ttl_s`, else the operator's default, at
most its `max_age_s`) serves rows whose entity it read within that time from the feature cache
(`sluice.runtimes.lookup_cache`) and reads only the others' entities; the rules above are
applied to what the cache holds as to what the store answers.

A batch job's Parquet text key column comes with its dictionary codes
(`sluice.codecs.coded_text`): its distinct keys are known from the codes, not found row by row,
and a held SQLite table maps the dictionary once (`sluice.runtimes.sqlite_held`).
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from sluice.caching import keep
from sluice.clients import lazy_client
from sluice.codecs.coded_text import coded
from sluice.domain.errors import (
    DeadlineExceeded,
    Forbidden,
    SluiceError,
)
from sluice.inline import timeout
from sluice.runtimes.feature_stores import (
    DynamoStore,
    Found,
    SageMakerStore,
    SqliteStore,
)
from sluice.runtimes.lookup_reports import Looked, log_lookup
from sluice.runtimes.lookup_values import (
    Values,
    coded_entities,
    distinct,
    from_found,
    hashes_of,
    keys_of,
    missing,
    spread,
    store_keys,
)

if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Unpack

    from sluice.clients import AwsSource
    from sluice.domain.lookups import Lookup
    from sluice.runtimes.feature_stores import FeatureStore, Key
    from sluice.runtimes.lookup_cache import FeatureCache
    from sluice.runtimes.lookup_values import Entities
    from sluice.settings import LookupSettings


_TYPES = {kind: "S" if kind in "OUS" else "N" for kind in "biufcmMOSUV"}  # a key's type in the store, by its input's dtype kind
_ONE_TYPE = {kind: (kind_type,) for kind, kind_type in _TYPES.items()}  # the same, as the types of a lookup of one key
MAX_READINGS = 1024  # lookups (a policy's node, a tenant) whose `_Reading` is kept


class _Reading(NamedTuple):
    """What every call of one lookup node for one tenant shares, worked out on its first call
    that may read (`LookupSteps._reading`) and kept with the settings it was worked out under:
    the store, the inputs holding the keys, the key and feature names as the store is asked for
    them, and the feature cache's time to live."""

    node: Lookup
    settings: LookupSettings
    store: FeatureStore
    inputs: tuple[str, ...]
    key_names: tuple[str, ...]
    features: tuple[str, ...]
    ttl: float


class LookupSteps:
    """`dynamodb`/`featurestore`: clients to use (a test's); else built on first use from
    `clients`. `sleep`: the backoff's between calls with unprocessed keys. `clock`: wall-clock
    seconds, for `max_age_s` and the feature cache (`sluice.runtimes.lookup_cache`; none when
    `lookup_cache_entries` is 0)."""

    def __init__(
        self,
        settings: LookupSettings,
        *,
        mode: str,
        dynamodb: Any = None,
        featurestore: Any = None,
        sleep: Any = time.sleep,
        metrics_namespace: str | None = None,
        clock: Any = time.time,
        **aws: Unpack[AwsSource],
    ) -> None:
        self.settings = settings
        self.metrics_namespace = metrics_namespace  # None: no EMF lines (locally)
        self.mode = mode
        self._dynamodb = lazy_client("dynamodb", aws, given=dynamodb, max_pool_connections=settings.lookup_concurrency * 2)
        self._featurestore = lazy_client("sagemaker-featurestore-runtime", aws, given=featurestore, max_pool_connections=settings.lookup_concurrency * 2)
        self._sleep = sleep
        self._stores: dict[str, FeatureStore] = {}
        self._lock = threading.Lock()
        self.clock = clock
        self._emf_meta: dict[bool, list[dict[str, Any]]] = {}
        self._readings: dict[tuple[int, str], _Reading] = {}
        self.cache: FeatureCache | None = None
        if settings.lookup_cache_entries > 0:
            from sluice.runtimes.lookup_cache import FeatureCache

            self.cache = FeatureCache(settings.lookup_cache_entries, clock)

    # Who may read what ----------------------------------------------------------------------
    def refusal(self, node: Lookup, tenant: str) -> str | None:
        """Why `tenant` may not read `node`'s store, or None when it may."""
        if node.store == "sqlite":
            if self.mode == "aws":
                return "on AWS a lookup reads a DynamoDB table or a SageMaker feature group: SQLite lookups are local only"
            if not self.settings.lookup_sqlite:
                return "SQLite lookups are off here: the operator names a features file (SLUICE_LOOKUP_SQLITE)"
            if "{tenant}" in self.settings.lookup_sqlite or node.source in self.settings.lookup_sources.get(tenant, ()):
                return None
            # One file every tenant's lookups open: a tenant reads the tables listed for it alone.
            return (
                f"sqlite '{node.table}' is not among the tables tenant '{tenant}' may read: the features file is "
                "shared by every tenant (SLUICE_LOOKUP_SQLITE names no {tenant}), so the operator lists each "
                "tenant's tables in lookup_sources (sqlite:TABLE)"
            )
        if node.store == "feast" and not self.settings.lookup_feast_repo:
            return "Feast lookups are off here: the operator names a Feast repository (SLUICE_LOOKUP_FEAST_REPO)"
        if node.source not in self.settings.lookup_sources.get(tenant, ()):
            return f"{node.store} '{node.table}' is not among the stores tenant '{tenant}' may read (the operator's lookup_sources)"
        return None

    def _store_key(self, node: Lookup, tenant: str) -> str:
        """Which store `node` reads for `tenant`: a file or a repository of the tenant's own, or the service."""
        kind = node.store
        if kind == "sqlite":  # a file
            path = self.settings.lookup_sqlite
        elif kind == "feast":  # a repository
            path = self.settings.lookup_feast_repo
        else:
            return kind
        return f"{kind}:{path.replace('{tenant}', tenant)}"

    def store(self, node: Lookup, tenant: str) -> FeatureStore:
        """The store `node` reads for `tenant` (built once)."""
        key = self._store_key(node, tenant)
        found = self._stores.get(key)  # built already: no lock
        if found is not None:
            return found
        with self._lock:
            found = self._stores.get(key)
            if found is None:
                retries = self.settings.lookup_retries
                if node.store == "dynamodb":
                    found = DynamoStore(self._dynamodb(), retries=retries, sleep=self._sleep)
                elif node.store == "sagemaker":
                    found = SageMakerStore(self._featurestore(), retries=retries, sleep=self._sleep)
                elif node.store == "feast":
                    from sluice.runtimes.feast_store import FeastStore

                    found = FeastStore(key.partition(":")[2])
                else:
                    found = SqliteStore(key.partition(":")[2], self.settings.lookup_sqlite_hold_rows)
                self._stores[key] = found
        return found

    # Calls ------------------------------------------------------------------------------------
    async def call(self, node: Lookup, tenant: str, arrays: dict[str, np.ndarray], *, timeout_s: float) -> tuple[dict[str, np.ndarray], int]:
        """What the step gives (every tensor it takes, and its features), and the store calls made."""
        looked = await self.lookup(node, tenant, arrays, timeout_s=timeout_s)
        return looked.outputs, looked.store_calls

    def _report(self, node: Lookup, tenant: str, looked: Looked | None, *, failed: bool) -> None:
        log_lookup(self.metrics_namespace, self._emf_meta, node, tenant, looked, failed=failed)

    async def lookup(
        self, node: Lookup, tenant: str, arrays: dict[str, np.ndarray], *, timeout_s: float, reports: list[tuple[Lookup, Looked]] | None = None
    ) -> Looked:
        """What the step gives (every tensor it takes, and its features), the store calls made
        and, for a cached lookup, the rows the cache answered and those whose entity was read.
        In Lambda each lookup is an EMF record of `LookupCalls` and `LookupErrors`: a line of its
        own, or, given `reports` (a request's), one more member of the request's prediction line
        (`sluice.observability.telemetry`), whose owner reports what no line took (`report`)."""
        if self.metrics_namespace is None:
            return await self._call(node, tenant, arrays, timeout_s)
        try:
            looked = await self._call(node, tenant, arrays, timeout_s)
        except SluiceError as exc:
            self._report(node, tenant, None, failed=exc.status >= 500)
            raise
        if reports is not None:
            reports.append((node, looked))
        else:
            self._report(node, tenant, looked, failed=False)
        return looked

    def report(self, tenant: str, reports: list[tuple[Lookup, Looked]]) -> None:
        """Lines of their own for a request's lookups that no prediction line took."""
        if self.metrics_namespace is not None:
            for node, looked in reports:
                self._report(node, tenant, looked, failed=False)

    def ttl(self, node: Lookup) -> float:
        """How long `node`'s values are kept (0: not cached): its `cache_ttl_s`, else the
        operator's default, never past its `max_age_s`."""
        if self.cache is None:
            return 0.0
        ttl = self.settings.lookup_cache_ttl_s if node.cache_ttl_s is None else node.cache_ttl_s
        return min(ttl, node.max_age_s) if node.max_age_s is not None else ttl

    def _reading(self, node: Lookup, tenant: str) -> _Reading:
        """`node`'s `_Reading` for `tenant`, kept while the node and the settings are the ones
        it was worked out for (the entry holds the node: no other object takes its id)."""
        reading = self._readings.get((id(node), tenant))
        if reading is not None and reading.node is node and reading.settings is self.settings:
            return reading
        reading = _Reading(node, self.settings, self.store(node, tenant), tuple(node.keys.values()), tuple(node.keys), tuple(f.name for f in node.features), self.ttl(node))
        return keep(self._readings, (id(node), tenant), reading, MAX_READINGS)

    def _space(self, node: Lookup, tenant: str, types: tuple[str, ...], ttl: float) -> tuple[Any, ...]:
        """Where the feature cache keeps `node`'s entries for `tenant`: what a read of its store
        answers, and the rule an entry's expiry is set by (the `ttl`, `max_age_s`), so a lookup
        is never answered by an entry kept under a longer one."""
        return (tenant, self._store_key(node, tenant), types, *node.reads, ttl, node.max_age_s)

    async def _call(self, node: Lookup, tenant: str, arrays: dict[str, np.ndarray], timeout_s: float) -> Looked:
        refused = self.refusal(node, tenant)  # every call, as the settings say now
        if refused is not None:
            raise Forbidden(refused, field="policy")
        reading = self._reading(node, tenant)
        every, together = keys_of(node, arrays)
        store = reading.store
        event_time = node.reads[3]
        inputs = reading.inputs
        types = _ONE_TYPE[arrays[inputs[0]].dtype.kind] if len(inputs) == 1 else tuple(_TYPES[arrays[name].dtype.kind] for name in inputs)
        ttl = reading.ttl
        cache = self.cache if ttl > 0 and len(every) else None
        held = store.rows(node, together, types) if isinstance(store, SqliteStore) and len(every) else None
        if held is not None:  # a SQLite table held in memory, current: no store call, no cache needed
            out = dict(arrays)
            out.update(_columns(node, every, held, self.clock()))
            return Looked(out, 0, *((len(every), 0) if cache is not None else ()))
        calls_before = store.calls
        text = coded(every)  # a batch job's text column: its distinct keys known from its codes
        if text is not None and cache is not None:
            space = self._space(node, tenant, types, ttl)
            return await self._by_entity(node, store, coded_entities(text), arrays, text, (types, ttl, space), timeout_s)
        if cache is None:  # the store's lists spread to the rows: no arrays kept for a cache
            if text is not None:
                entities = coded_entities(text)
                keys, inverse = entities.objs.tolist(), entities.inverse
            else:
                keys = list(dict.fromkeys(together))  # first seen first, at C speed
                inverse = None  # a row a key: nothing to spread
                if len(keys) < len(together):
                    place = dict(zip(keys, range(len(keys)), strict=True))
                    inverse = np.fromiter(map(place.__getitem__, together), dtype=np.intp, count=len(together))
            wanted = store_keys(keys, types)
            if not keys:
                found = Found.of([f.name for f in node.features])
            elif not store.concurrent and len(wanted) <= store.max_keys:  # one call, here: no coroutine (`_fetch`)
                found = ask(store, node.table, reading.key_names, wanted, reading.features, event_time, types)
            else:
                found = await self._fetch(node, store, wanted, types, event_time, timeout_s)
            out = dict(arrays)
            out.update(spread(node, wanted, found, inverse, self.clock()))
            return Looked(out, store.calls - calls_before)
        # rows found in the cache are served from it as they are; the others' entities read
        space = self._space(node, tenant, types, ttl)
        hashes = hashes_of(together)
        hit, held = cache.get(space, hashes, every)
        hits = int(np.count_nonzero(hit))
        if hits == len(every):
            values = held
        else:
            missed = ~hit
            rest = every[missed]
            entities = distinct(rest, rest.tolist(), hashes[missed]) if held is not None else distinct(every, together, hashes)
            wanted = store_keys(entities.objs.tolist(), types)
            fetched = from_found(node, wanted, await self._fetch(node, store, wanted, types, event_time, timeout_s))
            cache.put(space, entities.hashes, entities.objs, fetched, ttl, node.max_age_s)
            if held is None:
                values = fetched.take(entities.inverse)
            else:
                values = Values.empty(node, len(every))
                values.put(hit, held)
                values.put(missed, fetched.take(entities.inverse))
        out = dict(arrays)
        out.update(_columns(node, every, values, self.clock()))
        return Looked(out, store.calls - calls_before, hits, len(every) - hits)

    async def _by_entity(
        self, node: Lookup, store: FeatureStore, entities: Entities, arrays: dict[str, np.ndarray], every: np.ndarray, cached: tuple[Any, ...], timeout_s: float
    ) -> Looked:
        """A cached lookup of rows whose distinct entities are known (`entities`): the cache
        asked once per entity, the others' read from the store, the values spread to the rows.
        `cached`: the keys' types, the entries' time to live and the cache's space."""
        assert self.cache is not None
        types, ttl, space = cached
        hit, held = self.cache.get(space, entities.hashes, entities.objs)
        calls_before = store.calls
        if held is not None and hit.all():
            values = held
        else:
            values = Values.empty(node, len(entities))
            if held is not None:
                values.put(hit, held)
            missed = ~hit
            wanted = store_keys(entities.objs[missed].tolist(), types)
            fetched = from_found(node, wanted, await self._fetch(node, store, wanted, types, node.reads[3], timeout_s))
            self.cache.put(space, entities.hashes[missed], entities.objs[missed], fetched, ttl, node.max_age_s)
            values.put(missed, fetched)
        hits = int(np.count_nonzero(hit[entities.inverse]))  # rows answered from the cache
        out = dict(arrays)
        out.update(_columns(node, every, values.take(entities.inverse), self.clock()))
        return Looked(out, store.calls - calls_before, hits, len(every) - hits)

    async def _fetch(self, node: Lookup, store: FeatureStore, keys: list[Key], types: tuple[str, ...], event_time: str, timeout_s: float) -> Found:
        """What the store holds of `keys`, read in calls of its most keys (several at once where
        it allows), within the deadline."""
        chunks = [keys[i : i + store.max_keys] for i in range(0, len(keys), store.max_keys)]
        features = [f.name for f in node.features]

        def fetch(chunk: list[Key]) -> Found:
            return ask(store, node.table, list(node.keys), chunk, features, event_time, types)

        if not store.concurrent:  # a local file, read here: a thread hop would cost more than the read, and
            parts: list[Found] = [fetch(c) for c in chunks]  # no deadline could cut a read that never yields
        else:
            try:
                async with timeout(max(timeout_s, 0.0)):
                    if len(chunks) == 1:
                        parts = [await asyncio.to_thread(fetch, chunks[0])]
                    else:
                        gate = asyncio.Semaphore(self.settings.lookup_concurrency)

                        async def one(chunk: list[Key]) -> Found:
                            async with gate:
                                return await asyncio.to_thread(fetch, chunk)

                        parts = list(await asyncio.gather(*(one(c) for c in chunks)))
            except TimeoutError:
                raise DeadlineExceeded(f"{node.store} '{node.table}' gave no records within the request's deadline") from None
        found = parts[0] if len(parts) == 1 else Found.of(features)
        for part in parts if len(parts) > 1 else ():
            found.extend(part)
        return found


def _columns(node: Lookup, objs: np.ndarray, values: Values, now: float) -> dict[str, np.ndarray]:
    """One array per feature (and the event times) from the rows' own `values` (a cached
    lookup's; a missing or stale one: the default, else 422)."""
    usable = values.found
    if node.max_age_s is not None:  # a stale record is a missing one (NaN, no event time: stale)
        usable = usable & (values.times >= now - node.max_age_s)
    out: dict[str, np.ndarray] = {}
    for feature in node.features:
        ok = usable & values.present[feature.name]
        column = values.columns[feature.name]
        if not ok.all():
            if feature.default is None:
                first = int(np.argmin(ok))
                raise missing(node, feature.name, store_keys(objs[first : first + 1].tolist())[0], _why(node, values, first, now))
            column = column.copy()
            column[~ok] = feature.default
        out[feature.name] = column
    if node.event_time_output:  # a stale record's time too: why it was not used
        out[node.event_time_output] = values.times
    return out


def _why(node: Lookup, values: Values, at: int, now: float) -> str:
    if not values.found[at]:
        return "the entity is not in the store"
    if node.max_age_s is not None and not values.times[at] >= now - node.max_age_s:
        return f"its record is older than max_age_s ({node.max_age_s:g} s) or has no event time"
    return "the feature is missing"


def ask(
    store: FeatureStore, table: str, key_names: Sequence[str], keys: Sequence[Key], features: Sequence[str], event_time: str, types: Sequence[str]
) -> Found:
    """`store.get_many` of the keys a store can hold, every store alike: a key of empty text is
    in none (DynamoDB refuses a whole call that asks for one; a SQLite table or Feast's store
    could hold a row of it), so it is not asked, and is not found."""
    if any("" in key for key in keys):
        keys = [key for key in keys if "" not in key]
        if not keys:
            return Found.of(features)
    return store.get_many(table, key_names, keys, features, event_time, types)
