"""Counts of what is under way, by key, that keep no key with nothing under way (admission's
requests in flight)."""

from __future__ import annotations

from typing import TypeVar

K = TypeVar("K")


def count_down(counts: dict[K, int], key: K) -> None:
    """One fewer under way for `key`; a key down to none is dropped."""
    left = counts.get(key, 0) - 1
    if left > 0:
        counts[key] = left
    else:
        counts.pop(key, None)
