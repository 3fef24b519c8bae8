"""Request bodies: the limit every body is held to (`BodyLimit`, on every route but one: the
local twin of an upload's S3 POST, `UPLOAD_BODY`, which bounds its own body by its signed
form, `sluice.api.routers.uploads`), declared or chunked, compressed or not, before anything
reads it; whether streamed through the ASGI exchange or whole in a Lambda event
(`BodyLimit.answer_whole`); and a body read whole (`read_body`, `whole_body`)."""

from __future__ import annotations

import asyncio
import contextlib
import re
from typing import TYPE_CHECKING

from sluice.api.encoding import (
    BodyError,
    Inflater,
    behind_api_gateway,
    inflated_scope,
    inflating,
    request_coding,
)
from sluice.api.errors import error_response
from sluice.domain.errors import PayloadTooLarge, RequestTimeout, SluiceError
from sluice.domain.values import decimal

if TYPE_CHECKING:
    from collections.abc import Callable

    from starlette.responses import Response
    from starlette.types import ASGIApp, Message, Receive, Scope, Send

# An upload's body posted to `sluice serve`: authorized by its signed form, as S3 authorizes a
# presigned POST, not by an API key; bounded by that form's size, not the request limit.
UPLOAD_BODY = re.compile(r"^/api/v1/uploads/[0-9a-f]{32}/body\Z")


def upload_body(path: str) -> bool:
    """Whether `path` is an upload's body (`UPLOAD_BODY`); asked of every request by both
    layers, so the prefix is compared before the pattern is run."""
    return path.startswith("/api/v1/uploads/") and UPLOAD_BODY.match(path) is not None


def too_large(limit: int) -> PayloadTooLarge:
    return PayloadTooLarge(
        f"request body is over {limit} bytes: send large inputs as a batch job, and large model files by artifact_uri",
        field="body",
    )


class BodyTooLarge(BodyError):
    """Raised by the bounded `receive` once a body passes the limit (a `BodyError`, so that a
    framework reading the body passes it on rather than calling it a parse error)."""

    def __init__(self, limit: int) -> None:
        super().__init__(too_large(limit))


class BodyLimit:
    """Refuses a body over the limit: at once when its Content-Length says so, else as soon
    as the bytes read pass it (a chunked body is never read to its end). A compressed body
    (`sluice.api.encoding`) is inflated as it is read, and the limit holds for what it
    inflates to as well."""

    def __init__(self, app: ASGIApp, limit: Callable[[], int]) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or upload_body(scope["path"]):
            await self.app(scope, receive, send)
            return
        limit = self.limit()
        declared = content_length(scope)
        if _over(declared, limit):
            await error_response(too_large(limit))(scope, receive, send)
            return
        coding = request_coding(scope)
        if coding is not None:  # inflated as read, the limit held by the inflated size
            try:
                inflater = _inflater(scope, coding, limit)
            except SluiceError as exc:
                await error_response(exc)(scope, receive, send)
                return
            scope, receive = inflated_scope(scope), inflating(receive, inflater)
        elif declared is not None:
            # The server delivers no more than a declared length: nothing left to count.
            await self.app(scope, receive, send)
            return
        seen = 0

        async def bounded() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise BodyTooLarge(limit)
            return message

        try:
            await self.app(scope, bounded, send)
        except BodyTooLarge:
            # Whoever read the body had not answered yet (a framework passes the exception on
            # before it starts a response).
            with contextlib.suppress(RuntimeError):
                await error_response(too_large(limit))(scope, receive, send)

    async def answer_whole(self, scope: Scope, body: bytes) -> Response | None:
        """The response to a request whose whole body is at hand (a Lambda event) when the
        app behind answers it alone (`Edge.answer_whole`; None: run the app), through the same
        checks in the same order as `__call__`: a body over the limit (declared or at hand) and
        a coding not taken refused before authentication, a compressed body inflated only as
        the app behind reads it, once the request is admitted."""
        limit = self.limit()
        if _over(content_length(scope), limit) or len(body) > limit:
            return error_response(too_large(limit))
        coding = request_coding(scope)
        if coding is None:
            return await self.app.answer_whole(scope, body)  # type: ignore[attr-defined, no-any-return]
        try:
            inflater = _inflater(scope, coding, limit)
        except SluiceError as exc:
            return error_response(exc)
        return await self.app.answer_whole(inflated_scope(scope), body, inflating(whole_body(body), inflater))  # type: ignore[attr-defined, no-any-return]


def _inflater(scope: Scope, coding: str, limit: int) -> Inflater:
    """What inflates the request's body as it is read, refusing it once it passes `limit`
    inflated; a coding not taken is refused here (415)."""
    return Inflater(coding, limit, lambda: BodyTooLarge(limit), maybe_inflated=behind_api_gateway(scope))


def _over(declared: str | None, limit: int) -> bool:
    """Whether a declared Content-Length says the body is over `limit` (or says nothing readable)."""
    if declared is None:
        return False
    length = decimal(declared)
    return length is None or length > limit


def content_length(scope: Scope) -> str | None:
    for name, value in scope["headers"]:
        if name == b"content-length":
            return value.decode("latin-1")
    return None


def whole_body(body: bytes) -> Receive:
    """A `receive` that gives `body` whole, then the client's leaving."""
    given = [{"type": "http.request", "body": body, "more_body": False}]

    async def receive() -> Message:
        return given.pop() if given else {"type": "http.disconnect"}

    return receive


BODY_MIN_RATE = 16 * 1024  # bytes a second a body must keep up: each gives it a second beyond the timeout


async def read_body(receive: Receive, timeout_s: float | None = None) -> bytes:
    """The request's body. With `timeout_s`, it has that long to arrive, plus a second for every
    `BODY_MIN_RATE` bytes received: past it, `RequestTimeout` (408). A part already there is
    taken at once, with no timer: only a `receive` that waits is timed (`_within`)."""
    chunks = []
    started: float | None = None
    received = 0
    while True:
        if timeout_s is None:
            message = await receive()
        else:
            if started is None:
                started = asyncio.get_running_loop().time()
            message = await _within(receive, started + timeout_s + received / BODY_MIN_RATE, received)
        body = message.get("body", b"")
        chunks.append(body)
        received += len(body)
        if not message.get("more_body", False):
            return b"".join(chunks)


def timed(receive: Receive, timeout_s: float) -> Receive:
    """`receive` for a body the framework reads (every route but the hot ones, which read theirs
    with `read_body`): the same time to arrive, past which the read raises a `RequestTimeout`
    (408) the framework passes on (`BodyError`). So a request whose body stalls holds its key's
    and its tenant's slots that long at most, on every route. Once the body is in, `receive`
    is as it was (what waits for the client to leave is not timed)."""
    started: float | None = None
    received = 0
    done = False

    async def within() -> Message:
        nonlocal started, received, done
        if done:
            return await receive()
        if started is None:
            started = asyncio.get_running_loop().time()
        try:
            message = await _within(receive, started + timeout_s + received / BODY_MIN_RATE, received)
        except RequestTimeout as exc:
            raise BodyError(exc) from None
        received += len(message.get("body", b""))
        done = message["type"] != "http.request" or not message.get("more_body", False)
        return message

    return within


async def _within(receive: Receive, deadline: float, received: int) -> Message:
    """`await receive()`, refused past `deadline` (the loop's clock) where it has to wait."""
    from sluice.inline import resumed, timeout

    waiting = receive()
    try:
        waits_on = waiting.send(None)
    except StopIteration as done:  # there already: no timer
        return done.value  # type: ignore[no-any-return]
    try:
        async with timeout(at=deadline):
            return await resumed(waiting, waits_on)  # type: ignore[no-any-return]
    except TimeoutError:
        raise RequestTimeout(f"the body did not arrive in time ({received} bytes did)", field="body") from None
