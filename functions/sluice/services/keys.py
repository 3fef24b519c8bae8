"""API keys: issued once in plain text, stored as a hash, checked in constant time."""

from __future__ import annotations

import hashlib
import hmac
import secrets
from typing import TYPE_CHECKING

from sluice.caching import TTLCache
from sluice.domain import SCOPES, ApiKey, Principal, check_name
from sluice.domain.errors import BadRequest, Unauthenticated

if TYPE_CHECKING:
    from sluice.registry import KeyRegistry

PREFIX = "sk_"


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def split_key(key: str) -> str | None:
    """`sk_<key id>_<secret>` -> key id, or None when the shape is wrong."""
    if not key.startswith(PREFIX):
        return None
    key_id, sep, secret = key[len(PREFIX) :].partition("_")
    return key_id if sep and key_id and secret else None


class KeyService:
    def __init__(self, registry: KeyRegistry, *, cache_ttl_s: float = 30.0) -> None:
        self.registry = registry
        self._cache: TTLCache[str, Principal] = TTLCache(cache_ttl_s)

    def create(
        self, tenant: str, scopes: list[str] | tuple[str, ...], *, name: str = ""
    ) -> tuple[ApiKey, str]:
        """Issue a key. The plain key is returned once and never stored."""
        check_name(tenant, field="tenant")
        unknown = sorted(set(scopes) - set(SCOPES))
        if unknown or not scopes:
            raise BadRequest(f"scopes must be some of {list(SCOPES)}", field="scopes")
        key_id = secrets.token_hex(8)
        plain = f"{PREFIX}{key_id}_{secrets.token_urlsafe(32)}"
        record = ApiKey(key_id, tenant, hash_key(plain), frozenset(scopes), name=name)
        self.registry.put_api_key(record)
        return record, plain

    def authenticate(self, key: str) -> Principal:
        digest = hash_key(key)
        cached = self._cache.get(digest)
        if cached is not None:
            return cached
        key_id = split_key(key)
        record = self.registry.get_api_key(key_id) if key_id else None
        if (
            record is None
            or not record.active
            or not hmac.compare_digest(record.secret_hash, digest)
        ):
            raise Unauthenticated("invalid or revoked API key")
        return self._cache.put(digest, Principal(record.tenant, record.scopes, record.key_id))

    def revoke(self, principal: Principal, key_id: str) -> ApiKey:
        principal.require("admin")
        record = self.registry.revoke_api_key(principal.tenant, key_id)
        self._cache.clear()
        return record

    def list(self, principal: Principal) -> list[ApiKey]:
        principal.require("admin")
        return self.registry.list_api_keys(principal.tenant)
