"""API keys in SQLite, by id (unique across tenants) and listed per tenant. A revoke that must
keep the tenant an admin key checks and writes in one transaction."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from sluice.domain import now
from sluice.domain.errors import Conflict, NotFound
from sluice.registry.codec import API_KEY
from sluice.registry.guards import another_active_admin, is_active_admin, last_admin_key
from sluice.registry.sqlite.connection import Part

if TYPE_CHECKING:
    from sluice.domain import ApiKey


class SqliteKeys(Part):
    def put_api_key(self, key: ApiKey) -> ApiKey:
        self.insert(
            "INSERT INTO api_keys (key_id, tenant, doc) VALUES (?, ?, ?)",
            (key.key_id, key.tenant, API_KEY.to_json(key)),
            taken=Conflict("API key id already exists", field="key_id"),
        )
        return key

    def get_api_key(self, key_id: str) -> ApiKey | None:
        doc = self.db.one("SELECT doc FROM api_keys WHERE key_id = ?", key_id)
        return API_KEY.load(doc) if doc else None

    def list_api_keys(self, tenant: str) -> list[ApiKey]:
        docs = self.db.all("SELECT doc FROM api_keys WHERE tenant = ? ORDER BY key_id", tenant)
        return [API_KEY.load(d) for d in docs]

    def revoke_api_key(self, tenant: str, key_id: str, *, keep_an_admin: bool = False) -> ApiKey:
        # One IMMEDIATE transaction holds the write lock from the first read: the admin keys
        # counted are still the tenant's admin keys when the revoke is written.
        with self.db.tx() as db:
            row = db.execute(
                "SELECT doc FROM api_keys WHERE key_id = ? AND tenant = ?", (key_id, tenant)
            ).fetchone()
            if row is None:
                raise NotFound(f"API key '{key_id}' not found", field="key_id")
            key = API_KEY.from_json(row[0])
            if key.revoked_at is None:
                if keep_an_admin and is_active_admin(key):
                    others = db.execute(
                        "SELECT doc FROM api_keys WHERE tenant = ? AND key_id != ?", (tenant, key_id)
                    ).fetchall()
                    if another_active_admin((API_KEY.from_json(r[0]) for r in others), key_id) is None:
                        raise last_admin_key()
                key = replace(key, revoked_at=now())
                db.execute(
                    "UPDATE api_keys SET doc = ? WHERE key_id = ?", (API_KEY.to_json(key), key_id)
                )
        return key
