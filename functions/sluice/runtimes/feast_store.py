"""A Feast feature view as a lookup's store (`store: feast`), read through Feast's SDK: one
`FeatureStore.get_online_features` call per batch of distinct keys (up to 1,000), never one per
row. The repository's `feature_store.yaml` decides where the values live (its SQLite online
store locally, its DynamoDB online store on AWS, which splits the call into BatchGetItem calls
itself); sluice only names the repository (`lookup_feast_repo`, one per tenant with `{tenant}`).

Feast is heavy (pandas, dask, SQLAlchemy: seconds to import), so it is imported on the first
call, in the thread that makes it, never when sluice starts; a process without it answers that
call with a 502 naming the extra to install.

What a lookup reads, as the other stores give it (`Found`): an entity whose every feature Feast
reports NOT_FOUND is absent; a feature that is null, older than its feature view's `ttl`, or
that the feature view does not define is missing (None); the record's time is Feast's event
time of its features (epoch seconds), which `max_age_s` and `event_time_output` read.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from sluice.domain.errors import BackendError, SluiceError, Unavailable
from sluice.runtimes.feature_stores import Found, _Counted, aws_error

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

    from sluice.runtimes.feature_stores import Key

log = logging.getLogger(__name__)

# What importing Feast sets in the process's environment where it is unset (feast/metrics.py):
# Prometheus' multiprocess folders, pointed at a temporary folder of its own. Left there, they
# would turn on `/metrics` series in a process that never asked for them (sluice reads the
# first, as `sluice serve` sets it) and give later child processes a folder that is gone.
_FEAST_SETS = ("PROMETHEUS_MULTIPROC_DIR", "PROMETHEUS_MULTIPROCESS_DIR")

_PRESENT, _NOT_FOUND = 1, 3  # feast.serving.ServingService_pb2.FieldStatus (2: null, 4: outside the view's TTL)


def import_feast() -> Any:
    """The `feast` package, imported with the process's environment kept as it was."""
    with prometheus_folders_kept():
        import feast
    return feast


@contextlib.contextmanager
def prometheus_folders_kept() -> Iterator[None]:
    """Whatever runs inside (Feast's import, or code that imports it: MLflow's loaders) leaves
    the process's Prometheus folder variables as they were."""
    before = {name: os.environ.get(name) for name in _FEAST_SETS}
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


class _View(NamedTuple):
    features: frozenset[str]  # the features it defines
    ttl_s: float  # its `ttl` in seconds (0: none): a feature's value older is missing
    join_keys: tuple[str, ...]  # its entities' join keys, the only keys it is read by


class FeastStore(_Counted):
    """`repo_path`: the folder of the repository's `feature_store.yaml`. Calls run in threads
    (a DynamoDB online store is a network read) one at a time: Feast's registry cache and its
    SQLite connection are shared by the FeatureStore."""

    max_keys = 1000
    concurrent = True

    def __init__(self, repo_path: str) -> None:
        super().__init__()
        self.repo_path = repo_path
        self._lock = threading.Lock()
        self._feast: Any = None
        self._defined: dict[str, tuple[_View, float]] = {}  # a feature view, and until when it is kept

    def _store(self) -> Any:
        if self._feast is None:
            if not (Path(self.repo_path) / "feature_store.yaml").is_file():
                raise Unavailable(f"the Feast repository for lookups is not there (no feature_store.yaml in {Path(self.repo_path).name!r})")
            try:
                feast = import_feast()
            except ImportError:
                raise BackendError("Feast lookups need Feast's SDK in this service: pip install 'sluice[feast]'") from None
            self._feast = feast.FeatureStore(repo_path=self.repo_path)
        return self._feast

    def get_many(
        self, table: str, key_names: Sequence[str], keys: Sequence[Key], features: Sequence[str], event_time: str, key_types: Sequence[str] = ()
    ) -> Found:
        types = list(key_types) or ["S"] * len(key_names)
        rows = [{n: int(v) if t == "N" else v for n, v, t in zip(key_names, key, types, strict=True)} for key in keys]
        with self._lock:
            self._counted()
            try:
                store = self._store()
                view = self._view(store, table)
                unknown = [k for k in key_names if k not in view.join_keys]
                if unknown:
                    raise BackendError(f"Feast feature view '{table}' has no join key '{unknown[0]}' (its join keys: {', '.join(view.join_keys)})")
                read = [f for f in features if f in view.features]  # one the view does not define: a missing feature
                if not read:
                    return Found(list(keys), {f: [None] * len(keys) for f in features}, [None] * len(keys))
                response = store.get_online_features(features=[f"{table}:{f}" for f in read], entity_rows=rows, full_feature_names=False)
                values = response.to_dict()
            except SluiceError:
                raise
            except Exception as exc:
                self._defined.pop(table, None)  # the view may have changed: read it again next time
                if type(exc).__module__.startswith("botocore"):  # its DynamoDB online store's
                    raise aws_error(exc, f"the online store of Feast feature view '{table}'") from None
                log.warning("lookup: Feast failed", extra={"feature_view": table, "error_type": type(exc).__name__, "error": str(exc)[:500]})
                raise BackendError(f"reading Feast feature view '{table}' failed ({type(exc).__name__})") from None
        return _found(response.proto, values, keys, read, features, want_times=bool(event_time), ttl_s=view.ttl_s)

    def _view(self, store: Any, table: str) -> _View:
        """What the feature view `table` defines, kept as long as Feast keeps its registry (its
        `cache_ttl_seconds`; 0: for good): Feast builds the view from its registry's proto on
        every `get_feature_view`, milliseconds a call."""
        from feast.errors import FeatureViewNotFoundException

        known = self._defined.get(table)
        if known is not None and time.monotonic() < known[1]:
            return known[0]
        try:
            view = store.get_feature_view(table, allow_registry_cache=True)
        except FeatureViewNotFoundException:
            raise BackendError(f"the Feast repository has no feature view '{table}'") from None
        ttl = getattr(store.config.registry, "cache_ttl_seconds", 600)
        found = _View(frozenset(f.name for f in view.features), max(view.ttl.total_seconds(), 0.0) if view.ttl else 0.0, tuple(view.join_keys))
        self._defined[table] = (found, time.monotonic() + ttl if ttl > 0 else math.inf)
        return found


def _found(
    proto: Any, values: dict[str, list[Any]], keys: Sequence[Key], read: list[str], features: Sequence[str], *, want_times: bool, ttl_s: float = 0.0
) -> Found:
    """The entities Feast found, their features (None: null, older than the view's `ttl_s`, or
    not defined) and event times, column by column in the keys' order. Feast's online read
    serves a value past its view's TTL as present (it reports OUTSIDE_MAX_AGE only in its
    feature server), so the TTL is applied here, to each feature's own event time."""
    index = {name: i for i, name in enumerate(proto.metadata.feature_names.val)}
    vectors = [proto.results[index[f]] for f in read]
    statuses = [list(v.statuses) for v in vectors]
    present = [i for i in range(len(keys)) if any(s[i] != _NOT_FOUND for s in statuses)]
    found = Found([keys[i] for i in present], {}, [])
    for feature in features:
        if feature not in read:
            found.values[feature] = [None] * len(present)
            continue
        at = read.index(feature)
        column, status = values[feature], statuses[at]
        if ttl_s > 0:
            oldest = time.time() - ttl_s
            stamps = vectors[at].event_timestamps
            found.values[feature] = [column[i] if status[i] == _PRESENT and stamps[i].seconds + stamps[i].nanos / 1e9 >= oldest else None for i in present]
        else:
            found.values[feature] = [column[i] if status[i] == _PRESENT else None for i in present]
    if want_times:
        for i in present:
            stamps = [v.event_timestamps[i] for v, s in zip(vectors, statuses, strict=True) if s[i] != _NOT_FOUND]
            seconds = [t.seconds + t.nanos / 1e9 for t in stamps if t.seconds or t.nanos]
            found.times.append(max(seconds) if seconds else None)
    else:
        found.times = [None] * len(present)
    return found
