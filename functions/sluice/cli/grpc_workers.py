"""gRPC in every HTTP worker of `sluice serve --grpc-port`.

Each worker process serves the Open Inference Protocol over gRPC beside its HTTP requests: on
its own event loop, with its own container (the same keys, admission, limits, statistics and
loaded models as its HTTP requests), so gRPC scales with `--workers` as HTTP does. The workers
all listen on the one gRPC port with SO_REUSEPORT, and the kernel hands each new connection to
one of them (by a hash of the connection's addresses). A connection stays with the worker that
took it: a client that sends every call over one channel reaches one worker; clients that
open a connection each are spread over all of them.

The command claims the port before any worker starts (`claim`): a bind without SO_REUSEPORT,
which fails on a port any other server holds (said so, exit 1); then it keeps the port bound
(not listening) until it exits, so that no other server takes it while the workers start or
restart. The workers learn the address from the environment they inherit.

The drain (`sluice.cli.drain`): at the first stop signal each worker's gRPC server stops
listening at once (`told`) and gives the calls it accepted the drain's time; the worker ends
its HTTP requests beside them and settles after both (`serve.served_app`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import threading
from typing import TYPE_CHECKING

from sluice.grpc_service import address

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    import grpc.aio

    from sluice.wiring import Container

log = logging.getLogger("sluice.serve")
ADDRESS_VARIABLE = "_SLUICE_SERVE_GRPC"  # "PORT HOST", set by the command for its workers
_RUNNING: list[WorkerGrpc] = []  # this process's gRPC server, once started


def claim(host: str, port: int, *, http_port: int | None = None) -> socket.socket:
    """In the command, before the workers start: the port checked free and held, the workers
    told where to listen. The socket is the hold: closed as the command exits. `http_port`:
    the HTTP port on the same host, not yet bound (so the check alone would not see it)."""
    if port == http_port:
        raise SystemExit(f"gRPC: port {port} is the HTTP port too: give --grpc-port another")
    family, kind, proto, _, where = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
    with socket.socket(family, kind, proto) as probe:  # SO_REUSEADDR: only a listener refuses it
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(where)
        except OSError as exc:
            raise SystemExit(f"gRPC: cannot listen on {address(host, port)} ({exc.strerror})") from None
    hold = socket.socket(family, kind, proto)
    hold.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    hold.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    hold.bind(where)  # never listens: the kernel hands connections only to listeners
    os.environ[ADDRESS_VARIABLE] = f"{port} {host}"
    return hold


class WorkerGrpc:
    """One worker's gRPC server: started with the worker's app, told to stop listening at the
    stop signal, waited for as the worker stops."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self._server: grpc.aio.Server | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Future[None] | None = None
        self._grace_s = 0.0

    @classmethod
    def from_environment(cls) -> WorkerGrpc | None:
        """The server `sluice serve` asked for, if any (`claim`)."""
        given = os.environ.get(ADDRESS_VARIABLE)
        if not given:
            return None
        port, host = given.split(" ", 1)
        return cls(host, int(port))

    async def start(self, container: Container) -> None:
        from sluice.grpc_service.server import start

        self._grace_s = container.settings.serve.drain_timeout_s
        self._loop = asyncio.get_running_loop()
        try:
            self._server, _ = await start(container, self.host, self.port, share_port=True)
        except RuntimeError:  # grpcio's word for a port it cannot bind (taken since `claim`)
            # The worker serves HTTP still: failing its startup would have uvicorn restart it
            # over and over.
            log.error("gRPC: this worker cannot listen on %s", address(self.host, self.port))
            return
        _RUNNING.append(self)

    def stop_listening(self) -> None:
        """From any thread or a signal handler: the server stops taking calls at once; the
        calls under way have the drain's time."""
        if self._loop is not None:
            with contextlib.suppress(RuntimeError):  # the loop has closed: nothing to stop
                self._loop.call_soon_threadsafe(self._stop)

    def _stop(self) -> None:
        if self._stopping is None and self._server is not None:
            self._stopping = asyncio.ensure_future(self._server.stop(self._grace_s))

    async def stopped(self) -> None:
        """The server stopped and its calls ended (stopping it now if no signal did)."""
        self._stop()
        if self._stopping is not None:
            await self._stopping
        with contextlib.suppress(ValueError):
            _RUNNING.remove(self)


@contextlib.asynccontextmanager
async def serving(container: Container) -> AsyncIterator[None]:
    """Around a worker's app: its gRPC server while the app runs, if `sluice serve` asked for
    one; in a worker's main thread, stopped listening at the stop signal as uvicorn is told."""
    worker = WorkerGrpc.from_environment()
    if worker is None:
        yield
        return
    await worker.start(container)
    if threading.current_thread() is threading.main_thread():
        on_stop_signals()  # else (one worker, on a thread) the command's handler tells it
    try:
        yield
    finally:
        await worker.stopped()


def told() -> None:
    """The stop signal reached this process: its gRPC server stops listening."""
    for running in list(_RUNNING):
        running.stop_listening()


def on_stop_signals() -> None:
    """In a worker's main thread, once uvicorn has installed its own handlers: at SIGTERM or
    SIGINT gRPC stops listening too, then uvicorn's handler runs as before."""
    for signum in (signal.SIGTERM, signal.SIGINT):
        previous = signal.getsignal(signum)

        def handler(sig: int, frame: object, previous: object = previous) -> None:
            told()
            if callable(previous):
                previous(sig, frame)

        signal.signal(signum, handler)
