"""`sluice serve`'s background looks (the inbox, the schedules, the rollouts): a daemon thread that looks
every `interval_s` until stopped, and outlives one bad look. Once told to stop it starts no
new look; `stop` also waits for the one under way."""

from __future__ import annotations

import logging
import threading
from abc import ABC, abstractmethod


class Poller(ABC):
    """Subclasses name their thread and say what one look is; a failed look is logged (on the
    subclass's module's logger, as `<what> failed`) and the next one comes as planned."""

    thread_name = "sluice-poller"
    what = "scan"

    def __init__(self, *, interval_s: float) -> None:
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @abstractmethod
    def look(self) -> object:
        """One look: what it found, for the caller's tests and logs."""

    def start(self) -> threading.Thread:
        self._thread = threading.Thread(target=self._loop, name=self.thread_name, daemon=True)
        self._thread.start()
        return self._thread

    @property
    def stopping(self) -> bool:
        """Told to stop: a look under way should start nothing more."""
        return self._stop.is_set()

    def stop_starting(self) -> None:
        """No look starts from now on (from any thread: it sets an Event, which takes a lock, so never
        from a signal handler: `sluice.cli.drain.Stopping` calls it from a thread of its own)."""
        self._stop.set()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(self.interval_s * 2)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.look()
            except Exception:  # the thread outlives one bad look
                logging.getLogger(type(self).__module__).exception("%s failed", self.what)
            self._stop.wait(self.interval_s)
