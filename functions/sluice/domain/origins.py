"""Outbound URLs a tenant gives (a Triton server, say), parsed to one spelling and checked as
scheme + host + port against an allowlist from settings.

A string prefix is no check: `http://127.0.0.1:1@127.0.0.2:18199` starts with
`http://127.0.0.1:` and reaches 127.0.0.2. So: no user info, no query or fragment, a host
that is a DNS name or an IP address in its one canonical form (`0x7f.1`, `2130706433` and
`0177.0.0.1` are refused, not resolved), a port that is a number, and the comparison on the
parsed parts. Callers check again when they make the call, and follow no redirect.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from urllib.parse import SplitResult, urlsplit

from sluice.domain.errors import BadRequest, Forbidden

DEFAULT_PORTS = {"http": 80, "https": 443}
_LABEL = re.compile(r"(?!-)[a-z0-9-]{1,63}(?<!-)")
_NUMERIC = re.compile(r"[0-9a-fx.]+")
_PORT_RANGE = re.compile(r":(?P<low>[0-9]{1,5})-(?P<high>[0-9]{1,5})\Z")


@dataclass(frozen=True, slots=True)
class Origin:
    scheme: str
    host: str  # lower-case DNS name, or an IP address as `ipaddress` writes it
    port: int
    path: str = ""  # kept for the caller (a Triton URL may carry a path prefix), never compared

    @property
    def netloc(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    def url(self) -> str:
        return f"{self.scheme}://{self.netloc}{self.path}"


_SCHEME_SLASH = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:/")


def split_url(url: str, *, field: str) -> SplitResult:
    """`urlsplit`'s parts, or a refusal naming `field` in sluice's words: Python's own (an
    unclosed bracket, a host that NFKC changes) quote the whole netloc, credentials and all."""
    try:
        return urlsplit(url)
    except ValueError:
        raise BadRequest(
            f"{field} cannot be read as a URL (an unclosed bracket, a port that is no number, or a host with characters a host name cannot have)",
            field=field,
        ) from None


def _host(raw: str, *, field: str) -> str:
    host = raw.lower().rstrip(".") if raw else ""
    if not host:
        raise BadRequest("the URL has no host", field=field)
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        pass
    labels = host.split(".")
    if _NUMERIC.fullmatch(host) and (labels[-1].isdigit() or labels[-1].startswith("0x")):
        # Looks numeric but is not a canonical IPv4 address: an alternative spelling.
        raise BadRequest(f"'{raw}' is not a canonical host name or IP address", field=field)
    if len(host) > 253 or not all(_LABEL.fullmatch(label) for label in labels):
        raise BadRequest(f"'{raw}' is not a valid host name", field=field)
    return host


def parse_origin(url: str, *, field: str, default_scheme: str = "http") -> Origin:
    """One spelling of an http(s) URL's origin, or a 400 naming `field`."""
    if not isinstance(url, str) or not url or len(url) > 2048 or any(c.isspace() or ord(c) < 32 for c in url):
        raise BadRequest("give an http:// or https:// URL", field=field)
    if "://" not in url and _SCHEME_SLASH.match(url):  # `http:/host`: a scheme misspelled, not a host named http
        raise BadRequest("give an http:// or https:// URL", field=field)
    text = url if "://" in url else f"{default_scheme}://{url}"
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError:
        port = 0
    if port == 0:  # never the scheme's default port in disguise (`:0`, `:00000`)
        raise BadRequest("the URL's port is not a number from 1 to 65535", field=field)
    scheme = parts.scheme.lower()
    if scheme not in DEFAULT_PORTS:
        raise BadRequest("only http:// and https:// URLs are allowed", field=field)
    if parts.username is not None or parts.password is not None or "@" in parts.netloc:
        raise BadRequest("a URL may not carry user information (user@host)", field=field)
    if parts.query or parts.fragment or "?" in text or "#" in text:
        raise BadRequest("a URL may not carry a query or a fragment", field=field)
    path = parts.path.rstrip("/")
    if any(seg in (".", "..") for seg in path.split("/")) or "%" in path:
        raise BadRequest("a URL's path may not contain '.', '..' or escapes", field=field)
    return Origin(scheme, _host(parts.hostname or "", field=field), DEFAULT_PORTS[scheme] if port is None else port, path)


@dataclass(frozen=True, slots=True)
class Allowed:
    scheme: str
    host: str
    ports: range | None  # None: any port

    def admits(self, origin: Origin) -> bool:
        return (origin.scheme, origin.host) == (self.scheme, self.host) and (self.ports is None or origin.port in self.ports)


def parse_allowlist(entries: list[str], *, field: str = "allowlist") -> tuple[Allowed, ...]:
    """Entries as `scheme://host:port`, `scheme://host:low-high` for a range of ports, or
    `scheme://host:*` for any port (a trailing `:` means the same)."""
    out = []
    for entry in entries:
        text = entry.strip()
        ports: range | None
        span = _PORT_RANGE.search(text)
        if span is not None:
            low, high = int(span["low"]), int(span["high"])
            if not 1 <= low <= high <= 65535:
                raise BadRequest(f"'{text}': a port range is LOW-HIGH, 1 <= LOW <= HIGH <= 65535", field=field)
            origin, ports = parse_origin(text[: span.start()], field=field), range(low, high + 1)
        elif text.endswith((":*", ":")):
            origin, ports = parse_origin(text.rstrip("*").rstrip(":"), field=field), None
        else:
            origin = parse_origin(text, field=field)
            ports = range(origin.port, origin.port + 1)
        out.append(Allowed(origin.scheme, origin.host, ports))
    return tuple(out)


def check_origin(url: str, allowed: tuple[Allowed, ...], *, field: str) -> Origin:
    """Parse `url` and admit it only if an allowlist entry matches its scheme, host and port."""
    origin = parse_origin(url, field=field)
    if not any(rule.admits(origin) for rule in allowed):
        raise Forbidden(f"{origin.scheme}://{origin.netloc} is not an allowed server for this service", field=field)
    return origin
