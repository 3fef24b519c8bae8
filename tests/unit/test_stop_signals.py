"""`sluice serve`'s signal handler takes no lock. Python runs a handler between two bytecodes of
the main thread, and inside another run of itself when two signals come at once (a terminal's
and a supervisor's; `timeout` forwarding the one pkill sent it too): a handler that set a
`threading.Event` there waited for the event's lock held by the code it interrupted, for ever,
while the HTTP thread spun on its closed socket. The handler now counts, stops listening and
wakes a thread, which tells the background."""

from __future__ import annotations

import signal
import threading
import time

from sluice.cli.drain import Stopping


class Background:
    """What runs beside the HTTP side, each of its calls taking `lock` as Event.set takes its own."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.calls: list[str] = []

    def _call(self, name: str) -> None:
        with self.lock:
            self.calls.append(name)

    def stop_starting(self) -> None:
        self._call("stop_starting")

    def hurry(self) -> None:
        self._call("hurry")

    def stop(self) -> list[str]:
        self._call("stop")
        return ["job-1"]


def _within(seconds: float, condition: object) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():  # type: ignore[operator]
            return True
        time.sleep(0.01)
    return False


def test_signals_landing_while_the_lock_the_background_takes_is_held_return_at_once() -> None:
    background = Background()
    stopping = Stopping(background, bound_s=30)
    answers: list[bool] = []
    with background.lock:  # the code the signal interrupted holds it
        handler = threading.Thread(target=lambda: answers.extend([stopping.on_signal(signal.SIGTERM), stopping.on_signal(signal.SIGINT)]))
        handler.start()
        handler.join(5)
        assert not handler.is_alive(), "the signal handler waited for a lock"
    assert answers == [True, False] and stopping.signals == 2 and stopping.since is not None
    assert _within(5, lambda: background.calls.count("hurry") == 1 and "stop" in background.calls)
    assert background.calls[0] == "stop_starting"
    assert stopping.finish() == ["job-1"] and background.calls.count("stop") == 1


def test_without_a_signal_finish_stops_the_background_once_and_a_late_signal_begins_nothing_more() -> None:
    background = Background()
    stopping = Stopping(background, bound_s=30)
    assert stopping.finish() == ["job-1"]
    assert stopping.on_signal(signal.SIGTERM) is True  # listening stops; the stop has run already
    time.sleep(0.2)
    assert background.calls == ["stop"]
