"""API keys in DynamoDB: the key by id, and a copy under its tenant for listing (a secondary
index's reads would lag behind writes).

With one set of credentials both are written in one transaction. When tenant partitions are
reached through credentials confined to the tenant (`key_table` differs from `table`), the key
item goes out with the function's own credentials and the listing copy with the tenant's: a
transaction cannot span two sets, so the key item is written first, and removed again if the
copy fails; a revoke updates the key item (what the authorizer reads) first."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from sluice.domain import now
from sluice.domain.errors import Conflict, NotFound
from sluice.registry.codec import API_KEY
from sluice.registry.dynamodb import layout
from sluice.registry.dynamodb.table import Part, Refused, Table, absent, condition, item, key

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

    def revoke_api_key(self, tenant: str, key_id: str) -> ApiKey:
        def step() -> ApiKey:
            found = self.get_api_key(key_id)
            if found is None or found.tenant != tenant:
                raise NotFound(f"API key '{key_id}' not found", field="key_id")
            if found.revoked_at is not None:
                return found
            revoked = replace(found, revoked_at=now())
            updates = [
                {
                    "Update": {
                        "TableName": self.table.name,
                        "Key": key(pk, sk),
                        "UpdateExpression": "SET #at = :at",
                        **condition(
                            "attribute_exists(pk) AND attribute_not_exists(#at)",
                            {"#at": "revoked_at"},
                            {":at": revoked.revoked_at},
                        ),
                    }
                }
                for pk, sk in layout.key_ids(tenant, key_id)
            ]
            if self.key_table is self.table:
                self.table.send("transact_write_items", TransactItems=updates)
            else:  # the key item first: the authorizer reads it
                for update, table in zip(updates, (self.key_table, self.table), strict=True):  # key_ids' order
                    table.send("update_item", **update["Update"])
            return revoked

        revoked: ApiKey = self.table.optimistic(step)
        return revoked

