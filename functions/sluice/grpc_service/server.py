"""The gRPC server: grpcio's asyncio server with the inference service on one port.

`sluice serve --grpc-port` runs it in a process of its own beside uvicorn's workers
(`start_process`): one event loop, one container, nothing shared with an HTTP worker's loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from multiprocessing.process import BaseProcess

    import grpc.aio

    from sluice.wiring import Container


def options(max_request_bytes: int, max_response_bytes: int) -> list[tuple[str, int]]:
    # The HTTP body limits, as gRPC's own: a larger message is refused (RESOURCE_EXHAUSTED)
    # before it is parsed, and no answer larger than an HTTP one is sent (the service refuses
    # one first, saying why).
    # No SO_REUSEPORT: a port another process holds is an error, not a silent second server.
    return [
        ("grpc.max_receive_message_length", max_request_bytes),
        ("grpc.max_send_message_length", max_response_bytes),
        ("grpc.so_reuseport", 0),
    ]


async def start(container: Container, host: str, port: int) -> tuple[grpc.aio.Server, int]:
    """A started server on `host:port` (0: a free port); returns it and the port bound."""
    import grpc.aio
    from tritonclient.grpc import service_pb2_grpc as pb_grpc

    from sluice.grpc_service.service import InferenceService

    settings = container.settings
    # Each call may hold a message of up to the body limit and its decoding: a bound on calls
    # at once is a bound on the memory they take (past it, RESOURCE_EXHAUSTED at once).
    server = grpc.aio.server(
        options=options(settings.limits.max_request_bytes, settings.limits.max_response_bytes),
        maximum_concurrent_rpcs=settings.serve.grpc_max_concurrent_rpcs or None,
    )
    pb_grpc.add_GRPCInferenceServiceServicer_to_server(InferenceService(container), server)
    bound = server.add_insecure_port(f"{host}:{port}")
    await server.start()
    return server, bound


async def _serve(host: str, port: int, parent: int) -> None:
    import signal

    from sluice.wiring import get_container

    container = get_container()
    try:
        server, bound = await start(container, host, port)
    except RuntimeError:  # grpcio's word for a port it cannot bind
        raise SystemExit(f"gRPC: cannot listen on {host}:{port} (in use?)") from None
    print(f"gRPC (Open Inference Protocol) on {host}:{bound}", flush=True)
    told = asyncio.Event()  # SIGTERM: `sluice serve` drains (sluice.cli.drain)
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, told.set)
    # Ends with its parent, even one killed without a chance to stop it.
    while os.getppid() == parent and not told.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(told.wait(), 1.0)
    # It stops listening at once; the calls it accepted have the drain's time to finish.
    await server.stop(grace=container.settings.serve.drain_timeout_s)
    await asyncio.to_thread(container.settle)  # its statistics, captured requests, shadow jobs


def run(host: str, port: int, parent: int) -> None:
    """The process's target (spawned, so it imports what it needs itself)."""
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve(host, port, parent))


def start_process(host: str, port: int) -> BaseProcess:
    """The gRPC server in a child process; the caller stops it when the HTTP server ends."""
    import multiprocessing

    process = multiprocessing.get_context("spawn").Process(target=run, args=(host, port, os.getpid()), name="sluice-grpc", daemon=True)
    process.start()
    return process
