"""The gRPC server: grpcio's asyncio server with the inference service on one port.

`sluice serve --grpc-port` runs one in every HTTP worker, on the worker's event loop and with
its container, all on the one port (`share_port`: `sluice.cli.grpc_workers`).
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    import grpc.aio

    from sluice.services.admission import Capacity
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

    from sluice.grpc_service.service import InferenceService

    settings = container.settings
    server = grpc.aio.server(
        options=options(settings.limits.max_request_bytes, settings.limits.max_response_bytes, share_port=share_port),
        interceptors=[key_first(container)],
    )
    add_service(InferenceService(container), server)
    bound = server.add_insecure_port(f"{host}:{port}")
    await server.start()
    return server, bound


PUBLIC = frozenset(f"/inference.GRPCInferenceService/{m}" for m in ("ServerLive", "ServerReady", "ServerMetadata"))


ANONYMOUS = ""  # the public calls' tenant: no tenant's name is empty


def key_first(container: Container) -> Any:
    """An interceptor that refuses a call without a working key as it opens (UNAUTHENTICATED),
    before its message is read, and bounds the rest (`bounded`): a caller with no key holds
    none of the worker's calls (calls opened with no message, or none ever sent, kept every
    tenant's gRPC out). A key is read as the HTTP edge reads it (recently checked ones from
    memory); the service checks it again as its call runs."""
    import asyncio

    import grpc
    import grpc.aio

    from sluice.api.deps import _bearer
    from sluice.domain.errors import Unauthenticated
    from sluice.grpc_service.service import GRPC_MISSING_KEY
    from sluice.services.admission import Capacity

    def refusal(message: str) -> Any:
        async def refuse(requests: Any, context: grpc.aio.ServicerContext) -> None:
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, message)

        # Streamed both ways whatever the method: the answer goes without reading a message.
        return grpc.stream_stream_rpc_method_handler(refuse)

    missing = refusal(GRPC_MISSING_KEY)
    keys = container.keys
    settings = container.settings
    limit = settings.serve.grpc_max_concurrent_rpcs
    calls = Capacity(limit, settings.admission.tenant_share, what="gRPC calls") if limit else None
    wait_s = settings.limits.body_timeout_s

    class KeyFirst(grpc.aio.ServerInterceptor):  # type: ignore[misc]
        async def intercept_service(self, continuation: Any, details: Any) -> Any:
            if details.method in PUBLIC:  # no key, no tensor: none of the worker's calls, only the message's wait
                return bounded(await continuation(details), ANONYMOUS, None, wait_s)
            metadata = {k.lower(): v for k, v in (details.invocation_metadata or ()) if isinstance(v, str)}
            key = _bearer(metadata)  # type: ignore[arg-type]
            if not key:
                return missing
            principal = keys.cached(key)
            if principal is None:
                try:
                    principal = await asyncio.to_thread(keys.authenticate, key)
                except Unauthenticated as exc:
                    return refusal(exc.message)
            return bounded(await continuation(details), principal.tenant, calls, wait_s)

    return KeyFirst()


def bounded(handler: Any, tenant: str, calls: Capacity | None, wait_s: float) -> Any:
    """`handler`, its call one of the worker's `calls` (`SLUICE_GRPC_MAX_CONCURRENT_RPCS`, a
    tenant held to its share while another wants room: RESOURCE_EXHAUSTED past either) from
    the moment it opens to its end, and a call of one message given `wait_s` (the HTTP body's
    `SLUICE_BODY_TIMEOUT_S`) for it to arrive: past it, DEADLINE_EXCEEDED. So a call waiting
    for its message holds its tenant's slots only, and not for long (grpcio would read the
    message of a unary call, however long it took, before any handler ran)."""
    import grpc

    from sluice.domain.errors import SluiceError
    from sluice.grpc_service.service import status_of
    from sluice.inline import timeout

    if handler is None:  # no such method: grpcio answers UNIMPLEMENTED
        return None

    @contextlib.asynccontextmanager
    async def slot(context: grpc.aio.ServicerContext) -> AsyncIterator[None]:
        if calls is None:
            yield
            return
        try:
            calls.enter(tenant)
        except SluiceError as exc:
            _, message, trailer = status_of(exc)
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, message, trailing_metadata=trailer)
        try:
            yield
        finally:
            calls.leave(tenant)

    # The service's methods are unary, or streamed both ways.
    if handler.request_streaming:  # grpcio runs it as the call opens; messages come when they come

        async def streamed(requests: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            # The service's stream closed with this one (a cancelled call's is closed when it
            # is finalized), not left to be finalized on its own later.
            async with slot(context), contextlib.aclosing(handler.stream_stream(requests, context)) as answers:
                async for answer in answers:
                    yield answer

        return handler._replace(stream_stream=streamed)

    async def unary(requests: Any, context: grpc.aio.ServicerContext) -> Any:
        async with slot(context):
            try:
                async with timeout(wait_s):
                    request = await context.read()  # parsed as it is read (`add_service`)
            except TimeoutError:
                await context.abort(grpc.StatusCode.DEADLINE_EXCEEDED, f"the request message did not arrive within {wait_s:g} s")
            except SluiceError as exc:  # no such message: `wire.not_a`
                code, message, trailer = status_of(exc)
                await context.abort(code, message, trailing_metadata=trailer)
            if request is grpc.aio.EOF:
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "the call ended without its request message")
            return await handler.unary_unary(request, context)

    # Read as a stream of one message: grpcio runs such a handler as the call opens.
    return grpc.stream_unary_rpc_method_handler(
        unary, request_deserializer=handler.request_deserializer, response_serializer=handler.response_serializer
    )


def add_service(servicer: Any, server: grpc.aio.Server) -> None:
    """The service's RPCs as tritonclient's compiled stubs declare them, their requests read
    so that bytes which are no such message are INVALID_ARGUMENT (`wire.not_a`), on every RPC;
    and inference (unary and streamed), whose requests and answers are read and written around
    their tensors' bytes (`sluice.grpc_service.wire`)."""
    import grpc
    from tritonclient.grpc import service_pb2_grpc as pb_grpc

    from sluice.grpc_service.wire import (
        read_infer_request,
        read_request,
        write_infer_response,
        write_stream_response,
    )

    declared = _Declared()
    pb_grpc.add_GRPCInferenceServiceServicer_to_server(servicer, declared)
    handlers = {
        # The stubs' deserializer is the request message's `FromString`.
        name: handler._replace(request_deserializer=read_request(handler.request_deserializer.__self__))
        for name, handler in declared.handlers.items()
    }
    handlers["ModelInfer"] = grpc.unary_unary_rpc_method_handler(
        servicer.ModelInfer, request_deserializer=read_infer_request, response_serializer=write_infer_response
    )
    handlers["ModelStreamInfer"] = grpc.stream_stream_rpc_method_handler(
        servicer.ModelStreamInfer, request_deserializer=read_infer_request, response_serializer=write_stream_response
    )
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(declared.service, handlers),))
    server.add_registered_method_handlers(declared.service, handlers)


class _Declared:
    """Takes the handlers the compiled stubs register, to register them changed."""

    def __init__(self) -> None:
        self.service = ""
        self.handlers: dict[str, Any] = {}

    def add_generic_rpc_handlers(self, handlers: Any) -> None:
        pass  # the same handlers come by name below

    def add_registered_method_handlers(self, service: str, handlers: dict[str, Any]) -> None:
        self.service, self.handlers = service, handlers
