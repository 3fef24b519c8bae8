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
writes one log line that is also an EMF record, `LookupCalls` and `LookupErrors` (a store that
failed: 5xx), which the observability stack alarms on as a rate.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from typing import TYPE_CHECKING, Any

import numpy as np

from sluice.clients import LazyClient
from sluice.codecs.datatypes import V2_TO_NUMPY
from sluice.domain.errors import (
    BackendError,
    DeadlineExceeded,
    Forbidden,
    InvalidInput,
    SluiceError,
    Unprocessable,
)
from sluice.runtimes.feature_stores import (
    DynamoStore,
    Found,
    SageMakerStore,
    SqliteStore,
    epoch_seconds,
)

if TYPE_CHECKING:
    from sluice.clients import AwsClients
    from sluice.domain.lookups import Lookup
    from sluice.runtimes.feature_stores import FeatureStore, Key
    from sluice.settings import LookupSettings

_TRUE, _FALSE = frozenset(("true", "1", "1.0", "t", "yes")), frozenset(("false", "0", "0.0", "f", "no"))


class LookupSteps:
    """`dynamodb`/`featurestore`: clients to use (a test's); else built on first use from
    `clients`. `sleep`: the backoff's between calls with unprocessed keys."""

    def __init__(
        self,
        settings: LookupSettings,
        *,
        mode: str,
        clients: AwsClients | None = None,
        region: str | None = None,
        dynamodb: Any = None,
        featurestore: Any = None,
        sleep: Any = time.sleep,
        metrics_namespace: str | None = None,
    ) -> None:
        self.settings = settings
        self.metrics_namespace = metrics_namespace  # None: no EMF lines (locally)
        self.mode = mode
        self._dynamodb = LazyClient(dynamodb, clients, region, "dynamodb", max_pool_connections=settings.lookup_concurrency * 2)
        self._featurestore = LazyClient(featurestore, clients, region, "sagemaker-featurestore-runtime", max_pool_connections=settings.lookup_concurrency * 2)
        self._sleep = sleep
        self._stores: dict[str, FeatureStore] = {}
        self._lock = threading.Lock()

    # Who may read what ----------------------------------------------------------------------
    def refusal(self, node: Lookup, tenant: str) -> str | None:
        """Why `tenant` may not read `node`'s store, or None when it may."""
        if node.store == "sqlite":
            if self.mode == "aws":
                return "on AWS a lookup reads a DynamoDB table or a SageMaker feature group: SQLite lookups are local only"
            if not self.settings.lookup_sqlite:
                return "SQLite lookups are off here: the operator names a features file (SLUICE_LOOKUP_SQLITE)"
            return None
        if node.store == "feast" and not self.settings.lookup_feast_repo:
            return "Feast lookups are off here: the operator names a Feast repository (SLUICE_LOOKUP_FEAST_REPO)"
        if node.source not in self.settings.lookup_sources.get(tenant, ()):
            return f"{node.store} '{node.table}' is not among the stores tenant '{tenant}' may read (the operator's lookup_sources)"
        return None

    def store(self, node: Lookup, tenant: str) -> FeatureStore:
        """The store `node` reads for `tenant` (built once)."""
        path = {"sqlite": self.settings.lookup_sqlite, "feast": self.settings.lookup_feast_repo}.get(node.store)  # a file, a repository
        key = node.store if path is None else f"{node.store}:{path.replace('{tenant}', tenant)}"
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
                    found = SqliteStore(key.partition(":")[2])
                self._stores[key] = found
        return found

    # Calls ------------------------------------------------------------------------------------
    async def call(self, node: Lookup, tenant: str, arrays: dict[str, np.ndarray], *, timeout_s: float) -> tuple[dict[str, np.ndarray], int]:
        """What the step gives (every tensor it takes, and its features), and the store calls made."""
        if self.metrics_namespace is None:
            return await self._call(node, tenant, arrays, timeout_s)
        try:
            out, calls = await self._call(node, tenant, arrays, timeout_s)
        except SluiceError as exc:
            self._report(node, tenant, 0, failed=exc.status >= 500)
            raise
        self._report(node, tenant, calls, failed=False)
        return out, calls

    def _report(self, node: Lookup, tenant: str, calls: int, *, failed: bool) -> None:
        from sluice.observability import get_logger
        from sluice.observability.formatter import log_info
        from sluice.observability.telemetry import emf

        metrics = {"LookupCalls": (1.0, "Count"), "LookupErrors": (float(failed), "Count")}
        fields: dict[str, Any] = {"tenant": tenant, "store": node.store, "table": node.table, "store_calls": calls}
        fields.update({name: value for name, (value, _) in metrics.items()})
        fields["_aws"] = emf(self.metrics_namespace, [[]], metrics)  # type: ignore[arg-type]
        log_info(get_logger(), "lookup", fields)

    async def _call(self, node: Lookup, tenant: str, arrays: dict[str, np.ndarray], timeout_s: float) -> tuple[dict[str, np.ndarray], int]:
        refused = self.refusal(node, tenant)
        if refused is not None:
            raise Forbidden(refused, field="policy")
        keys, inverse, rows = _keys(node, arrays)
        store = self.store(node, tenant)
        chunks = [keys[i : i + store.max_keys] for i in range(0, len(keys), store.max_keys)]
        types = ["S" if arrays[name].dtype.kind in "OUS" else "N" for name in node.keys.values()]
        features = [f.name for f in node.features]
        event_time = node.event_time if node.max_age_s is not None or node.event_time_output else ""  # read only when used
        calls_before = store.calls

        def fetch(chunk: list[Key]) -> Found:
            return store.get_many(node.table, list(node.keys), chunk, features, event_time, types)

        try:
            async with asyncio.timeout(max(timeout_s, 0.0)):
                if not store.concurrent:  # a local file, read here: a thread hop would cost more than the read
                    parts: list[Found] = [fetch(c) for c in chunks]
                elif len(chunks) == 1:
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
        out = dict(arrays)
        out.update(_columns(node, keys, found, inverse, rows))
        return out, store.calls - calls_before


def _keys(node: Lookup, arrays: dict[str, np.ndarray]) -> tuple[list[Key], np.ndarray, int]:
    """The distinct keys in the order first seen, each row's place among them, and the rows."""
    columns: list[list[str]] = []
    rows = -1
    for key, name in node.keys.items():
        array = arrays.get(name)
        if array is None:
            raise InvalidInput(f"lookup key '{key}' is read from input '{name}', which the step was not given", field=f"inputs.{name}")
        flat = array.reshape(-1) if array.ndim == 2 and array.shape[1] == 1 else array
        if flat.ndim != 1 or (rows >= 0 and flat.shape[0] != rows):
            raise InvalidInput(f"input '{name}' holds lookup key '{key}': one value a row", field=f"inputs.{name}")
        rows = flat.shape[0]
        if flat.dtype.kind in "OUS":
            values = flat.tolist()
            if set(map(type, values)) != {str}:
                values = [v.decode() if isinstance(v, bytes) else str(v) for v in values]
            columns.append(values)
        elif flat.dtype.kind in "iu":
            columns.append(list(map(str, flat.tolist())))
        else:
            raise InvalidInput(f"input '{name}' holds lookup key '{key}': strings or integers, not {flat.dtype}", field=f"inputs.{name}")
    together: list[Any] = list(zip(*columns, strict=True)) if len(columns) > 1 else columns[0]
    distinct = list(dict.fromkeys(together))  # first seen first, at C speed
    place = dict(zip(distinct, range(len(distinct)), strict=True))
    inverse = np.fromiter(map(place.__getitem__, together), dtype=np.intp, count=rows)
    keys: list[Key] = distinct if len(columns) > 1 else list(zip(distinct, strict=True))
    return keys, inverse, rows


def _columns(node: Lookup, keys: list[Key], found: Found, inverse: np.ndarray, rows: int) -> dict[str, np.ndarray]:
    """One array per feature (and the event times), in the rows' order: each distinct key's
    values once, then spread to its rows."""
    if not keys:
        return {f.name: np.empty(0, V2_TO_NUMPY[f.datatype]) for f in node.features} | (
            {node.event_time_output: np.empty(0)} if node.event_time_output else {}
        )
    position = dict(zip(found.keys, range(len(found.keys)), strict=True))
    at = list(map(position.get, keys))  # each key's place among those found; None: not found
    seconds = [t if type(t) is float else epoch_seconds(t) for t in found.times]
    times = [math.nan if i is None or seconds[i] is None else seconds[i] for i in at]  # a stale record's too
    if node.max_age_s is not None:  # a stale record is a missing one
        oldest = time.time() - node.max_age_s
        at = [None if i is None or not times[j] >= oldest else i for j, i in enumerate(at)]
    out: dict[str, np.ndarray] = {}
    for feature in node.features:
        column = found.values[feature.name]
        raw = [None if i is None else column[i] for i in at]
        if None in raw:
            if feature.default is None:
                first = raw.index(None)
                raise _missing(node, feature.name, keys[first], _why(node, keys[first], position, at[first]))
            raw = [feature.default if v is None else v for v in raw]
        unique = _array(raw, feature.datatype, node, feature.name, keys)
        out[feature.name] = unique[inverse]
    if node.event_time_output:
        out[node.event_time_output] = np.array(times, dtype=np.float64)[inverse]
    return out


def _why(node: Lookup, key: Key, position: dict[Key, int], at: int | None) -> str:
    if key not in position:
        return "the entity is not in the store"
    if at is None:
        return f"its record is older than max_age_s ({node.max_age_s:g} s) or has no event time"
    return "the feature is missing"


def _array(raw: list[Any], datatype: str, node: Lookup, feature: str, keys: list[Key]) -> np.ndarray:
    """The values as an array of `datatype`: at once where every value is already a number
    of the kind asked (SQLite's; DynamoDB's numbers come as text), else value by value, the
    first that is not one named with its entity."""
    dtype = V2_TO_NUMPY[datatype]
    kinds = set(map(type, raw))
    if datatype in ("FP32", "FP64") and kinds <= {float, int}:
        return np.array(raw, dtype=dtype)
    if datatype in ("INT32", "INT64") and kinds <= {int}:
        return np.array(raw, dtype=dtype)
    return np.array([_cast(v, datatype, node, feature, k) for v, k in zip(raw, keys, strict=True)], dtype=dtype)


def _cast(value: Any, datatype: str, node: Lookup, feature: str, key: Key) -> Any:
    try:
        if datatype == "BYTES":
            return value if isinstance(value, str) else str(value)
        if datatype == "BOOL":
            if isinstance(value, bool):
                return value
            text = str(value).strip().lower()
            if text in _TRUE or text in _FALSE:
                return text in _TRUE
            raise ValueError(text)
        if isinstance(value, bool | dict | list | set | bytes):
            raise ValueError(value)
        if datatype in ("INT32", "INT64"):
            number = float(value)
            if not number.is_integer():
                raise ValueError(value)
            return int(number)
        return float(value)
    except (ValueError, TypeError, OverflowError):
        raise BackendError(
            f"{node.store} '{node.table}' holds {str(value)[:40]!r} for feature '{feature}' of {_entity(node, key)}: not a {datatype} value",
            field="policy",
        ) from None


def _entity(node: Lookup, key: Key) -> str:
    return ", ".join(f"{name}={value!r}" for name, value in zip(node.keys, key, strict=True))


def _missing(node: Lookup, feature: str, key: Key, why: str) -> Unprocessable:
    first = next(iter(node.keys.values()))
    return Unprocessable(
        f"no value of feature '{feature}' for {_entity(node, key)} in {node.store} '{node.table}': {why}, and the feature has no default",
        field=f"inputs.{first}",
        key=dict(zip(node.keys, key, strict=True)),
    )
