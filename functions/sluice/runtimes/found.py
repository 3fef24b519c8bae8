"""What a feature store answers (`Found`: the keys found, each feature's values and the event
times, column by column) and how its event times are read: the shape every store, the held
SQLite tables and the lookup values share, below all of them."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Sequence

Key = tuple[str, ...]  # an entity's key values, as text (an integer key as its digits)


@dataclass(slots=True)
class Found:
    """The records found: `keys[i]`'s features are `values[name][i]` (None: missing or null),
    its event time `times[i]` as the store holds it (`epoch_seconds` reads it)."""

    keys: list[Key] = field(default_factory=list)
    values: dict[str, list[Any]] = field(default_factory=dict)
    times: list[Any] = field(default_factory=list)

    @classmethod
    def of(cls, features: Sequence[str]) -> Found:
        return cls([], {f: [] for f in features}, [])

    def add(self, key: Key, values: dict[str, Any], time: Any) -> None:
        self.keys.append(key)
        for name, column in self.values.items():
            column.append(values.get(name))
        self.times.append(time)

    def extend(self, other: Found) -> None:
        self.keys += other.keys
        for name, column in self.values.items():
            column += other.values.get(name, [None] * len(other.keys))
        self.times += other.times


def epoch_seconds(value: Any) -> float | None:
    """An event time as epoch seconds: a number, a numeric string, or an ISO-8601 time (UTC
    where it names no zone); None where it is none of these."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, float | int):
        return float(value)
    text = str(value).strip()
    try:
        return float(text)
    except ValueError:
        pass
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return None
    if moment.tzinfo is None:
        from datetime import UTC

        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()
