"""The gRPC server: grpcio's asyncio server with the inference service on one port.

`sluice serve --grpc-port` runs one in every HTTP worker, on the worker's event loop and with
its container, all on the one port (`share_port`: `sluice.cli.grpc_workers`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import grpc.aio

    from sluice.wiring import Container


def options(max_request_bytes: int, max_response_bytes: int, *, share_port: bool = False) -> list[tuple[str, int]]:
    # The HTTP body limits, as gRPC's own: a larger message is refused (RESOURCE_EXHAUSTED)
    # before it is parsed, and no answer larger than an HTTP one is sent (the service refuses
    # one first, saying why).
    # SO_REUSEPORT only for the workers of one `sluice serve`, which checked the port was free
    # first: otherwise a port another process holds is an error, not a silent second server.
    return [
        ("grpc.max_receive_message_length", max_request_bytes),
        ("grpc.max_send_message_length", max_response_bytes),
        ("grpc.so_reuseport", 1 if share_port else 0),
    ]


async def start(container: Container, host: str, port: int, *, share_port: bool = False) -> tuple[grpc.aio.Server, int]:
    """A started server on `host:port` (0: a free port); returns it and the port bound.
    `share_port`: bound with SO_REUSEPORT, beside the other workers' servers on that port."""
    import grpc.aio
    from tritonclient.grpc import service_pb2_grpc as pb_grpc

    from sluice.grpc_service.service import InferenceService

    settings = container.settings
    # Each call may hold a message of up to the body limit and its decoding: a bound on calls
    # at once is a bound on the memory they take (past it, RESOURCE_EXHAUSTED at once).
    server = grpc.aio.server(
        options=options(settings.limits.max_request_bytes, settings.limits.max_response_bytes, share_port=share_port),
        maximum_concurrent_rpcs=settings.serve.grpc_max_concurrent_rpcs or None,
    )
    pb_grpc.add_GRPCInferenceServiceServicer_to_server(InferenceService(container), server)
    bound = server.add_insecure_port(f"{host}:{port}")
    await server.start()
    return server, bound
