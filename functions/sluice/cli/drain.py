"""How `sluice serve` stops on SIGTERM or SIGINT: a drain with a bound.

1. At the signal the listening socket stops listening: `shutdown(2)` on the socket the
   command bound, which every HTTP worker shares, so one call stops it in every process at
   once. A new connection is refused (ECONNREFUSED), which a client or load balancer retries
   elsewhere, instead of waiting in the kernel's backlog to be reset when the process exits.
   (A connection whose handshake completed in that very instant, not yet taken by a worker,
   is reset with the backlog: none of its request was read.) The workers are told to stop
   at the same moment; each worker's gRPC server stops listening as it is told
   (`sluice.cli.grpc_workers`).
2. What was accepted is answered: each worker gives its requests and gRPC calls
   `SLUICE_DRAIN_TIMEOUT_S`, then cancels the rest (answered 503, `CutOff`); local batch jobs finish the chunks they
   score (`SLUICE_BATCH_STOP_GRACE_S`), in the background threads at once, in a worker as it
   stops.
3. Every process writes out what it holds (`Container.settle`): shadow comparisons handed
   over, captured requests, statistics.
4. The command waits for its workers until the bound (`stop_bound_s`), kills any still
   running, and exits.

A second signal cuts the batch jobs' grace short (one worker: stops waiting for requests too).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import signal
import socket
import threading
import time
from typing import TYPE_CHECKING, Any, Protocol

from uvicorn.supervisors import Multiprocess

from sluice.cli import grpc_workers
from sluice.wiring.container import SETTLE_S

if TYPE_CHECKING:

    from starlette.types import ASGIApp, Message, Receive, Scope, Send
    from uvicorn import Config

    from sluice.settings import ServeSettings

log = logging.getLogger("sluice.serve")
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
SLACK_S = 5.0  # processes starting and ending, the statistics' last write


def stop_bound_s(serve: ServeSettings) -> float:
    """The longest `sluice serve` takes from the signal to its exit."""
    return serve.drain_timeout_s + serve.batch_stop_grace_s + SETTLE_S + SLACK_S


class Stoppable(Protocol):
    """What runs beside the HTTP side (`serve.Background`)."""

    def stop_starting(self) -> None: ...
    def hurry(self) -> None: ...
    def stop(self) -> list[str]: ...


class Stopping:
    """The signals' side of the drain, kept by the command's main process.

    `on_signal` runs in a signal handler, which Python may run inside another run of itself (two
    signals at once: a supervisor's and a terminal's, `timeout` forwarding the signal pkill sent
    it too) or inside any code of the main thread: it takes no lock. It counts the signal, stops
    listening (system calls) and wakes a thread of its own (a byte down a pipe), which does what
    takes locks: the background stops starting work and starts stopping, and a later signal
    hurries it. (Setting a `threading.Event` in the handler took the event's lock: a second
    signal landing while the first handler held it waited for itself, for ever.)"""

    def __init__(self, background: Stoppable, bound_s: float) -> None:
        self.background = background
        self.bound_s = bound_s
        self.sockets: list[socket.socket] = []
        self.signals = 0
        self.since: float | None = None  # monotonic time of the first signal
        self._counted = itertools.count(1)  # next() is one call: a handler inside a handler counts apart
        self._stopped: list[str] = []
        self._background: threading.Thread | None = None
        self._begin_lock = threading.Lock()  # threads only: never taken in a handler
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_w, False)
        threading.Thread(target=self._act, name="sluice-signals", daemon=True).start()

    def on_signal(self, signum: int) -> bool:
        """True for the first signal: listening stops (HTTP, and gRPC when this process serves
        it: one worker) and the background is told to stop; a later one hurries it."""
        count = next(self._counted)
        self.signals = max(self.signals, count)
        first = count == 1
        if first:
            self.since = time.monotonic()
            for sock in self.sockets:
                stop_listening(sock)
        with contextlib.suppress(BlockingIOError, OSError):  # a full pipe holds enough wake-ups
            os.write(self._wake_w, b"\x01" if first else b"\x02")
        return first

    def _act(self) -> None:
        """What the signals ask, on this thread: the first begins the stop, each later one hurries it."""
        while True:
            try:
                woken = os.read(self._wake_r, 64)
            except OSError:
                return
            if not woken:
                return
            for byte in woken:
                self._begin()  # once; a later signal's byte may come before the first's is read
                if byte != 1:
                    self.background.hurry()

    def _begin(self) -> None:
        """Begin the stop, once: gRPC stops listening, the background starts nothing more, and
        its local batch jobs' grace runs beside the HTTP drain, not after it."""
        with self._begin_lock:
            if self._background is not None:
                return
            grpc_workers.told()
            self.background.stop_starting()
            self._background = threading.Thread(target=self._stop_background, name="sluice-stop", daemon=True)
            self._background.start()

    def _stop_background(self) -> None:
        self._stopped = self.background.stop()

    def left_s(self) -> float:
        """Seconds left of the bound (all of it before any signal)."""
        if self.since is None:
            return self.bound_s
        return max(0.0, self.since + self.bound_s - time.monotonic())

    def finish(self) -> list[str]:
        """Stop the background (if no signal did) and wait for it within the bound; the ids
        of the local batch jobs recorded FAILED as they stopped."""
        with self._begin_lock:
            stopping = self._background
            if stopping is None:  # no signal: the stop runs here, and a signal now begins nothing more
                self._background = threading.current_thread()
        if stopping is None:
            return self.background.stop()
        stopping.join(self.left_s())
        return list(self._stopped)


def stop_listening(sock: socket.socket) -> None:
    """Stop a listening socket for every process that shares it (closing one process's copy
    would leave the others' open)."""
    with contextlib.suppress(OSError):  # never listened, or stopped already
        sock.shutdown(socket.SHUT_RDWR)


class Supervisor(Multiprocess):
    """uvicorn's supervisor of worker processes, with the drain above: at the first signal the
    socket stops listening and the workers are told at once (uvicorn's own loop would tell them
    within half a second, its socket still listening until the last worker had finished), and
    the workers are waited for until the bound, then killed."""

    def __init__(self, config: Config, sockets: list[socket.socket], stopping: Stopping) -> None:
        super().__init__(config, sockets)
        self.stopping = stopping
        stopping.sockets.extend(sockets)
        for signum in STOP_SIGNALS:  # uvicorn's handlers queue the signal; these act at once, then queue it
            signal.signal(signum, self._on_stop_signal)

    def _on_stop_signal(self, signum: int, frame: object) -> None:
        if self.stopping.on_signal(signum):
            for process in self.processes:
                if process.pid is not None and process.exitcode is None:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(process.pid, signal.SIGTERM)
        self.signal_queue.append(signum)

    def join_all(self) -> None:
        for process in self.processes:
            process.process.join(self.stopping.left_s())
        for process in self.processes:
            if process.process.is_alive():
                log.warning("HTTP worker %s still running at the stop's bound: killed", process.pid)
                process.kill()
                process.process.join(5)


class CutOff:
    """The app as `sluice serve` runs it: a request uvicorn cancels when the drain's time is up
    is answered 503 `unavailable` (when nothing of its answer has gone out yet), with one line
    in the log, instead of uvicorn's bare 500 and a traceback. Only the server cancels a
    request's task: a client that leaves is told by a message, and a timeout inside the app
    ends as its own error."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    def __getattr__(self, name: str) -> Any:
        if name == "app":  # not set yet (a copy being made): no recursion
            raise AttributeError(name)
        return getattr(self.app, name)  # the app's own attributes (its state, its routes)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def sending(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, sending)
        except asyncio.CancelledError:
            log.warning("request cut off: the server stopped before it was answered", extra={"path": scope.get("path")})
            if not started:
                from sluice.api.errors import error_response
                from sluice.domain.errors import Unavailable

                stopped = Unavailable("the server stopped before this request was answered: send it again")
                response = error_response(stopped)
                response.headers["connection"] = "close"
                await response(scope, receive, send)
