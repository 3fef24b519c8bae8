"""Compressed request bodies (`Content-Encoding`), as Triton's HTTP server takes them.

`gzip` and `deflate` (the zlib format RFC 9110 names; a raw deflate stream is read too) are
inflated as they arrive, never past the body limit: the limit holds for the inflated size, so a
small body that inflates past it is a 413 as soon as the inflated bytes pass it, never inflated
whole. Any other coding is a 415 naming the supported ones (with `Accept-Encoding`, as RFC
9110 asks). `identity` is no coding at all.

Responses are gzipped when the client accepts gzip and the body is large enough to gain: the
framework's by Starlette's `GZipMiddleware` (`gzipping`), the hot routes' (answered whole by
the edge, here or from a Lambda event) by `gzip_whole`, to the same rules. Every response
whose coding those rules pick by `Accept-Encoding` says `Vary: Accept-Encoding`, gzipped or
not (the client did not ask, or the body was too small), so that no cache hands one client's
gzipped answer to another that cannot read it: the hot routes' as `gzip_wanted` decides,
the framework's as `gzipping` sends them."""

from __future__ import annotations

import asyncio
import zlib
from typing import TYPE_CHECKING

from starlette.exceptions import HTTPException

from sluice.domain.errors import BadRequest, SluiceError, UnsupportedEncoding

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from starlette.responses import Response
    from starlette.types import ASGIApp, Message, Receive, Scope, Send

SUPPORTED = ("gzip", "deflate")
# A response body from this size up is gzipped for a client that accepts it: below it the
# header and framing outweigh the gain. zlib's own default level: most of level 9's ratio on
# JSON numbers at a fraction of its time. From THREAD_FROM up, compressed off the event loop.
COMPRESS_FROM = 1024
COMPRESS_LEVEL = 6
THREAD_FROM = 128 * 1024
ACCEPTED = ", ".join(SUPPORTED)
_DROPPED = (b"content-encoding", b"content-length")  # the inflated body has neither
VARY = (b"vary", b"Accept-Encoding")


def behind_api_gateway(scope: Scope) -> bool:
    """Whether the request came in a Lambda event (Mangum's scope carries it)."""
    return bool(scope.get("aws.event"))


def request_coding(scope: Scope) -> str | None:
    """The request's content coding, lowercased; None when it has none. Two `Content-Encoding`
    fields are one list (RFC 9110 §5.3), which names codings applied in turn, as `gzip, gzip`
    does: refused as any coding not taken. Read as the RFC asks a recipient to: empty members
    ignored (§5.6.1.2), `x-gzip` taken as `gzip` (§8.4.1.3), and `identity`, which is no
    coding, left out."""
    found = [value for name, value in scope["headers"] if name == b"content-encoding"]
    if not found:
        return None
    codings = []
    for member in b",".join(found).decode("latin-1").lower().split(","):
        coding = _ALIASES.get(member.strip(" \t"), member.strip(" \t"))
        if coding not in ("", "identity"):
            codings.append(coding)
    return ", ".join(codings) or None


_ALIASES = {"x-gzip": "gzip"}  # RFC 9110 §8.4.1.3: a recipient SHOULD take it as gzip


def unsupported(coding: str) -> UnsupportedEncoding:
    return UnsupportedEncoding(
        f"unsupported content encoding '{coding}': send the body as {' or '.join(SUPPORTED)}, or uncompressed",
        field="content-encoding",
    )


class BodyError(HTTPException):
    """`error`, found as the body is read: an HTTPException, so that a framework reading the
    body passes it on rather than answering its own "error parsing the body"; answered as
    `error` is (`sluice.api.errors`)."""

    def __init__(self, error: SluiceError) -> None:
        super().__init__(error.status, error.message)
        self.error = error


class Inflater:
    """One body's inflation, bounded: `feed` each chunk, then `finish`. `too_large()` is the
    exception to raise once the inflated bytes pass `limit`.

    `maybe_inflated`: the body may have been inflated already on its way (API Gateway inflates
    a request it can, and refuses one it cannot with its own 415, but passes the
    `Content-Encoding` header on): a body that does not open as its coding does is then taken
    as it is, under the same limit."""

    def __init__(self, coding: str, limit: int, too_large: Callable[[], Exception], *, maybe_inflated: bool = False) -> None:
        if coding not in SUPPORTED:
            raise unsupported(coding)
        self.coding, self.limit, self.too_large = coding, limit, too_large
        self.maybe_inflated = maybe_inflated
        self.size = 0
        self._z: zlib._Decompress | None = None
        self._plain = False  # taken as it is (`maybe_inflated`)
        self._head = b""  # the body's first bytes, until two say which format it is

    def _start(self, data: bytes) -> zlib._Decompress | None:
        """The decompressor for a body opening with `data`; None: it is not compressed."""
        if self.coding == "gzip":
            if self.maybe_inflated and not data.startswith(b"\x1f\x8b"):  # gzip's magic number
                return None
            return zlib.decompressobj(31)
        # zlib's two-byte header: CM 8 and a check of 31; else a raw deflate stream.
        zlib_format = len(data) >= 2 and data[0] & 0x0F == 8 and (data[0] << 8 | data[1]) % 31 == 0
        if self.maybe_inflated and not zlib_format:
            return None
        return zlib.decompressobj(15 if zlib_format else -15)

    def _count(self, out: bytes) -> bytes:
        self.size += len(out)
        if self.size > self.limit:
            raise self.too_large()
        return out

    def feed(self, data: bytes) -> bytes:
        if self._plain:
            return self._count(data)
        if self._z is None:
            if len(self._head) + len(data) < 2:
                self._head += data
                return b""
            data, self._head = self._head + data, b""
            self._z = self._start(data)
            if self._z is None:
                self._plain = True
                return self._count(data)
        return self._inflate(data)

    def _inflate(self, data: bytes) -> bytes:
        """`data` inflated, under the limit. A gzip body may be several members, one after
        another (RFC 1952; Python's and Go's readers take them): each is read as it starts."""
        out = []
        while True:
            following = self._z.eof and data and self.coding == "gzip"
            if following:
                self._z = zlib.decompressobj(31)
            try:
                out.append(self._count(self._z.decompress(data, self.limit + 1 - self.size)))
            except zlib.error:
                raise self._broken("it has bytes after its compressed stream that are no gzip member" if following else "") from None
            data = self._z.unused_data if self._z.eof and self.coding == "gzip" else b""
            if not data:
                return b"".join(out)

    def finish(self) -> bytes:
        head, self._head = self._head, b""
        if self._plain:
            return b""
        if self._z is None:
            if not head:
                return b""  # no body at all: nothing to inflate
            self._z = self._start(head)
            if self._z is None:
                self._plain = True
                return self._count(head)
        out = self._inflate(head)
        try:
            out += self._count(self._z.flush())
        except zlib.error:
            raise self._broken() from None
        if not self._z.eof:
            raise self._broken("it ends before its compressed stream does")
        if self._z.unused_data:
            raise self._broken("it has bytes after its compressed stream")
        return out

    def _broken(self, why: str = "") -> BodyError:
        return BodyError(BadRequest(f"the body is not valid {self.coding}{': ' + why if why else ''}", field="body"))


def inflated_scope(scope: Scope) -> Scope:
    """`scope` as the app behind sees the inflated body: without the coding or the length."""
    return {**scope, "headers": [(n, v) for n, v in scope["headers"] if n not in _DROPPED]}


def inflating(receive: Receive, inflater: Inflater) -> Receive:
    """`receive` with each body chunk inflated; the stream's end checked on the last."""

    async def inflated() -> Message:
        message = await receive()
        if message["type"] != "http.request":
            return message
        out = inflater.feed(message.get("body", b""))
        if not message.get("more_body", False):
            out += inflater.finish()
        return {**message, "body": out}

    return inflated


def accepts_gzip(scope: Scope) -> bool:
    """Whether the client accepts a gzipped response: its `Accept-Encoding` headers (all of
    them, as one list) read as RFC 9110 reads them (`gzip_accepted`)."""
    values = [value for name, value in scope["headers"] if name == b"accept-encoding"]
    if not values:
        return False
    joined = values[0] if len(values) == 1 else b",".join(values)
    found = _ACCEPTS.get(joined)
    if found is None:
        found = gzip_accepted(joined.decode("latin-1"))
        if len(_ACCEPTS) >= MAX_ACCEPTS:
            _ACCEPTS.clear()
        _ACCEPTS[joined] = found
    return found


def gzip_accepted(value: str) -> bool:
    """Whether an `Accept-Encoding` value accepts gzip (RFC 9110 §12.5.3): `gzip` (or its
    alias `x-gzip`) named with a weight above 0, or, where neither is named, `*` with one.
    `q=0` refuses; a member whose weight is not a number from 0 to 1 counts for nothing."""
    named: float | None = None
    anything: float | None = None
    for member in value.split(","):
        coding, *params = (part.strip() for part in member.split(";"))
        coding = coding.lower()
        if coding not in ("gzip", "x-gzip", "*"):
            continue
        weight = 1.0
        for param in params:
            key, _, given = param.partition("=")
            if key.strip().lower() == "q":
                weight = _weight(given.strip())
        if weight < 0:
            continue
        if coding == "*":
            anything = weight if anything is None else max(anything, weight)
        else:
            named = weight if named is None else max(named, weight)
    if named is not None:
        return named > 0
    return anything is not None and anything > 0


def _weight(text: str) -> float:
    """A `q` value (`0`, `0.5`, `1.000`: at most three decimals), or -1 where it is not one."""
    if not text or len(text) > 5 or not text.isascii() or text[0] not in "01" or (len(text) > 1 and text[1] != "."):
        return -1.0
    if not all(c.isdigit() for c in text[2:]):
        return -1.0
    weight = float(text)
    return weight if weight <= 1 else -1.0


_ACCEPTS: dict[bytes, bool] = {}  # what each Accept-Encoding value said (clients send a handful)
MAX_ACCEPTS = 256


def gzipping(app: ASGIApp) -> ASGIApp:
    """`app` with its responses gzipped by Starlette's `GZipMiddleware` for a client that
    accepts gzip; a client that does not goes straight to `app` (the middleware costs some
    20 µs a request even when it compresses nothing).

    Not the protocol's other `/v2` routes (metadata, configuration, statistics, the
    repository): Triton compresses inference answers alone, and `tritonclient.http.aio` asks
    for gzip on every call (aiohttp's default header) but reads only an inference answer's."""
    from starlette.middleware.gzip import GZipMiddleware

    gzipped = GZipMiddleware(app, minimum_size=COMPRESS_FROM, compresslevel=COMPRESS_LEVEL)
    excluded = frozenset(gzipped.exclude_content_types)

    async def choose(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"].startswith("/v2"):
            await app(scope, receive, send)
            return
        await (gzipped if accepts_gzip(scope) else app)(scope, receive, varying(send, excluded))

    return choose


def varying(send: Send, excluded: frozenset[str]) -> Send:
    """`send` with `Vary: Accept-Encoding` on a response the middleware gzips for a client
    that asks, whatever it did for this one (`varies`)."""

    async def sending(message: Message) -> None:
        if message["type"] == "http.response.start" and message["status"] != 206:
            headers = message.get("headers") or []
            if varies(headers, excluded):
                message["headers"] = [*headers, VARY]
        await send(message)

    return sending


def varies(headers: Iterable[tuple[bytes, bytes]], excluded: frozenset[str]) -> bool:
    """Whether a response with `headers` lacks the `Vary: Accept-Encoding` its coding needs:
    not one coded already, nor one of a type the middleware leaves as it is (`excluded`, an
    image's), nor one that says it (the middleware did, having gzipped it)."""
    media = ""
    for name, value in headers:
        if name == b"content-encoding" or (name == b"vary" and b"accept-encoding" in value.lower()):
            return False
        if name == b"content-type":
            media = value.partition(b";")[0].strip().lower().decode("latin-1")
    return media not in excluded and media.partition("/")[0] + "/*" not in excluded


def gzip_wanted(response: Response, scope: Scope) -> bool:
    """Whether a hot route's `response` (its body whole) is to be gzipped (`gzip_whole`): the
    client accepts gzip and the body is `COMPRESS_FROM` bytes or more. It says `Vary:
    Accept-Encoding` from here on, either way (hot routes set no `Vary` of their own)."""
    response.raw_headers.append(VARY)
    return len(response.body) >= COMPRESS_FROM and accepts_gzip(scope)


async def gzip_whole(response: Response) -> None:
    """`response` (its body whole: a hot route's, `gzip_wanted`) gzipped in place when it is
    `COMPRESS_FROM` bytes or more and not encoded already, as `GZipMiddleware` would send it;
    a large body compressed off the event loop, as the middleware does."""
    headers = response.headers
    size = len(response.body)
    if size < COMPRESS_FROM or "content-encoding" in headers:
        return
    import gzip

    if size < THREAD_FROM:
        response.body = gzip.compress(bytes(response.body), compresslevel=COMPRESS_LEVEL, mtime=0)
    else:
        response.body = await asyncio.to_thread(gzip.compress, bytes(response.body), COMPRESS_LEVEL, mtime=0)
    headers["content-length"] = str(len(response.body))
    headers["content-encoding"] = "gzip"
