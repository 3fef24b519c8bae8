"""The profiles of the traffic one process serves, per deployment, revision, variant and
window, kept the way its statistics are (`sluice.stats.recorder`): in memory, written to the
registry in batches, by the same timer.

A request costs a list append under a lock: its input and output arrays are held as they are
(never copied; nothing changes them after the answer). The request that brings a window's held
rows to `fold_rows` cuts them off as one group, and a background thread (`sluice-monitor-fold`,
started when a group is cut, gone when none is left) folds the groups into the window's
sketches in the order they were cut, many requests at once (their tensors joined); the flush
folds what is left. Where no thread may run (Lambda, `timed` false) the cutting request folds
them itself. Every row is counted (rows, missing values); of a group's rows, a uniform sample
of `sample_rows` goes into the quantile and frequency sketches (the sketches' own work, about
0.1 µs a value; a window of heavy traffic still gets thousands of sampled rows per process).
Which rows go into which group, and in which order groups are folded, do not depend on the
thread that folds them: the sketches are those the request path would have made folding
inline. A flush writes each window's profile as one record (`MonitorRegistry.add_profile`);
reads merge the records of a window, whatever process wrote them. A write the registry refuses
is kept and tried again at the next flush; what is still refused at `close`, or beyond
`max_pending` windows held, is dropped and logged.
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from sluice.domain.results import rows_of
from sluice.monitor.sketches import MAX_COLUMNS, Profile, profiled
from sluice.observability import get_logger
from sluice.registry.scope import use_tenant
from sluice.stats import timer

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping

    from sluice.domain.signature import Signature
    from sluice.registry import MonitorRegistry

Key = tuple[str, str, int, str, int]  # tenant, deployment, revision, variant, window start (epoch s)
Part = tuple["Mapping[str, np.ndarray]", "Mapping[str, np.ndarray]", "Mapping[str, Any]"]  # one request: inputs, outputs, classes
FOLD_ROWS = 8192
SAMPLE_ROWS = 1024  # of a fold's rows, those the quantile and frequency sketches take (all are counted)
MAX_PENDING = 1000
JOIN_AT_ONCE = 512  # requests joined in one call on the folder thread (`_joined`)
PAUSE_S = 0.00002  # asked for; Linux gives ~0.1 ms
PAUSE_EVERY_S = 0.0003  # the folder thread's work between pauses, at most about (`_Pauses`)


class _Parts:
    """The requests held since the last cut: their inputs, outputs and classes in three lists,
    not a tuple a request. A request's dicts of arrays are objects the garbage collector does
    not track (NumPy's arrays are not), so holding them this way adds nothing for its full
    passes to walk; a tuple a request did, thousands a second, and made those passes come
    every half second or so in a busy `sluice serve` worker. A classifier's class labels (a
    dict of lists, which the collector does track) are held once while they are the same
    as the last request's, as they are request after request."""

    __slots__ = ("classes", "inputs", "outputs")

    def __init__(self) -> None:
        self.inputs: list[Mapping[str, np.ndarray]] = []
        self.outputs: list[Mapping[str, np.ndarray]] = []
        self.classes: list[Mapping[str, Any]] = []

    def append(self, inputs: Mapping[str, np.ndarray], outputs: Mapping[str, np.ndarray], classes: Mapping[str, Any]) -> None:
        self.inputs.append(inputs)
        self.outputs.append(outputs)
        held = self.classes
        held.append(held[-1] if held and (classes is held[-1] or classes == held[-1]) else classes)

    def __len__(self) -> int:
        return len(self.inputs)

    def __iter__(self) -> Iterator[Part]:
        return zip(self.inputs, self.outputs, self.classes, strict=True)


@dataclass(slots=True)
class _Held:
    signature: Signature | None
    parts: _Parts = field(default_factory=_Parts)  # the requests held since the last cut
    rows: int = 0
    profile: Profile | None = None  # what was folded; changed under `_folding` only


def _joined(parts: list[Mapping[str, np.ndarray]], pause: Callable[[], None] | None = None) -> dict[str, np.ndarray] | None:
    """The parts' tensors joined on the batch axis, or None when they cannot be. With `pause`
    (the folder thread's), `JOIN_AT_ONCE` parts at a time, pausing between: one call joining a
    group's 8,192 requests holds the GIL ~1.5 ms, which the event loop of a worker serving one
    connection at a time waited out (its p99 at one connection 0.45-1.5 ms with profiles, 0.36-0.50
    without)."""
    if len(parts) == 1:
        return dict(parts[0])
    at_once = len(parts) if pause is None else JOIN_AT_ONCE
    try:
        out: dict[str, np.ndarray] = {}
        for name in parts[0]:
            pieces = []
            for start in range(0, len(parts), at_once):
                pieces.append(np.concatenate([p[name] for p in parts[start : start + at_once]]))
                if pause is not None and len(parts) > at_once:  # in pieces: the GIL let go between them
                    pause()
            out[name] = pieces[0] if len(pieces) == 1 else np.concatenate(pieces)
        return out
    except (KeyError, ValueError, TypeError):  # one at a time, then (`_add`)
        return None


class _Pauses:
    """The folder thread's pauses: a short sleep (the GIL to a thread that waits for it; a sleep
    of 0 may take it straight back) once `PAUSE_EVERY_S` of work has passed since the last, so
    the GIL is never held much longer at a stretch, and a fold is not drawn out by pauses it
    does not need (each may cost a switch interval, 5 ms, where another thread keeps the CPU)."""

    __slots__ = ("_since",)

    def __init__(self) -> None:
        self._since = time.perf_counter()

    def __call__(self) -> None:
        if time.perf_counter() - self._since >= PAUSE_EVERY_S:
            time.sleep(PAUSE_S)
            self._since = time.perf_counter()


def _slim(arrays: Mapping[str, np.ndarray], max_columns: int) -> Mapping[str, np.ndarray]:
    """The tensors the sketches read, held as they are; any other (an image, an embedding wider
    than `max_columns`) left as an empty array of its rows, so that holding a fold's requests
    never holds their large tensors."""
    for a in arrays.values():  # a plain loop: this runs on every request
        if isinstance(a, np.ndarray) and (a.ndim == 0 or a.ndim > 2 or (a.ndim == 2 and a.shape[1] > max_columns)):
            break  # one `profiled` leaves out
    else:
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
        background: bool | None = None,
        rng: np.random.Generator | None = None,
    ) -> None:
        """`background`: fold cut groups on a thread of their own (default: where `timed`);
        `rng`: what draws each group's sample (a fresh generator per group by default)."""
        super().__init__(registry, flush_every_s=flush_every_s, timed=timed)
        self.background = self.timed if background is None else background
        self.rng = rng
        self.window_s = window_s
        self.max_columns = max_columns
        self.fold_rows = fold_rows
        self.sample_rows = sample_rows
        self.max_pending = max_pending
        self._held: dict[Key, _Held] = {}
        self._ready: deque[tuple[_Held, _Parts]] = deque()  # groups cut, to fold in this order
        self._folding = threading.Lock()  # one fold at a time, in the order groups were cut
        self._folder: tuple[int, threading.Thread] | None = None  # (pid, thread) folding `_ready`
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
            held.parts.append(inputs, outputs, classes)
            held.rows += rows
            if held.rows < self.fold_rows:
                return
            self._ready.append((held, held.parts))  # cut: folded off this request's path
            held.parts, held.rows = _Parts(), 0
            thread = None
            if self.background and (self._folder is None or self._folder[0] != os.getpid()):  # none yet, or a parent's
                thread = threading.Thread(target=self._fold_ready, args=(_Pauses(),), name="sluice-monitor-fold", daemon=True)
                self._folder = (os.getpid(), thread)
        if not self.background:
            self._fold_ready()
        elif thread is not None:
            thread.start()

    def _fold_ready(self, pause: Callable[[], None] | None = None) -> None:
        """Fold the groups cut, oldest first, until none is left (the folder thread's life;
        `pause`: its pauses between joins, `_joined`)."""
        while True:
            with self._folding:
                with self._lock:
                    if not self._ready:
                        self._folder = None
                        return
                    held, parts = self._ready.popleft()
                self._fold(held, parts, pause)

    def _fold(self, held: _Held, parts: _Parts, pause: Callable[[], None] | None = None) -> None:
        """`parts` folded into `held`'s profile (under `_folding`: outside the request's lock,
        the sketches' work being the expensive part); a group that cannot be is dropped, logged."""
        try:
            self._add(held, parts, pause)
        except Exception:  # neither the folder thread nor a flush stops at one bad group
            self.dropped_rows += sum(map(rows_of, parts.inputs))
            get_logger().exception("monitoring profile: requests not folded")

    def _add(self, held: _Held, parts: _Parts, pause: Callable[[], None] | None = None) -> None:
        profile = held.profile or Profile()
        inputs, outputs = _joined(parts.inputs, pause), _joined(parts.outputs, pause)
        sample, rng = self.sample_rows, self.rng
        if inputs is not None and outputs is not None:  # one call for the whole group
            profile.add_rows(inputs, outputs, held.signature, parts.classes[0], max_columns=self.max_columns, sample=sample, rng=rng, pause=pause)
        else:  # requests whose tensors differ in shape: one at a time
            for one_in, one_out, classes in parts:
                profile.add_rows(one_in, one_out, held.signature, classes, max_columns=self.max_columns, sample=sample, rng=rng, pause=pause)
        held.profile = profile

    # Flushing (the timer's interface, `timer.Flushed`) --------------------------------------------
    def pending(self) -> bool:
        return bool(self._held)

    def flush(self) -> bool:
        """Fold and write every window held; a refused write is kept for the next flush."""
        with self._flushing, self._folding:
            self._last_flush = time.monotonic()
            with self._lock:  # what is held from here on is the next flush's
                taken, self._held = self._held, {}
                ready, self._ready = self._ready, deque()
            for held, parts in ready:  # the groups cut first, in their order
                self._fold(held, parts)
            for held in taken.values():
                if held.parts:
                    self._fold(held, held.parts)
                    held.parts, held.rows = _Parts(), 0
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

    def _drop(self, *, refused: bool) -> int:
        lost, self.dropped_rows = self.dropped_rows, 0
        if refused:
            lost += sum(h.profile.rows for h in self._held.values() if h.profile is not None)
            self._held = {}
        return lost

    def _dropped(self, lost: int) -> None:
        if lost:
            get_logger().error("profiles dropped", extra={"rows": lost})
