"""The process's statistics timer: one daemon thread that flushes every recorder that has
counts pending and is due (`StatsRecorder.flush_every_s` since its last flush), so a process
that stops getting requests still publishes its last counts. It runs in whatever process
records (a `sluice serve` worker, a CLI command), with or without an event
loop; in Lambda recorders are not put on it (a frozen environment runs no thread).

A recorder is held weakly: one that is no longer used leaves the timer with it. `Flushed` is
what the recorders share (the statistics', the monitoring profiles', the kept predictions'):
the timer's interface, its locks, and how one goes on the timer and off it."""

from __future__ import annotations

import os
import threading
import time
import weakref
from abc import ABC, abstractmethod
from typing import Any

from sluice.observability import get_logger

SHORTEST_TICK_S = 0.05
LONGEST_TICK_S = 0.5


class Flushed(ABC):
    """What a process holds in memory and writes to `registry` in batches: a request adds to
    it under `_lock`, `flush` (one at a time, under `_flushing`) writes what is held. The
    timer flushes it when it is `due` (held for `flush_every_s` since its last flush): from
    the first thing held (`_watched`) to `close` (`_unwatched`), where `timed` (default:
    everywhere but in Lambda, whose environments are frozen between invocations)."""

    def __init__(self, registry: Any, *, flush_every_s: float, timed: bool | None) -> None:
        if timed is None:
            from sluice.settings import in_lambda

            timed = not in_lambda()
        self.registry = registry
        self.flush_every_s = flush_every_s
        self.timed = timed
        self._lock = threading.Lock()  # what is held
        self._flushing = threading.Lock()  # one flush at a time
        self._last_flush = time.monotonic()
        self._on_timer = False

    @abstractmethod
    def pending(self) -> bool:
        """Something is held, not yet written."""

    @abstractmethod
    def flush(self) -> bool:
        """Write what is held; what the registry refuses is kept for the next flush. True when
        everything was written."""

    def close(self) -> None:
        """The shutdown flush, one rule for every recorder: what is held is written; where the
        registry refused some of it, what is held then is dropped (`_drop`), counted and
        logged (`_dropped`). What arrives after a flush that worked (a shadow job finishing as
        the process stops) is never dropped: it stays held, on the timer, and is written as
        before. The recorder stays usable, and may be closed again."""
        written = self.flush()
        with self._lock:
            lost = self._drop(refused=not written)
            if not self.pending():
                self._unwatched()
        self._dropped(lost)

    @abstractmethod
    def _drop(self, *, refused: bool) -> Any:
        """At `close`, under `_lock`: empty what is held where the registry `refused` it, and
        return what is lost, for `_dropped`."""

    @abstractmethod
    def _dropped(self, lost: Any) -> None:
        """Say what `_drop` lost (a log line, a metric); called outside `_lock`."""

    def due(self) -> bool:
        return self.pending() and time.monotonic() - self._last_flush >= self.flush_every_s

    def _watched(self) -> None:
        """On the timer (where `timed`), from the first thing held; called under `_lock`."""
        if self.timed and not self._on_timer:
            self._on_timer = True
            watch(self)

    def _unwatched(self) -> None:
        forget(self)
        self._on_timer = False


class _Timer:
    def __init__(self) -> None:
        self._recorders: weakref.WeakSet[Flushed] = weakref.WeakSet()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def watch(self, recorder: Flushed) -> None:
        with self._lock:
            self._recorders.add(recorder)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="sluice-stats", daemon=True)
                self._thread.start()

    def forget(self, recorder: Flushed) -> None:
        with self._lock:
            self._recorders.discard(recorder)

    def _run(self) -> None:
        while True:
            with self._lock:
                recorders = list(self._recorders)
            # A quarter of the shortest period: a recorder is flushed at most a quarter late.
            shortest = min((r.flush_every_s for r in recorders), default=LONGEST_TICK_S * 4)
            time.sleep(min(max(shortest / 4, SHORTEST_TICK_S), LONGEST_TICK_S))
            for recorder in recorders:
                if recorder.due():
                    try:
                        recorder.flush()
                    except Exception:  # the timer outlives anything a flush meets
                        get_logger().exception("statistics flush failed")
            del recorders  # held weakly between ticks

    def _after_fork(self) -> None:
        """A forked child has none of its parent's threads, and a lock it may have held."""
        self._lock = threading.Lock()
        self._thread = None


_timer = _Timer()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_timer._after_fork)


def watch(recorder: Flushed) -> None:
    """Flush `recorder` whenever it is due, from the timer thread (started on first use)."""
    _timer.watch(recorder)


def forget(recorder: Flushed) -> None:
    _timer.forget(recorder)
