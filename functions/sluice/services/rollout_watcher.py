"""`sluice serve`'s rollout controller: `run_once` on a thread of its own, every few seconds
(on AWS a schedule invokes `sluice.handlers.rollouts` instead)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sluice.polling import Poller

if TYPE_CHECKING:
    from sluice.services.rollouts import RolloutService

WATCH_INTERVAL_S = 10.0


class RolloutWatcher(Poller):
    """`sluice serve`'s controller: `run_once` on a thread of its own, every `interval_s`."""

    thread_name = "sluice-rollouts"
    what = "rollout controller look"

    def __init__(self, service: RolloutService, *, interval_s: float = WATCH_INTERVAL_S) -> None:
        super().__init__(interval_s=interval_s)
        self.service = service

    def look(self) -> object:
        return self.service.run_once()
