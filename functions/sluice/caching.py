"""Small caches for what a container works out or reads often: `keep`, the one rule of every
dict a process keeps things in by a key it does not choose (bounded: a full dict is emptied,
never a wrong answer, only the work done again), and a time-bounded cache for what may change."""

from __future__ import annotations

import time
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


def keep(items: dict[K, V], key: K, value: V, most: int) -> V:
    """`items[key] = value`, `items` kept to `most` entries: a new key finding it full empties it
    first (rare; cheaper than tracking order for the few thousand keys a process meets)."""
    if key not in items and len(items) >= most:
        items.clear()
    items[key] = value
    return value


class TTLCache(Generic[K, V]):
    def __init__(self, ttl_s: float, max_items: int = 4096) -> None:
        self.ttl_s = ttl_s
        self.max_items = max_items
        self._items: dict[K, tuple[float, V]] = {}

    def get(self, key: K) -> V | None:
        item = self._items.get(key)
        if item is None:
            return None
        expires, value = item
        if expires < time.monotonic():
            self._items.pop(key, None)
            return None
        return value

    def put(self, key: K, value: V) -> V:
        if self.ttl_s <= 0:
            return value
        keep(self._items, key, (time.monotonic() + self.ttl_s, value), self.max_items)
        return value

    def pop(self, key: K) -> None:
        self._items.pop(key, None)

    def clear(self) -> None:
        self._items.clear()
