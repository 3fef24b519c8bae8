"""uvicorn's httptools protocol with the three guards it lacks, for `sluice serve`:

- a header timeout: a client has `SLUICE_HEADER_TIMEOUT_S` to send a request's line and
  headers, counted from the connection's opening or the request's first byte (not reset by
  each byte, so dribbling them — slowloris — does not keep a connection); then 408 and close;
- a header size bound: past `SLUICE_MAX_HEADER_BYTES` of request line and headers, 431 and
  close (httptools has no limit of its own);
- a body nobody waits for: an answer that starts before its request's body has all arrived
  (a refusal before the body is read, 401, 413, 415, 429, 503; a 408; an upload's form
  answered at its closing boundary) says `Connection: close`, and the connection closes once
  it is sent. uvicorn would otherwise read the rest of that body to keep the connection, for
  as long as the client takes to send it, with no timeout; a body already all there is
  dropped at no cost, and the connection kept.

uvicorn builds one instance per connection, in each worker process; the settings are read
from the environment there.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle

from sluice.api.departures import CLIENT_GONE
from sluice.settings import get_settings

if TYPE_CHECKING:
    import asyncio


class HeaderTooLarge(Exception):
    """Stops the parser inside a callback; the connection has been answered already."""


class GuardedHttpToolsProtocol(HttpToolsProtocol):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        settings = get_settings().serve
        self.header_timeout_s = settings.header_timeout_s
        self.max_header_bytes = settings.max_header_bytes
        self.header_timer: asyncio.TimerHandle | None = None
        self.header_bytes = 0
        self.refused = False

    # The timer: armed until a request's headers are complete --------------------------
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()  # a connection that sends nothing at all is cut off too

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self.header_bytes = 0
        if self.header_timer is None:  # else the connection's own timer is still running
            self._arm()

    def on_headers_complete(self) -> None:
        self._disarm()
        cycle = self.cycle
        super().on_headers_complete()
        if self.cycle is not cycle:  # a request, not an upgrade: uvicorn's cycle, made one that may close
            self.cycle.__class__ = ClosingCycle  # no state of its own; the request's task has not run yet
            self.cycle.scope[CLIENT_GONE] = []  # what to call if its client leaves mid-request (`Edge`)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        cycle = self.cycle
        super().connection_lost(exc)
        if cycle is not None and not cycle.response_complete:  # its client left mid-request: the work is cancelled
            for leaving in cycle.scope.get(CLIENT_GONE, ()):
                leaving()

    def _arm(self) -> None:
        self.header_timer = self.loop.call_later(self.header_timeout_s, self._headers_too_slow)

    def _disarm(self) -> None:
        if self.header_timer is not None:
            self.header_timer.cancel()
            self.header_timer = None

    def _headers_too_slow(self) -> None:
        self.header_timer = None
        self._refuse(408, b"request headers not received in time")

    # The size bound ------------------------------------------------------------------------
    def on_url(self, url: bytes) -> None:
        self._count(len(url))
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._count(len(name) + len(value) + 4)  # ": " and CRLF
        super().on_header(name, value)

    def _count(self, n: int) -> None:
        self.header_bytes += n
        if self.header_bytes > self.max_header_bytes:
            self._refuse(431, b"request headers too large")
            raise HeaderTooLarge

    def data_received(self, data: bytes) -> None:
        if not self.refused:
            super().data_received(data)

    def send_400_response(self, msg: str) -> None:
        """Bytes the parser cannot read as HTTP: 400 with sluice's JSON error body (uvicorn's own
        is text), and the connection closed."""
        if self.refused:  # the parser's error after HeaderTooLarge: answered already
            return
        self.refused = True
        self.transport.write(_refusal(400, "bad_request", f"not an HTTP/1.1 request sluice can read: {msg.rstrip('.')}", self.server_state.default_headers))
        self.transport.close()

    def _refuse(self, status: int, reason: bytes) -> None:
        if self.refused or self.transport.is_closing():
            return
        self.refused = True
        # Answer only when no response is under way on this connection: never mid-response.
        if self.cycle is None or self.cycle.response_complete:
            code = "request_timeout" if status == 408 else "request_header_fields_too_large"
            self.transport.write(_refusal(status, code, reason.decode(), self.server_state.default_headers))
        self.transport.close()


PHRASES = {400: b"Bad Request", 408: b"Request Timeout", 431: b"Request Header Fields Too Large"}


def _refusal(status: int, code: str, message: str, headers: list[tuple[bytes, bytes]]) -> bytes:
    """A refusal the protocol answers itself, before any route: the JSON error body every other
    refusal has (`{"error", "code"}`), and `Connection: close`."""
    import orjson

    body = orjson.dumps({"error": message, "code": code})
    lines = [b"HTTP/1.1 %d %s\r\n" % (status, PHRASES[status])]
    lines += [name + b": " + value + b"\r\n" for name, value in headers]
    lines.append(b"content-type: application/json\r\ncontent-length: %d\r\nconnection: close\r\n\r\n" % len(body))
    return b"".join(lines) + body


class ClosingCycle(RequestResponseCycle):
    """uvicorn's request cycle, except that an answer that starts before the request's body
    has all arrived (`more_body`: the parser has not reached the body's end) says
    `Connection: close`, and the connection closes once it is sent."""

    async def send(self, message: Any) -> None:
        if self.more_body and not self.response_started and message["type"] == "http.response.start":
            self.keep_alive = False  # uvicorn then writes `connection: close` and closes after the answer
        await super().send(message)
