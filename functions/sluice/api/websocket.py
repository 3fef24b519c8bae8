"""`ws://…/api/v1/stream` on `sluice serve`: predictions over a WebSocket (`sluice.api.socket`).

Authentication happens once, when the connection opens, as the HTTP API does it (a key in
`Authorization: Bearer` or `x-api-key`, or, from a browser, a `bearer.<key>` subprotocol
beside `sluice.v1`); a connection with no key in its handshake must send
`{"action": "auth", "api_key": …}` first, within `SLUICE_HEADER_TIMEOUT_S`. Never a query
string: URLs end up in logs. A key that fails is refused with 401 before the upgrade (or, on
the first message, answered and closed with 1008). The tenant is fixed for the connection.

Messages of one connection are answered concurrently, at most `SLUICE_WEBSOCKET_MAX_IN_FLIGHT`
at once (the next message is read when one is answered), each answer carrying its request id.
Each message in progress also counts against its key's requests in flight in this process
(`SLUICE_MAX_IN_FLIGHT_PER_KEY`, with HTTP requests): past it, a `too_many_in_flight` answer;
and, as a prediction, against the worker's predictions in flight and its tenant's share
(`SLUICE_MAX_PREDICTIONS_IN_FLIGHT`): past them, an `overloaded` (503) or `tenant_overloaded`
(429) answer. The connection stays open either way.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from typing import TYPE_CHECKING, Any

import orjson
from starlette.websockets import WebSocket, WebSocketDisconnect

from sluice.api.errors import error_response
from sluice.api.socket import Session, encode, error_answer, message_size
from sluice.domain.errors import Unauthenticated
from sluice.inline import timeout
from sluice.registry.scope import bind_tenant, unbind_tenant
from sluice.services.keys import SUBPROTOCOL, handshake_headers, presented_key

if TYPE_CHECKING:
    from collections.abc import Callable

    from starlette.types import Receive, Scope, Send

    from sluice.domain import Principal
    from sluice.services.ratelimit import RateLimit
    from sluice.wiring import Container

STREAM_PATH = "/api/v1/stream"
POLICY_VIOLATION = 1008  # RFC 6455: the close code for a connection refused on policy


class Sockets:
    """The ASGI app for WebSocket scopes (`SluiceApp` hands them over)."""

    def __init__(self, container: Callable[[], Container]) -> None:
        self.container = container
        self._rate_limit: RateLimit | None = None
        self._rate_limit_read = False

    def rate_limit(self, container: Container) -> RateLimit | None:
        if not self._rate_limit_read:
            spec = container.settings.websocket.websocket_rate_limit
            if spec:
                try:
                    from sluice.services.ratelimit import RateLimit

                    self._rate_limit = RateLimit(spec, namespace="sluice-ws", what="this connection", field="connection")
                except ImportError:  # without the `serve` extra there is no `limits`: no rate
                    self._rate_limit = None
            self._rate_limit_read = True
        return self._rate_limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["path"] != STREAM_PATH:
            await send({"type": "websocket.close", "code": POLICY_VIOLATION})  # 403 before the upgrade
            return
        socket = WebSocket(scope, receive, send)
        container = self.container()
        offered = [str(p) for p in scope.get("subprotocols") or ()]
        subprotocol = SUBPROTOCOL if SUBPROTOCOL in offered else None
        key = presented_key(socket.headers, handshake=True)
        checked_at = container.keys.generation()  # before the key is read: a revoke from here on is seen
        principal: Principal | None = None
        if key is not None:
            try:
                principal = await _authenticate(container, key)
            except Exception as exc:
                await _refuse(socket, scope, exc)
                return
        await socket.accept(subprotocol=subprotocol)
        if principal is None:
            checked_at = container.keys.generation()
            principal = await _first_message_auth(socket, container)
            if principal is None:
                return
        token = bind_tenant(principal.tenant)  # every task below inherits it
        try:
            session = Session(
                container,
                principal,
                connection_id=os.urandom(8).hex(),
                headers=handshake_headers(socket.headers),  # as the AWS Lambda gets them
                rate_limit=self.rate_limit(container),
                admission=container.admission,  # each message is a prediction: its key's and the process's
                checked_at=checked_at,
            )
            await _serve(socket, session, container.settings.websocket.websocket_max_in_flight)
        finally:
            unbind_tenant(token)


async def _authenticate(container: Container, key: str) -> Principal:
    found = container.keys.cached(key)
    return found if found is not None else await asyncio.to_thread(container.keys.authenticate, key)


async def _refuse(socket: WebSocket, scope: Scope, exc: Exception) -> None:
    """401 with the API's error body where the server can send one before the upgrade, else a
    plain refusal (403)."""
    if "websocket.http.response" in (scope.get("extensions") or {}):
        await socket.send_denial_response(error_response(exc, STREAM_PATH))
    else:
        await socket.close(POLICY_VIOLATION)


async def _first_message_auth(socket: WebSocket, container: Container) -> Principal | None:
    """The key from `{"action": "auth", "api_key": …}`, the connection's first message. It is
    held to what the handshake's headers could carry (`SLUICE_MAX_HEADER_BYTES`): a larger one
    is refused unparsed, so a caller with no key makes the server parse and hash no more."""
    request_id = None
    most = container.settings.serve.max_header_bytes
    try:
        async with timeout(container.settings.serve.header_timeout_s):
            raw = await _receive(socket)
        if raw is None:
            return None
        if message_size(raw, most) > most:
            raise Unauthenticated(f"the first message is over {most} bytes: an auth message carries a key", field="api_key")
        message: Any = orjson.loads(raw)
        if isinstance(message, dict):
            request_id = message.get("request_id") if isinstance(message.get("request_id"), str) else None
        if not isinstance(message, dict) or message.get("action") != "auth" or not isinstance(message.get("api_key"), str):
            raise Unauthenticated(
                'send an API key first: {"action": "auth", "api_key": "<key>"}, an Authorization header, or a bearer.<key> subprotocol',
                field="api_key",
            )
        principal = await _authenticate(container, message["api_key"])
    except TimeoutError:
        exc: Exception = Unauthenticated("no API key within the time allowed", field="api_key")
    except Exception as failed:
        exc = failed if isinstance(failed, Unauthenticated) else Unauthenticated("the first message must authenticate", field="api_key")
    else:
        await socket.send_text(encode({"request_id": request_id, "action": "auth", "authenticated": True, "tenant": principal.tenant}).decode())
        return principal
    with contextlib.suppress(Exception):
        await socket.send_text(encode(error_answer(exc, request_id)).decode())
        await socket.close(POLICY_VIOLATION)
    return None


async def _receive(socket: WebSocket) -> bytes | str | None:
    """The next message, text or bytes; None once the client has gone."""
    message = await socket.receive()
    if message["type"] == "websocket.disconnect":
        return None
    return message.get("text") if message.get("text") is not None else message.get("bytes", b"")


async def _serve(socket: WebSocket, session: Session, max_in_flight: int) -> None:
    slots = asyncio.Semaphore(max_in_flight)
    sending = asyncio.Lock()
    running: set[asyncio.Task[None]] = set()
    service = session.container.predictions

    async def one(raw: bytes | str) -> None:
        try:
            answer = await session.answer(raw)
            async with sending:
                await socket.send_text(encode(answer).decode())
                if session.revoked:
                    await socket.close(POLICY_VIOLATION)
            if session.stats_due():
                await asyncio.to_thread(service.flush_stats_if_due)
        except (WebSocketDisconnect, RuntimeError):
            pass  # the client left, or the connection was closed: nobody to answer
        finally:
            slots.release()

    try:
        while not session.revoked:
            raw = await _receive(socket)
            if raw is None:
                break
            await slots.acquire()  # at most max_in_flight at once: reading waits for an answer
            task = asyncio.create_task(one(raw))
            running.add(task)
            task.add_done_callback(running.discard)
    except (WebSocketDisconnect, RuntimeError):
        pass
    finally:
        for task in list(running):
            task.cancel()
