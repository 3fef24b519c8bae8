"""The process's statistics timer: one daemon thread that flushes every recorder that has
counts pending and is due (`StatsRecorder.flush_every_s` since its last flush), so a process
that stops getting requests still publishes its last counts. It runs in whatever process
records (a `sluice serve` worker, a CLI command), with or without an event
loop; in Lambda recorders are not put on it (a frozen environment runs no thread).

A recorder is held weakly: one that is no longer used leaves the timer with it."""

from __future__ import annotations

import os
import threading
import time
import weakref
from typing import TYPE_CHECKING

from sluice.observability import get_logger

if TYPE_CHECKING:
    from sluice.stats.recorder import StatsRecorder

SHORTEST_TICK_S = 0.05
LONGEST_TICK_S = 0.5


class _Timer:
    def __init__(self) -> None:
        self._recorders: weakref.WeakSet[StatsRecorder] = weakref.WeakSet()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def watch(self, recorder: StatsRecorder) -> None:
        with self._lock:
            self._recorders.add(recorder)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="sluice-stats", daemon=True)
                self._thread.start()

    def forget(self, recorder: StatsRecorder) -> None:
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


def watch(recorder: StatsRecorder) -> None:
    """Flush `recorder` whenever it is due, from the timer thread (started on first use)."""
    _timer.watch(recorder)


def forget(recorder: StatsRecorder) -> None:
    _timer.forget(recorder)
