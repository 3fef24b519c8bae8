"""API keys in DynamoDB: the key by id, and a copy under its tenant for listing (a secondary
index's reads would lag behind writes).

With one set of credentials both are written in one transaction. When tenant partitions are
reached through credentials confined to the tenant (`key_table` differs from `table`), the key
item goes out with the function's own credentials and the listing copy with the tenant's: a
transaction cannot span two sets, so a new key item is written first, and removed again if the
copy fails.

A revoke decides from the tenant's listing copies. Where it must keep the tenant an admin key
(`keep_an_admin`), its transaction carries a ConditionCheck that another admin key's listing
copy is still not revoked: two admin keys revoking each other at once write and check each
other's items, so DynamoDB commits one transaction and cancels the other, which decides again
from a fresh read and is refused. With split credentials the listing copy (and that check) is
written first and the key item after it; a revoke cut short between the two is finished by
the next revoke of the key, and the caller, given an error, was never told it was revoked."""

from __future__ import annotations

from contextlib import suppress
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from sluice.domain import now
from sluice.domain.errors import Conflict, NotFound
from sluice.registry.codec import API_KEY
from sluice.registry.dynamodb import layout
from sluice.registry.dynamodb.table import Part, Refused, Table, absent, condition, item, key
from sluice.registry.guards import another_active_admin, is_active_admin, last_admin_key

if TYPE_CHECKING:
    from sluice.domain import ApiKey


class DynamoKeys(Part):
    @property
    def key_table(self) -> Table:
        """Where `K#<key id>` items go: this table unless credentials were split."""
        return getattr(self, "_key_table", None) or self.table

    def put_api_key(self, api_key: ApiKey) -> ApiKey:
        record = API_KEY.dump(api_key)
        if self.key_table is not self.table:
            return self._put_split(api_key, record)
        puts = [
            {"Put": {"TableName": self.table.name, "Item": item(pk, sk, record), **absent()}}
            for pk, sk in layout.key_ids(api_key.tenant, api_key.key_id)
        ]
        try:
            self.table.send("transact_write_items", TransactItems=puts)
        except Refused:
            raise Conflict("API key id already exists", field="key_id") from None
        return api_key

    def _put_split(self, api_key: ApiKey, record: dict[str, object]) -> ApiKey:
        (key_pk, key_sk), (list_pk, list_sk) = layout.key_ids(api_key.tenant, api_key.key_id)
        try:
            self.key_table.send("put_item", TableName=self.table.name, Item=item(key_pk, key_sk, record), **absent())
        except Refused:
            raise Conflict("API key id already exists", field="key_id") from None
        try:
            self.table.send("put_item", TableName=self.table.name, Item=item(list_pk, list_sk, record))
        except Exception:
            self.key_table.send("delete_item", TableName=self.table.name, Key=key(key_pk, key_sk))
            raise
        return api_key

    def get_api_key(self, key_id: str) -> ApiKey | None:
        found = self.key_table.get(*layout.key_item(key_id))
        return API_KEY.load(found) if found else None

    def list_api_keys(self, tenant: str) -> list[ApiKey]:
        found = self.table.query(layout.tenant(tenant), layout.KEY_LISTING)
        return [API_KEY.load(d) for d in found]

    def revoke_api_key(self, tenant: str, key_id: str, *, keep_an_admin: bool = False) -> ApiKey:
        def step() -> ApiKey:
            keys = self.list_api_keys(tenant)
            found = next((k for k in keys if k.key_id == key_id), None)
            if found is None:
                raise NotFound(f"API key '{key_id}' not found", field="key_id")
            if found.revoked_at is not None:
                if self.key_table is not self.table:
                    self._revoke_key_item(found)  # a revoke cut short after its listing copy
                return found
            revoked = replace(found, revoked_at=now())
            (key_pk, key_sk), (list_pk, list_sk) = layout.key_ids(tenant, key_id)
            listing = self._revoke(list_pk, list_sk, revoked)
            guard: list[dict[str, Any]] = []
            if keep_an_admin and is_active_admin(found):
                other = another_active_admin(keys, key_id)
                if other is None:
                    raise last_admin_key()
                guard = [self._still_active(tenant, other.key_id)]
            if self.key_table is self.table:
                items = [{"Update": self._revoke(key_pk, key_sk, revoked)}, {"Update": listing}, *guard]
                self.table.send("transact_write_items", TransactItems=items)
            else:  # the listing copy, with the guard, first; then the key item the authorizer reads
                if guard:
                    self.table.send("transact_write_items", TransactItems=[{"Update": listing}, *guard])
                else:
                    self.table.send("update_item", **listing)
                self._revoke_key_item(revoked)
            return revoked

        revoked: ApiKey = self.table.optimistic(step)
        return revoked

    def _revoke(self, pk: str, sk: str, revoked: ApiKey) -> dict[str, Any]:
        """The update that revokes one of a key's two items, unless it was revoked meanwhile."""
        return {
            "TableName": self.table.name,
            "Key": key(pk, sk),
            "UpdateExpression": "SET #at = :at",
            **condition(
                "attribute_exists(pk) AND attribute_not_exists(#at)", {"#at": "revoked_at"}, {":at": revoked.revoked_at}
            ),
        }

    def _still_active(self, tenant: str, key_id: str) -> dict[str, Any]:
        """A transaction's check that another key's listing copy is there and not revoked."""
        return {
            "ConditionCheck": {
                "TableName": self.table.name,
                "Key": key(*layout.key_ids(tenant, key_id)[1]),
                **condition("attribute_exists(pk) AND attribute_not_exists(#at)", {"#at": "revoked_at"}),
            }
        }

    def _revoke_key_item(self, revoked: ApiKey) -> None:
        """Revoke the key item alone (split credentials); revoked already is done."""
        with suppress(Refused):
            self.key_table.send("update_item", **self._revoke(*layout.key_item(revoked.key_id), revoked))
