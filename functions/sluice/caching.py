"""A small time-bounded cache for what a container reads often and may see change."""

from __future__ import annotations

import time
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


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
        if len(self._items) >= self.max_items:
            self._items.clear()  # rare; cheaper than tracking order for a few thousand keys
        self._items[key] = (time.monotonic() + self.ttl_s, value)
        return value

    def pop(self, key: K) -> None:
        self._items.pop(key, None)

    def clear(self) -> None:
        self._items.clear()
