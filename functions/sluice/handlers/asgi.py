"""Mangum's event and response translation around a cheaper request cycle.

Mangum turns an API Gateway (REST or HTTP API), ALB or Lambda@Edge event into an ASGI scope
and the ASGI response back into the Lambda result; `LambdaASGI` keeps exactly that (the same
handler classes, so the same scope and the same result, base64 and multi-value headers
included) and replaces only the cycle in between: Mangum's runs the app with an
`asyncio.Queue` and a state machine per request, this one with two small closures. The
app is run as a task on the thread's kept loop (`sluice.inference.loop`), as Mangum runs it
on the current loop.

An app that can answer some requests without the ASGI exchange (`answer_whole(scope, body)`,
as sluice's edge answers its hot routes) is asked first, driven in line until it waits
(`sluice.inline.run_inline`): its response is translated the same way, and its background
task run before the result is returned, as the exchange would.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from mangum import Mangum

from sluice.domain.errors import BadRequest
from sluice.handlers.gateway import gateway_handler
from sluice.inference.loop import container_loop
from sluice.inline import in_task, run_inline

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from starlette.responses import Response
    from starlette.types import ASGIApp, Message

log = logging.getLogger("mangum.http")  # the logger Mangum's own cycle reports to
ERROR_HEADERS = [[b"content-type", b"text/plain; charset=utf-8"]]
PORTS = {  # what each header Mangum reads the server's port from must be
    "host": "the Host header is not a name with one numeric port (name:port; an IPv6 address is not taken)",
    "x-forwarded-port": "X-Forwarded-Port is not one port number",
}


class _Cycle:
    """One request: its body delivered once, then `http.disconnect` once the response is
    complete (as Mangum's cycle does); the response gathered in memory."""

    __slots__ = ("body", "chunks", "closed", "complete", "headers", "request", "started", "status")

    def __init__(self, body: bytes) -> None:
        self.request: Message | None = {"type": "http.request", "body": body, "more_body": False}
        self.status = 500
        self.headers: list[Any] = []
        self.chunks: list[bytes] = []
        self.started = False
        self.complete = False
        self.closed: asyncio.Future[None] | None = None  # made when someone waits for the disconnect

    async def receive(self) -> Message:
        request = self.request
        if request is not None:
            self.request = None
            return request
        if not self.complete:
            if self.closed is None:
                self.closed = asyncio.get_running_loop().create_future()
            await self.closed
        return {"type": "http.disconnect"}

    async def send(self, message: Message) -> None:
        kind = message["type"]
        if not self.started and kind == "http.response.start":
            self.status = message["status"]
            self.headers = message.get("headers", [])
            self.started = True
        elif self.started and not self.complete and kind == "http.response.body":
            self.chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                self.complete = True
                if self.closed is not None and not self.closed.done():
                    self.closed.set_result(None)
        else:
            from mangum.exceptions import UnexpectedMessage

            raise UnexpectedMessage(f"Unexpected {kind}")


class LambdaASGI(Mangum):
    """`Mangum(app, lifespan="off")` with the cheaper cycle: the same result for every event."""

    def __init__(self, app: ASGIApp, *, api_gateway_base_path: str | None = None) -> None:
        super().__init__(app, lifespan="off", api_gateway_base_path=api_gateway_base_path or "/")
        self.whole: Callable[[dict[str, Any], bytes], Awaitable[Response | None]] | None = getattr(app, "answer_whole", None)

    def infer(self, event: Any, context: Any) -> Any:
        """Mangum's handler for `event`, its REST and HTTP API ones in fewer steps
        (`sluice.handlers.gateway`)."""
        found = None if self.custom_handlers else gateway_handler(event, context, self.config)
        return super().infer(event, context) if found is None else found

    def __call__(self, event: dict[str, Any], context: Any) -> dict[str, Any]:
        handler = self.infer(event, context)
        try:
            scope = handler.scope
        except ValueError:  # Mangum reads the server's port from the client's Host or X-Forwarded-Port
            field = _port_header(event)
            return _unreadable(self.infer(_without_headers(event), context), BadRequest(PORTS[field], field=field))
        try:
            body = handler.body
        except ValueError:  # binascii.Error
            return _unreadable(handler, BadRequest("the body is not the base64 its event says it is (isBase64Encoded)", field="body"))
        loop = container_loop()
        if self.whole is not None and scope["type"] == "http":
            answered = run_inline(loop, self._whole(scope, body))  # a task only once it waits
            if answered is not None:
                return handler(_staged(answered, event))
        cycle = _Cycle(body)
        loop.run_until_complete(self._run(scope, cycle))
        return handler(_staged({"status": cycle.status, "headers": cycle.headers, "body": b"".join(cycle.chunks)}, event))

    async def _whole(self, scope: dict[str, Any], body: bytes) -> dict[str, Any] | None:
        try:
            response = await self.whole(scope, body)  # type: ignore[misc]
        except BaseException:
            log.exception("An error occurred running the application.")
            return {"status": 500, "headers": ERROR_HEADERS, "body": b"Internal Server Error"}
        if response is None:
            return None
        if response.background is not None:
            await in_task()  # starlette runs a function in anyio's threads
            try:  # after the response, as the exchange runs it: a failure leaves the answer as sent
                await response.background()
            except BaseException:
                log.exception("An error occurred running the application.")
        if log.isEnabledFor(logging.INFO):
            log.info("%s %s %s", scope["method"], scope["path"], response.status_code)
        return {"status": response.status_code, "headers": response.raw_headers, "body": response.body}

    async def _run(self, scope: dict[str, Any], cycle: _Cycle) -> None:
        try:
            await self.app(scope, cycle.receive, cycle.send)
        except BaseException:
            log.exception("An error occurred running the application.")
            if not cycle.complete:  # a 500, whether or not the response had started
                cycle.status, cycle.headers, cycle.chunks = 500, ERROR_HEADERS, [b"Internal Server Error"]
            return
        if log.isEnabledFor(logging.INFO):
            log.info("%s %s %s", scope["method"], scope["path"], cycle.status)


def _unreadable(handler: Any, error: BadRequest) -> dict[str, Any]:
    """`error` (what of the event could not be translated) as `handler`, one for the event's
    kind, answers it: the client's to fix, never the bare 502 a raised error becomes."""
    from sluice.api.errors import error_response

    response = error_response(error)
    return handler({"status": response.status_code, "headers": response.raw_headers, "body": response.body})  # type: ignore[no-any-return]


def _without_headers(event: dict[str, Any]) -> dict[str, Any]:
    """`event` with no headers, whose kind a handler still infers and answers in (the HTTP API's
    and ALB's handlers read the scope again to answer)."""
    return {**event, **{kind: {} for kind in ("headers", "multiValueHeaders") if kind in event}}


def _port_header(event: dict[str, Any]) -> str:
    """Which header Mangum could not read the port from: `host` where it has a `:`, else
    `x-forwarded-port`."""
    for kind in ("headers", "multiValueHeaders"):
        for name, value in (event.get(kind) or {}).items():
            if name.lower() == "host" and ":" in str(value):
                return "host"
    return "x-forwarded-port"


def url_prefix(event: dict[str, Any]) -> str:
    """What the client's URL has before the path the app routes on: a REST API's stage on its
    `execute-api` address (`/prod`), or a custom domain's base path mapping; "" otherwise.
    API Gateway gives the app the path without it (`path`) and the client's path with it
    (`requestContext.path`)."""
    path, client_path = event.get("path"), (event.get("requestContext") or {}).get("path")
    if not isinstance(path, str) or not isinstance(client_path, str) or client_path == path:
        return ""
    return client_path[: -len(path)].rstrip("/") if path and client_path.endswith(path) else ""


def _staged(message: dict[str, Any], event: dict[str, Any]) -> dict[str, Any]:
    """A root-relative `Location` (a 202's result, a 303) made to work from the client's URL:
    the app knows paths from its root, the client called `/<stage>/...`."""
    headers = message["headers"]
    for i, (name, value) in enumerate(headers):
        # Per response: a name of another length is never lowered (no copy per header).
        if len(name) == 8 and name.lower() == b"location" and value.startswith(b"/") and not value.startswith(b"//"):
            prefix = url_prefix(event)
            if prefix:
                headers = [*headers]
                headers[i] = [name, prefix.encode() + value]
                return {**message, "headers": headers}
            break
    return message
