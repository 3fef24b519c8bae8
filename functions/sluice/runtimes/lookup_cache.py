"""Looked-up feature values kept between requests and between a batch job's chunks, so an
entity read from the store once is not read again until its entry expires.

Entries are grouped by what they answer, a space: the tenant, the store (for SQLite, the
tenant's own file), the table or feature group, the key names, the features with their
datatypes and the event-time attribute read, and the lookup's `ttl` and `max_age_s`, which set
when its entries expire (`LookupSteps._space`). A space is only ever asked for by a lookup of
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
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from collections.abc import Callable, Hashable

    from sluice.runtimes.lookup_values import Values


class _Space:
    """One space's entries, sorted by their keys' hashes: `objs[i]` (the key itself, compared
    on every hit, so two keys of one hash never answer for each other), its values and when it
    expires."""

    __slots__ = ("expires", "hashes", "objs", "values")

    def __init__(self, hashes: np.ndarray, objs: np.ndarray, values: Values, expires: np.ndarray) -> None:
        self.hashes, self.objs, self.values, self.expires = hashes, objs, values, expires

    def __len__(self) -> int:
        return len(self.hashes)

    def find(self, hashes: np.ndarray, objs: np.ndarray, now: float) -> np.ndarray:
        """Each key's entry, or -1 where none is held or it expired."""
        at = np.minimum(np.searchsorted(self.hashes, hashes), len(self.hashes) - 1)
        held = (self.hashes[at] == hashes) & (self.expires[at] > now)
        held[held] = self.objs[at[held]] == objs[held]
        return np.where(held, at, -1)

    def add(self, hashes: np.ndarray, objs: np.ndarray, values: Values, expires: np.ndarray, bound: int) -> _Space:
        """This space with the entries given (the newer of two of one hash kept), at most
        `bound`: those that expire last."""
        every = np.concatenate((self.hashes, hashes))
        _, last = np.unique(every[::-1], return_index=True)
        keep = len(every) - 1 - last  # sorted by hash
        when = np.concatenate((self.expires, expires))
        if len(keep) > bound:
            keep = keep[np.sort(np.argsort(when[keep], kind="stable")[-bound:])]
        return _Space(every[keep], np.concatenate((self.objs, objs))[keep], self.values.concat(values).take(keep), when[keep])


class FeatureCache:
    """`entries`: the most entities held across all spaces. `clock`: wall-clock seconds (event
    times are wall-clock times; a test passes its own)."""

    def __init__(self, entries: int, clock: Callable[[], float] = time.time) -> None:
        from cachetools import TLRUCache

        self.entries = entries
        self.clock = clock
        self._spaces: TLRUCache[Hashable, _Space] = TLRUCache(entries, _until, timer=clock, getsizeof=len)
        self._lock = threading.Lock()
        self.hits = self.misses = 0  # entities answered here / not, since the process started

    def get(self, space: Hashable, hashes: np.ndarray, objs: np.ndarray) -> tuple[np.ndarray, Values | None]:
        """Which of the keys (`objs`, their `hashes`: a row's each, or an entity's) are held and
        not expired (a mask), and their values in the keys' order (None: none held)."""
        now = self.clock()
        with self._lock:
            held = self._spaces.get(space)
            if held is None:
                self.misses += len(objs)
                return np.zeros(len(objs), bool), None
            rows = held.find(hashes, objs, now)
            hit = rows >= 0
            hits = int(np.count_nonzero(hit))
            self.hits, self.misses = self.hits + hits, self.misses + len(objs) - hits
            return hit, held.values.take(rows[hit]) if hits else None

    def put(self, space: Hashable, hashes: np.ndarray, objs: np.ndarray, values: Values, ttl: float, max_age_s: float | None) -> None:
        """Keep the `values` of the entities `objs`, read from the store now, for `ttl` seconds
        at most, and no longer than each record stays younger than `max_age_s`."""
        now = self.clock()
        expires = np.full(len(objs), now + ttl)
        if max_age_s is not None:  # NaN (no event time) leaves the ttl: such a record is stale already
            expires = np.fmin(expires, values.times + max_age_s)
        keep = expires > now
        if not keep.all():
            hashes, objs, values, expires = hashes[keep], objs[keep], values.take(keep), expires[keep]
        if len(objs) > self.entries:  # more than the whole cache holds: the last ones
            last = slice(len(objs) - self.entries, None)
            hashes, objs, values, expires = hashes[last], objs[last], values.take(last), expires[last]  # type: ignore[arg-type]
        if not len(objs):
            return
        with self._lock:
            held = self._spaces.get(space)
            if held is None:
                order = np.argsort(hashes, kind="stable")
                _, last_of = np.unique(hashes[order][::-1], return_index=True)  # one entry a hash (the later)
                at = order[len(order) - 1 - last_of]
                held = _Space(hashes[at], objs[at], values.take(at), expires[at])
            else:
                held = held.add(hashes, objs, values, expires, self.entries)
            self._spaces[space] = held  # set again: the cache counts its size anew, evicting others

    def __len__(self) -> int:
        with self._lock:
            return int(self._spaces.currsize)

    def clear(self) -> None:
        with self._lock:
            self._spaces.clear()


def _until(space: Hashable, held: _Space, now: float) -> Any:
    return float(held.expires.max()) if len(held) else now
