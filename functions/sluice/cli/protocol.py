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

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

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
        if not self.refused:  # the parser's error after HeaderTooLarge: answered already
            super().send_400_response(msg)

    def _refuse(self, status: int, reason: bytes) -> None:
        if self.refused or self.transport.is_closing():
            return
        self.refused = True
        # Answer only when no response is under way on this connection: never mid-response.
        if self.cycle is None or self.cycle.response_complete:
            phrase = b"Request Timeout" if status == 408 else b"Request Header Fields Too Large"
            self.transport.write(
                b"HTTP/1.1 %d %s\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: %d\r\n"
                b"connection: close\r\n\r\n%s" % (status, phrase, len(reason), reason)
            )
        self.transport.close()


class ClosingCycle(RequestResponseCycle):
    """uvicorn's request cycle, except that an answer that starts before the request's body
    has all arrived (`more_body`: the parser has not reached the body's end) says
    `Connection: close`, and the connection closes once it is sent."""

    async def send(self, message: Any) -> None:
        if self.more_body and not self.response_started and message["type"] == "http.response.start":
            self.keep_alive = False  # uvicorn then writes `connection: close` and closes after the answer
        await super().send(message)
