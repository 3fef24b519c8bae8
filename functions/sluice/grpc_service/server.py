"""The gRPC server: grpcio's asyncio server with the inference service on one port.

`sluice serve --grpc-port` runs one in every HTTP worker, on the worker's event loop and with
its container, all on the one port (`share_port`: `sluice.cli.grpc_workers`).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING, Any

import grpc
import grpc.aio

from sluice.api.deps import _bearer
from sluice.domain.errors import SluiceError
from sluice.grpc_service import address
from sluice.grpc_service.calls import CALLER, GRPC_MISSING_KEY, call_metadata, status_of
from sluice.grpc_service.service import InferenceService
from sluice.services.admission import Admission, Capacity
from sluice.settings.process import C_INT_MAX

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from sluice.domain import Principal
    from sluice.wiring import Container


def options(max_request_bytes: int, max_response_bytes: int, *, share_port: bool = False) -> list[tuple[str, int]]:
    # The HTTP body limits: a message over the request limit is that request's error (the
    # service's, RESOURCE_EXHAUSTED saying why; on a stream its `error_message`, the stream
    # going on), so gRPC's own bound, which ends the whole call, stays above it (twice it, at
    # least 16 MiB: a WebSocket frame's too); no answer larger than an HTTP one is sent (the
    # service refuses one first, saying why).
    # SO_REUSEPORT only for the workers of one `sluice serve`, which checked the port was free
    # first: otherwise a port another process holds is an error, not a silent second server.
    # A stream's answer is the unary one inside `ModelStreamInferResponse` (its tag and length,
    # `STREAM_ENVELOPE_BYTES` at most): gRPC's own bound leaves room for them, so an answer the
    # service let through (at most the limit) never ends the whole stream.
    return [
        ("grpc.max_receive_message_length", transport_bound(max_request_bytes)),
        ("grpc.max_send_message_length", min(max_response_bytes + STREAM_ENVELOPE_BYTES, C_INT_MAX)),
        ("grpc.so_reuseport", 1 if share_port else 0),
    ]


STREAM_ENVELOPE_BYTES = 16  # a field's tag (1 byte) and its length (a varint: 5 bytes below 4 GiB), with room


def transport_bound(max_request_bytes: int) -> int:
    """gRPC's own bound on a received message: past it the whole call ends (a stream too)."""
    return max(16 * 1024 * 1024, 2 * max_request_bytes)


async def start(container: Container, host: str, port: int, *, share_port: bool = False) -> tuple[grpc.aio.Server, int]:
    """A started server on `host:port` (0: a free port); returns it and the port bound.
    `share_port`: bound with SO_REUSEPORT, beside the other workers' servers on that port."""
    settings = container.settings
    server = grpc.aio.server(options=options(settings.limits.max_request_bytes, settings.limits.max_response_bytes, share_port=share_port))
    add_service(InferenceService(container), server, Guard(container))
    bound = server.add_insecure_port(address(host, port))
    await server.start()
    return server, bound


PUBLIC = frozenset(("ServerLive", "ServerReady", "ServerMetadata"))  # the service's methods that take no key
PREDICTIONS = frozenset(("ModelInfer", "ModelStreamInfer"))  # the calls a refusal of counts as a failed prediction


class Guard:
    """Each RPC's rules as its call opens, before its message is read, wrapped around the
    service's handlers once, when they are registered (no interceptor: nothing more is
    built per call):

    - a call without a working key is refused at once (UNAUTHENTICATED): a caller with no key
      holds none of the worker's calls (calls opened with no message, or none ever sent, kept
      every tenant's gRPC out). The key is read as the HTTP edge reads it (recently checked
      ones from memory); a unary call's handler takes the caller found here (`CALLER`), the
      key looked at again once the message has come (a key revoked meanwhile is refused); a
      stream reads the key again as it opens (what it checks later counts from that read);
    - a keyed call is one of the worker's calls (`SLUICE_GRPC_MAX_CONCURRENT_RPCS`, a tenant
      held to its share while another wants room: RESOURCE_EXHAUSTED past either) from the
      moment it opens to its end;
    - a unary call's message is given the HTTP body's `SLUICE_BODY_TIMEOUT_S` to arrive: past
      it, DEADLINE_EXCEEDED. So a call waiting for its message holds its tenant's slots only,
      and not for long (grpcio would read the message of a unary call, however long it took,
      before any handler ran). The public calls (liveness, readiness, the server's metadata)
      take no key and no slot, only this wait.
    """

    def __init__(self, container: Container) -> None:
        settings = container.settings
        limit = settings.serve.grpc_max_concurrent_rpcs
        self.keys = container.keys
        self.outcomes = container.predictions.outcomes
        # The worker's calls, each tenant's share of them: a refusal told to telemetry as every
        # door's admission tells it (`Admission`).
        capacity = Capacity(limit, settings.admission.tenant_share, what="gRPC calls") if limit else None
        self.calls = Admission(None, capacity, telemetry=container.telemetry) if capacity is not None else None
        self.wait_s = settings.limits.body_timeout_s

    def wrap(self, method: str, handler: Any) -> Any:
        """`handler` (unary, or streamed both ways) under the rules, run as its call opens."""
        public = method in PUBLIC
        if handler.request_streaming:  # grpcio runs it as the call opens; messages come when they come

            async def streamed(requests: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
                principal = None if public else (await self._caller(context))[0]
                await self._enter(context, principal, method)
                try:
                    # The service's stream closed with this one (a cancelled call's is closed
                    # when it is finalized), not left to be finalized on its own later.
                    async with contextlib.aclosing(handler.stream_stream(requests, context)) as answers:
                        async for answer in answers:
                            yield answer
                finally:
                    self._leave(principal)

            return handler._replace(stream_stream=streamed)

        async def unary(requests: Any, context: grpc.aio.ServicerContext) -> Any:
            caller = None if public else await self._caller(context)
            principal = None if caller is None else caller[0]
            await self._enter(context, principal, method)
            try:
                request = await self._read(context)
                if caller is not None and self.keys.cached(caller[2]) is None:  # a key revoked while its message came
                    caller = await self._caller(context)
                said = CALLER.set(caller[:2] if caller is not None else None)  # the handler runs in this task, in this context
                try:
                    return await handler.unary_unary(request, context)
                finally:
                    CALLER.reset(said)
            finally:
                self._leave(principal)

        # Read as a stream of one message: grpcio runs such a handler as the call opens.
        return grpc.stream_unary_rpc_method_handler(
            unary, request_deserializer=handler.request_deserializer, response_serializer=handler.response_serializer
        )

    async def _caller(self, context: grpc.aio.ServicerContext) -> tuple[Principal, dict[str, str], str]:
        """The call's principal, metadata (keys lowercased, text values only) and key; a call
        without a working key is ended UNAUTHENTICATED here (a registry that cannot tell,
        UNAVAILABLE)."""
        try:
            metadata = call_metadata(context)
        except SluiceError as exc:
            code, message, trailer = status_of(exc)
            await context.abort(code, message, trailing_metadata=trailer)
        key = _bearer(metadata)  # type: ignore[arg-type]
        if not key:
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, GRPC_MISSING_KEY)
        principal = self.keys.cached(key)
        if principal is None:
            try:
                principal = await asyncio.to_thread(self.keys.authenticate, key)
            except Exception as exc:  # a key that does not work; a registry that does not answer (`status_of` logs the unexpected)
                code, message, trailer = status_of(exc)
                await context.abort(code, message, trailing_metadata=trailer)
        return principal, metadata, key

    async def _enter(self, context: grpc.aio.ServicerContext, principal: Principal | None, method: str) -> None:
        """One more of the worker's calls for `principal`'s tenant (none counted for the public
        calls, which have none); a prediction refused is counted as a failed request too
        (`sluice.inference.outcomes`), as on every door."""
        if self.calls is None or principal is None:
            return
        try:
            self.calls.enter(principal, key=False)
        except SluiceError as exc:
            if method in PREDICTIONS:
                self.outcomes.refused(principal.tenant, None, exc)
            _, message, trailer = status_of(exc)
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, message, trailing_metadata=trailer)

    def _leave(self, principal: Principal | None) -> None:
        if self.calls is not None and principal is not None:
            self.calls.leave(principal, key=False)

    async def _read(self, context: grpc.aio.ServicerContext) -> Any:
        """A unary call's message, parsed as it is read (`add_service`), within `wait_s`."""
        task = asyncio.current_task()
        assert task is not None  # grpcio runs each call's handler in a task of its own
        cancelling, expired = task.cancelling(), False

        def expire() -> None:
            nonlocal expired
            expired = True
            task.cancel()

        timer = asyncio.get_running_loop().call_later(self.wait_s, expire)
        try:
            request = await context.read()
        except asyncio.CancelledError:
            # Cancelled by the timer alone (as `asyncio.timeout` tells): the message is late.
            # A cancellation of the call itself goes on as it is.
            if not expired or task.uncancel() > cancelling:
                raise
            request = None
        except SluiceError as exc:  # no such message: `wire.not_a`
            code, message, trailer = status_of(exc)
            await context.abort(code, message, trailing_metadata=trailer)
        finally:
            timer.cancel()
        if request is None:
            await context.abort(grpc.StatusCode.DEADLINE_EXCEEDED, f"the request message did not arrive within {self.wait_s:g} s")
        if request is grpc.aio.EOF:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "the call ended without its request message")
        return request



def add_service(servicer: Any, server: grpc.aio.Server, guard: Guard | None = None) -> None:
    """The service's RPCs as tritonclient's compiled stubs declare them, their requests read
    so that bytes which are no such message are INVALID_ARGUMENT (`wire.not_a`), on every RPC;
    and inference (unary and streamed), whose requests and answers are read and written around
    their tensors' bytes (`sluice.grpc_service.wire`). `guard`: every RPC under its rules,
    as its call opens (`Guard`)."""
    import functools

    from tritonclient.grpc import service_pb2_grpc as pb_grpc

    from sluice.grpc_service.wire import (
        read_infer_request,
        read_request,
        write_infer_response,
        write_stream_response,
    )

    limit = servicer.container.settings.limits.max_request_bytes
    read_infer = functools.partial(read_infer_request, limit=limit)
    declared = _Declared()
    pb_grpc.add_GRPCInferenceServiceServicer_to_server(servicer, declared)
    handlers = {
        # The stubs' deserializer is the request message's `FromString`.
        name: handler._replace(request_deserializer=read_request(handler.request_deserializer.__self__, limit))
        for name, handler in declared.handlers.items()
    }
    handlers["ModelInfer"] = grpc.unary_unary_rpc_method_handler(
        servicer.ModelInfer, request_deserializer=read_infer, response_serializer=write_infer_response
    )
    handlers["ModelStreamInfer"] = grpc.stream_stream_rpc_method_handler(
        servicer.ModelStreamInfer, request_deserializer=read_infer, response_serializer=write_stream_response
    )
    if guard is not None:
        handlers = {name: guard.wrap(name, handler) for name, handler in handlers.items()}
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
