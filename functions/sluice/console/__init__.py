"""The web console at `/console`: the files `make console` builds (console/ → `static/`),
served by the API's own app with strict security headers.

Nothing here is imported until a request for `/console` arrives (`SluiceApp.__call__`), so the
API's cold path does not pay for it. The console is static: every page calls the `/api/v1`
routes with the key its user signs in with, so it sees that key's tenant and scopes only.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from starlette.types import Receive, Scope, Send

PREFIX = "/console"
STATIC = Path(__file__).with_name("static")

# No inline script or style anywhere: the built pages load only their own files, call only
# this origin, and may not be framed.
HEADERS = (
    (
        b"content-security-policy",
        b"default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        b"font-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    ),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-content-type-options", b"nosniff"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"cross-origin-resource-policy", b"same-origin"),
    (b"permissions-policy", b"camera=(), microphone=(), geolocation=()"),
)
TYPES = {
    ".html": "text/html",
    ".js": "text/javascript",
    ".css": "text/css",
    ".svg": "image/svg+xml",
    ".json": "application/json",
    ".png": "image/png",
    ".ico": "image/x-icon",
    ".woff2": "font/woff2",
}


def is_console(path: str) -> bool:
    return path == PREFIX or path.startswith(PREFIX + "/")


def _file(path: str) -> Path | None:
    """The built file a path names: `/console/` is the page; anything that
    leaves the folder, hides (a dot name) or is not a file is None."""
    rest = path[len(PREFIX) + 1 :] or "index.html"
    parts = rest.split("/")
    if any(not p or p.startswith(".") or "\\" in p or "\x00" in p for p in parts):  # a NUL no file name holds
        return None
    candidate = STATIC.joinpath(*parts)
    try:
        resolved = candidate.resolve(strict=True)
    except (OSError, RuntimeError, ValueError):  # ValueError: a name no file system holds (a lone surrogate)
        return None
    if not resolved.is_file() or not resolved.is_relative_to(STATIC.resolve()):
        return None
    return resolved


async def _send(send: Send, status: int, body: bytes, content_type: str, extra: tuple[tuple[bytes, bytes], ...] = (), head: bool = False) -> None:
    headers = [
        (b"content-type", content_type.encode()),
        (b"content-length", str(len(body)).encode()),
        *HEADERS,
        *extra,
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": b"" if head else body})


async def app(scope: Scope, receive: Receive, send: Send) -> None:
    """ASGI: GET or HEAD a built file; the body of any request is never read."""
    method = scope["method"]
    if method not in ("GET", "HEAD"):
        await _send(send, 405, b'{"error":"the console only serves GET and HEAD","code":"method_not_allowed"}', "application/json", ((b"allow", b"GET, HEAD"),))
        return
    head = method == "HEAD"
    if not (STATIC / "index.html").is_file():
        body = b'{"error":"the console is not built: run `make console`","code":"not_found"}'
        await _send(send, 404, body, "application/json", head=head)
        return
    if scope["path"] == PREFIX:
        # The page's files are relative to it: `/console/`. A relative Location keeps any prefix
        # in front of this app (an API Gateway stage) and never names a host.
        await _send(send, 308, b"", "text/plain", ((b"location", b"console/"),), head=head)
        return
    file = _file(scope["path"])
    if file is None:
        await _send(send, 404, b'{"error":"Not Found","code":"not_found"}', "application/json", head=head)
        return
    content_type = TYPES.get(file.suffix, "application/octet-stream")
    if content_type.startswith("text/") or content_type.endswith(("json", "+xml")):
        content_type += "; charset=utf-8"
    # Built assets carry a content hash in their names: kept for a year. The page is checked each time.
    cache = b"public, max-age=31536000, immutable" if "/assets/" in scope["path"] else b"no-cache"
    await _send(send, 200, file.read_bytes(), content_type, ((b"cache-control", cache),), head=head)
