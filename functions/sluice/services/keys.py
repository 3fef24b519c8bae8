"""API keys: issued once in plain text, stored as a hash, checked in constant time.

Revocation holds everywhere: a process caches the keys it has checked, and every lookup first
asks a `RevocationSignal` whether any key was revoked since (locally, a counter in a marker
file beside the registry that every worker maps into memory; one memory read per request). Where no signal reaches every
container (DynamoDB on AWS), the cache's time to live is the bound, 0 by default there: each
lookup reads the key.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, TypeVar

from sluice import owner_only
from sluice.caching import TTLCache
from sluice.domain import SCOPES, ApiKey, Principal, check_name
from sluice.domain.errors import BadRequest, Forbidden, Unauthenticated
from sluice.domain.objects import MAX_LABEL, check_description

if TYPE_CHECKING:
    from collections.abc import Mapping

    from sluice.registry import KeyRegistry


class RevocationSignal(Protocol):
    def current(self) -> int:
        """A number that changes whenever a key is revoked anywhere; cheap to read."""
        ...

    def bump(self) -> None: ...


class MarkerFile:
    """The signal for processes sharing a machine: a counter in a small file that every process
    maps into memory, so reading it is a memory read (no system call per request) and a
    revoke's increment is seen by every process at once.

    The file's block is allocated when it is mapped: a page of a file that has none yet (a hole
    left by `ftruncate`) is allocated at its first touch, and where the disk is full by then
    (tmpfs) that touch is a SIGBUS that kills the process, at its first request."""

    SIZE = 8

    def __init__(self, path: Path) -> None:
        import mmap

        self.path = path
        owner_only.folder(path.parent)
        fd = owner_only.descriptor(path, "r+b")
        try:
            if os.fstat(fd).st_size < self.SIZE:
                os.ftruncate(fd, self.SIZE)
            if hasattr(os, "posix_fallocate"):  # a full disk is an OSError here, not a SIGBUS later
                os.posix_fallocate(fd, 0, self.SIZE)
            self._map = mmap.mmap(fd, self.SIZE, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)
        self.current()  # the page touched now, while it can be had

    def current(self) -> int:
        return int.from_bytes(self._map[: self.SIZE], "little")

    def bump(self) -> None:
        import fcntl

        with open(self.path, "rb+") as lock:  # one writer at a time across processes
            fcntl.flock(lock, fcntl.LOCK_EX)
            self._map[: self.SIZE] = (self.current() + 1).to_bytes(self.SIZE, "little")
            self._map.flush()


PREFIX = "sk_"
KEY_ID_CHARS = 16  # a key id's most characters (`KeyService.create`'s hex)
T = TypeVar("T")


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def split_key(key: str) -> str | None:
    """`sk_<key id>_<secret>` -> key id, or None when the shape is wrong. An id longer than any
    `create` makes is wrong too: no lookup is made with it (DynamoDB refuses an oversized key
    with an error, not a miss)."""
    if not key.startswith(PREFIX):
        return None
    key_id, sep, secret = key[len(PREFIX) :].partition("_")
    return key_id if sep and key_id and secret and len(key_id) <= KEY_ID_CHARS else None


# Browsers cannot set headers on a WebSocket: they offer the key as a subprotocol beside
# `sluice.v1` (`new WebSocket(url, ["sluice.v1", "bearer." + key])`); the server answers `sluice.v1`.
SUBPROTOCOL = "sluice.v1"
BEARER_SUBPROTOCOL = "bearer."


def presented_key(headers: Mapping[str, str], *, handshake: bool = False) -> str | None:
    """The API key a request presents: `Authorization: Bearer <key>`, then `x-api-key`, then,
    only for a WebSocket `handshake`, a `bearer.<key>` entry of `Sec-WebSocket-Protocol` (an
    HTTP request takes the first two alone, on every server). `headers` must look names up
    case-insensitively. Never a query string: URLs end up in logs."""
    scheme, _, token = (headers.get("authorization") or "").strip().partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        return token.strip()
    found = (headers.get("x-api-key") or "").strip()
    if found:
        return found
    if not handshake:
        return None
    for offered in subprotocols(headers.get("sec-websocket-protocol")):
        if offered.startswith(BEARER_SUBPROTOCOL) and len(offered) > len(BEARER_SUBPROTOCOL):
            return offered[len(BEARER_SUBPROTOCOL) :]
    return None


def subprotocols(header: str | None) -> list[str]:
    """A `Sec-WebSocket-Protocol` header as its list of names."""
    return [p.strip() for p in (header or "").split(",") if p.strip()]


KEY_HEADERS = frozenset({"authorization", "x-api-key", "sec-websocket-protocol", "cookie"})
HANDSHAKE_HEADERS_BYTES = 4096  # as JSON: half the 8 KB an API Gateway WebSocket authorizer may answer


def handshake_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """The headers of a WebSocket handshake that its messages are routed by (`headers.<name>`,
    a split's sticky header), alike on `sluice serve` and behind API Gateway, where they ride
    in the `$connect` authorizer's context: names lower-cased, the first of each name, none
    that can carry a credential, each kept while the whole stays within
    `HANDSHAKE_HEADERS_BYTES` as JSON."""
    import json

    from sluice.domain.requests import as_sent

    asgi = getattr(headers, "raw", None) is not None  # `sluice serve`'s: values read as Latin-1
    kept: dict[str, str] = {}
    room = HANDSHAKE_HEADERS_BYTES
    for name, value in headers.items():
        name, value = name.lower(), as_sent(value) if asgi else value
        size = len(json.dumps([name, value], ensure_ascii=False).encode())
        if name in KEY_HEADERS or name in kept or size > room:
            continue
        kept[name] = value
        room -= size
    return kept


def granted(scopes: frozenset[str]) -> frozenset[str]:
    """What a key may do: admin implies every scope."""
    return frozenset(SCOPES) if "admin" in scopes else scopes


class KeyService:
    def __init__(self, registry: KeyRegistry, *, cache_ttl_s: float = 30.0, signal: RevocationSignal | None = None) -> None:
        self.registry = registry
        self.signal = signal
        # What a process cached of a key, with the revocations it had seen before it read the
        # key (`_seen`): an entry read before the latest revocation is never trusted, however
        # the read and the revocation interleaved (threads of this process, other processes).
        self._cache: TTLCache[str, tuple[int, Principal]] = TTLCache(cache_ttl_s)
        self._active: TTLCache[str, tuple[int, bool]] = TTLCache(cache_ttl_s)
        self._revoked = 0  # revocations made here, where no signal is shared

    def create(
        self, tenant: str, scopes: list[str] | tuple[str, ...], *, name: str = "", issuer: Principal | None = None
    ) -> tuple[ApiKey, str]:
        """Issue a key. The plain key is returned once and never stored. An `issuer` (the
        API's caller) may only grant scopes it holds itself."""
        check_name(tenant, field="tenant")
        check_description(name, field="name", most=MAX_LABEL)
        unknown = sorted(set(scopes) - set(SCOPES))
        if unknown or not scopes:
            raise BadRequest(f"scopes must be some of {list(SCOPES)}", field="scopes")
        if issuer is not None:
            issuer.require("admin")
            beyond = sorted(set(scopes) - granted(issuer.scopes))
            if beyond or issuer.tenant != tenant:
                raise Forbidden(f"a key cannot grant scopes it lacks: {beyond}", field="scopes")
        key_id = secrets.token_hex(KEY_ID_CHARS // 2)
        plain = f"{PREFIX}{key_id}_{secrets.token_urlsafe(32)}"
        record = ApiKey(key_id, tenant, hash_key(plain), frozenset(scopes), name=name)
        self.registry.put_api_key(record)
        return record, plain

    def _seen(self) -> int:
        """The revocations seen so far (the shared signal's count, else this process's own)."""
        return self.signal.current() if self.signal is not None else self._revoked

    def cached(self, key: str) -> Principal | None:
        """The principal of a key checked recently, if no key was revoked since it was read;
        else None (then `authenticate` reads the registry)."""
        return _kept(self._cache, hash_key(key), self._seen())

    def authenticate(self, key: str) -> Principal:
        digest = hash_key(key)
        seen = self._seen()  # before the read: a revocation after it makes what is read stale
        found = _kept(self._cache, digest, seen)
        if found is not None:
            return found
        key_id = split_key(key)
        record = self.registry.get_api_key(key_id) if key_id else None
        if (
            record is None
            or not record.active
            or not hmac.compare_digest(record.secret_hash, digest)
        ):
            raise Unauthenticated("invalid or revoked API key")
        principal = Principal(record.tenant, record.scopes, record.key_id)
        self._cache.put(digest, (seen, principal))
        return principal

    def generation(self) -> int | None:
        """The revocation signal's reading (None where there is none): a long-lived connection
        compares it per message, a memory read, and re-reads its key only when it moved."""
        return self.signal.current() if self.signal is not None else None

    def active(self, key_id: str) -> bool:
        """Whether the key `key_id` still works (a registry read, or the cached answer of one
        within the cache's time to live when no key was revoked since it was read)."""
        seen = self._seen()
        found = _kept(self._active, key_id, seen)
        if found is not None:
            return found
        record = self.registry.get_api_key(key_id)
        works = record is not None and record.active
        self._active.put(key_id, (seen, works))
        return works

    def revoke(self, principal: Principal, key_id: str) -> ApiKey:
        """Revoke a key of the principal's tenant. The tenant's last active admin key stays
        (Conflict naming `key_id`): revoking it would lock the tenant out. The registry
        decides that in the revoke's own atomic write, so two admin keys revoking each other
        at once cannot both succeed."""
        principal.require("admin")
        if not key_id.isascii():  # bytes that are not UTF-8 (a lone surrogate) never reach the registry: no key has them
            raise BadRequest("key_id is not a key id: key ids are hexadecimal", field="key_id")
        record = self.registry.revoke_api_key(principal.tenant, key_id, keep_an_admin=True)
        if self.signal is not None:
            self.signal.bump()
        else:
            self._revoked += 1
        self._cache.clear()  # stale now: freed at once
        self._active.clear()
        return record

    def list(self, principal: Principal) -> list[ApiKey]:
        principal.require("admin")
        return self.registry.list_api_keys(principal.tenant)


def _kept(cache: TTLCache[str, tuple[int, T]], key: str, seen: int) -> T | None:
    """What `cache` holds for `key` if it was read at the revocations `seen` (none since)."""
    entry = cache.get(key)
    return entry[1] if entry is not None and entry[0] == seen else None


UNCHECKED = object()  # a held key's reading before its first check: checked before it is trusted


class HeldKey:
    """The key of a connection that outlives a request (a WebSocket, a gRPC stream), checked
    again before each message it carries: trusted while the revocation signal has not moved
    since the key was last found working (a memory read), else read again (`active`). Once
    found revoked it stays so. `checked_at`: the signal's reading taken before the key was
    authenticated when the connection opened (`KeyService.generation`); `UNCHECKED`: checked
    before the first message."""

    def __init__(self, keys: KeyService, key_id: str, checked_at: object = UNCHECKED) -> None:
        self.keys = keys
        self.key_id = key_id
        self.revoked = False
        self._generation = checked_at

    async def check(self) -> None:
        """Raises Unauthenticated once the key no longer works."""
        import asyncio

        if self.revoked:
            raise Unauthenticated("invalid or revoked API key")
        generation = self.keys.generation()
        if generation is not None and generation == self._generation:
            return  # no key revoked anywhere since the last look
        if not await asyncio.to_thread(self.keys.active, self.key_id):
            self.revoked = True
            raise Unauthenticated("invalid or revoked API key")
        self._generation = generation
