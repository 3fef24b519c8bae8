"""The profiles of the traffic one process serves, per deployment, revision, variant and
window, kept the way its statistics are (`sluice.stats.recorder`): in memory, written to the
registry in batches, by the same timer.

A request costs a list append under a lock: its input and output arrays are held as they are
(never copied; nothing changes them after the answer) and folded into the window's sketches
later, many requests at once (their tensors joined), by the flush, or by the request that finds
`fold_rows` rows held. Every row is counted (rows, missing values); of a fold's rows, a uniform
sample of `sample_rows` goes into the quantile and frequency sketches (the sketches' own work,
about 0.1 µs a value, is what profiling costs; a window of heavy traffic still gets thousands
of sampled rows per process). A flush writes each window's profile as one record (`MonitorRegistry.add_profile`);
reads merge the records of a window, whatever process wrote them. A write the registry refuses
is kept and tried again at the next flush; what is still refused at `close`, or beyond
`max_pending` windows held, is dropped and logged.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from sluice.monitor.sketches import MAX_COLUMNS, Profile, profiled
from sluice.observability import get_logger
from sluice.registry.scope import use_tenant
from sluice.stats import timer

if TYPE_CHECKING:
    from collections.abc import Mapping

    from sluice.domain.signature import Signature
    from sluice.registry import MonitorRegistry

Key = tuple[str, str, int, str, int]  # tenant, deployment, revision, variant, window start (epoch s)
FOLD_ROWS = 8192
SAMPLE_ROWS = 1024  # of a fold's rows, those the quantile and frequency sketches take (all are counted)
MAX_PENDING = 1000


@dataclass(slots=True)
class _Held:
    signature: Signature | None
    parts: list[tuple[Mapping[str, np.ndarray], Mapping[str, np.ndarray], Mapping[str, Any]]] = field(default_factory=list)
    rows: int = 0
    profile: Profile | None = None


def _joined(parts: list[Mapping[str, np.ndarray]]) -> dict[str, np.ndarray] | None:
    """The parts' tensors joined on the batch axis, or None when they cannot be."""
    if len(parts) == 1:
        return dict(parts[0])
    try:
        return {name: np.concatenate([p[name] for p in parts]) for name in parts[0]}
    except (KeyError, ValueError):
        return None


def _slim(arrays: Mapping[str, np.ndarray], max_columns: int) -> Mapping[str, np.ndarray]:
    """The tensors the sketches read, held as they are; any other (an image, an embedding wider
    than `max_columns`) left as an empty array of its rows, so that holding a fold's requests
    never holds their large tensors."""
    if all(not isinstance(a, np.ndarray) or profiled(a, max_columns) for a in arrays.values()):
        return arrays
    return {
        name: a if not isinstance(a, np.ndarray) or profiled(a, max_columns) else np.empty((a.shape[0] if a.ndim else 1, 0), a.dtype)
        for name, a in arrays.items()
    }


class ProfileRecorder(timer.Flushed):
    registry: MonitorRegistry

    def __init__(
        self,
        registry: MonitorRegistry,
        *,
        window_s: int = 3600,
        flush_every_s: float = 30.0,
        max_columns: int = MAX_COLUMNS,
        fold_rows: int = FOLD_ROWS,
        sample_rows: int | None = SAMPLE_ROWS,
        max_pending: int = MAX_PENDING,
        timed: bool | None = None,
    ) -> None:
        super().__init__(registry, flush_every_s=flush_every_s, timed=timed)
        self.window_s = window_s
        self.max_columns = max_columns
        self.fold_rows = fold_rows
        self.sample_rows = sample_rows
        self.max_pending = max_pending
        self._held: dict[Key, _Held] = {}
        self.dropped_rows = 0

    def observe(
        self, key: tuple[str, str, int, str], signature: Signature | None, inputs: Mapping[str, np.ndarray],
        outputs: Mapping[str, np.ndarray], classes: Mapping[str, Any], rows: int,
    ) -> None:  # fmt: skip
        """One answered request: `key` is (tenant, deployment, revision, variant)."""
        window = int(time.time()) // self.window_s * self.window_s
        full = (*key, window)
        inputs, outputs = _slim(inputs, self.max_columns), _slim(outputs, self.max_columns)
        with self._lock:
            held = self._held.get(full)
            if held is None:
                if len(self._held) >= self.max_pending:
                    self.dropped_rows += rows
                    return
                held = self._held[full] = _Held(signature)
                self._watched()
            held.parts.append((inputs, outputs, classes))
            held.rows += rows
            fold = held.rows >= self.fold_rows
        if fold:
            self._fold(full)

    def _fold(self, key: Key) -> None:
        """The held requests of `key` folded into its profile (outside the lock: the sketches'
        work is the expensive part; a key is folded by one thread at a time)."""
        with self._lock:
            held = self._held.get(key)
            if held is None or not held.parts:
                return
            parts, held.parts, held.rows = held.parts, [], 0
            profile = held.profile
            held.profile = None
        profile = profile or Profile()
        inputs, outputs = _joined([p[0] for p in parts]), _joined([p[1] for p in parts])
        if inputs is not None and outputs is not None:  # one call for the whole fold
            profile.add_rows(inputs, outputs, held.signature, parts[0][2], max_columns=self.max_columns, sample=self.sample_rows)
        else:  # requests whose tensors differ in shape: one at a time
            for one_in, one_out, classes in parts:
                profile.add_rows(one_in, one_out, held.signature, classes, max_columns=self.max_columns, sample=self.sample_rows)
        with self._lock:
            now = self._held.get(key)
            if now is None:
                now = self._held[key] = _Held(held.signature)
            if now.profile is None:
                now.profile = profile
            else:
                profile.merge(now.profile)
                now.profile = profile

    # Flushing (the timer's interface, `timer.Flushed`) --------------------------------------------
    def pending(self) -> bool:
        return bool(self._held)

    def flush(self) -> bool:
        """Fold and write every window held; a refused write is kept for the next flush."""
        with self._flushing:
            self._last_flush = time.monotonic()
            for key in list(self._held):
                self._fold(key)
            with self._lock:
                taken, self._held = self._held, {}
            failed: Exception | None = None
            for key, held in taken.items():
                if held.profile is None or not held.profile.rows:
                    continue
                tenant, deployment, revision, variant, window = key
                try:
                    with use_tenant(tenant):
                        self.registry.add_profile(tenant, deployment, revision, variant, window, held.profile.to_dict())
                except Exception as exc:  # kept, to be tried again
                    failed = exc
                    self._put_back(key, held)
            if failed is not None:
                get_logger().warning("profiles not written: kept to try again", extra={"error": repr(failed)})
            return failed is None

    def _put_back(self, key: Key, held: _Held) -> None:
        with self._lock:
            now = self._held.get(key)
            if now is None:
                self._held[key] = held
            elif held.profile is not None:
                if now.profile is None:
                    now.profile = held.profile
                else:
                    now.profile.merge(held.profile)

    def close(self) -> None:
        """The shutdown flush: what the registry still refuses is dropped, and logged."""
        self.flush()
        with self._lock:
            lost = sum(h.profile.rows for h in self._held.values() if h.profile is not None) + self.dropped_rows
            self._held, self.dropped_rows = {}, 0
        if lost:
            get_logger().error("profiles dropped", extra={"rows": lost})
        self._unwatched()
