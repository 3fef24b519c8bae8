"""`sluice serve`'s rollout controller: `run_once` on a thread of its own, every few seconds
(on AWS a schedule invokes `sluice.handlers.rollouts` instead)."""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sluice.services.rollouts import RolloutService

log = logging.getLogger(__name__)
WATCH_INTERVAL_S = 10.0


class RolloutWatcher:
    """`sluice serve`'s controller: `run_once` on a thread of its own, every `interval_s`."""

    def __init__(self, service: RolloutService, *, interval_s: float = WATCH_INTERVAL_S) -> None:
        self.service = service
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> RolloutWatcher:
        self._thread = threading.Thread(target=self._loop, name="sluice-rollouts", daemon=True)
        self._thread.start()
        return self

    def stop_starting(self) -> None:
        """No look starts from now on (it only sets a flag)."""
        self._stop.set()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.service.run_once()
            except Exception:  # a bad look must not end the thread
                log.exception("rollout controller look failed")
