"""Looked-up feature values kept between requests and between a batch job's chunks, so an
entity read from the store once is not read again until its entry expires.

Entries are grouped by what they answer, a space: the tenant, the store (for SQLite, the
tenant's own file), the table or feature group, the key names, the features with their
datatypes and the event-time attribute read. A space is only ever asked for by a lookup of
the same tenant and table, so a key of another tenant or another table cannot meet an entry
that is not its own: the space is part of every question, not a prefix a key could forge.

Each space holds its entities column by column (`sluice.runtimes.lookup_values.Values`: in
the store or not, the event time, each feature cast, which values are there) with a dict from
entity key to row, so a chunk of thousands of rows is answered with one dict look-up per
distinct key at C speed and array operations. Spaces live in a `cachetools.TLRUCache`, sized
in entities (`lookup_cache_entries` across all spaces: the least recently used space goes
first when a fill would pass it), each space expiring when its last entry does.

An entry lives `ttl` seconds (the lookup's `cache_ttl_s`, else the operator's
`lookup_cache_ttl_s`), and never past the moment its record becomes older than the lookup's
`max_age_s`: a record that would be stale is read again from the store, not served from here.
Staleness itself is still judged when the rows are served, from the event time kept with the
entry, so the answer's event times and the `max_age_s` rule are those of a store read. An
entity the store does not hold is kept too (it takes its default, or fails, until it expires).
Within one space grown past the bound, the entries fetched longest ago go first. One lock
guards the spaces; what a question takes out is copied under it.
"""

from __future__ import annotations

import threading
import time
from itertools import repeat
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from collections.abc import Callable, Hashable

    from sluice.runtimes.feature_stores import Key
    from sluice.runtimes.lookup_values import Values


class _Space:
    """One space's entries: row i is `keys[i]`, its values and its expiry; `index` maps a key
    to its current row (a key read again gets a new row; the old one is dropped when rows are
    compacted)."""

    __slots__ = ("expires", "index", "keys", "values")

    def __init__(self, keys: list[Key], values: Values, expires: np.ndarray) -> None:
        self.keys, self.values, self.expires = keys, values, expires
        self.index: dict[Key, int] = dict(zip(keys, range(len(keys)), strict=True))

    def __len__(self) -> int:  # the rows held, those a key no longer points at too
        return len(self.keys)

    def add(self, keys: list[Key], values: Values, expires: np.ndarray, bound: int) -> _Space:
        """This space with `keys` added (a key already here points at its new row), at most
        `bound` rows: the newest."""
        start = len(self.keys)
        self.keys = self.keys + keys
        self.values = self.values.concat(values)
        self.expires = np.concatenate((self.expires, expires))
        self.index.update(zip(keys, range(start, start + len(keys)), strict=True))
        if len(self.keys) > bound or len(self.keys) > 2 * len(self.index):
            live = np.fromiter(self.index.values(), dtype=np.intp, count=len(self.index))
            live.sort()
            return _Space([self.keys[i] for i in live[-bound:]], self.values.take(live[-bound:]), self.expires[live[-bound:]])
        return self


class FeatureCache:
    """`entries`: the most entities held across all spaces. `clock`: wall-clock seconds (event
    times are wall-clock times; a test passes its own)."""

    def __init__(self, entries: int, clock: Callable[[], float] = time.time) -> None:
        from cachetools import TLRUCache

        self.entries = entries
        self.clock = clock
        self._spaces: TLRUCache[Hashable, _Space] = TLRUCache(entries, _until, timer=clock, getsizeof=len)
        self._lock = threading.Lock()

    def get(self, space: Hashable, keys: list[Key]) -> tuple[np.ndarray, Values | None]:
        """Which of `keys` are held and not expired (a mask), and their values in the keys'
        order (None: none held)."""
        now = self.clock()
        with self._lock:
            held = self._spaces.get(space)
            if held is None:
                return np.zeros(len(keys), bool), None
            rows = np.fromiter(map(held.index.get, keys, repeat(-1)), dtype=np.intp, count=len(keys))
            hit = rows >= 0
            hit[hit] = held.expires[rows[hit]] > now
            if not hit.any():
                return hit, None
            return hit, held.values.take(rows[hit])

    def put(self, space: Hashable, keys: list[Key], values: Values, ttl: float, max_age_s: float | None) -> None:
        """Keep `values` of `keys`, read from the store now, for `ttl` seconds at most, and no
        longer than each record stays younger than `max_age_s`."""
        if not keys:
            return
        now = self.clock()
        expires = np.full(len(keys), now + ttl)
        if max_age_s is not None:  # NaN (no event time) leaves the ttl: such a record is stale already
            expires = np.fmin(expires, values.times + max_age_s)
        keep = expires > now
        if not keep.all():
            at = np.flatnonzero(keep)
            keys, values, expires = [keys[i] for i in at], values.take(at), expires[at]
            if not keys:
                return
        if len(keys) > self.entries:  # more than the whole cache holds: the last ones
            keys, values, expires = keys[-self.entries :], values.take(slice(len(keys) - self.entries, None)), expires[-self.entries :]  # type: ignore[arg-type]
        with self._lock:
            held = self._spaces.get(space)
            held = _Space(keys, values, expires) if held is None else held.add(keys, values, expires, self.entries)
            self._spaces[space] = held  # set again: the cache counts its size anew, evicting others

    def __len__(self) -> int:
        with self._lock:
            return int(self._spaces.currsize)


def _until(space: Hashable, held: _Space, now: float) -> Any:
    return float(held.expires.max()) if len(held) else now
