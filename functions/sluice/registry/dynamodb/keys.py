"""API keys in DynamoDB: the key by id, and a copy under its tenant for listing, written in the
same transaction (a secondary index's reads would lag behind writes)."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from sluice.domain import now
from sluice.domain.errors import Conflict, NotFound
from sluice.registry.codec import API_KEY
from sluice.registry.dynamodb import layout
from sluice.registry.dynamodb.table import Part, Refused, absent, condition, item, key

if TYPE_CHECKING:
    from sluice.domain import ApiKey


class DynamoKeys(Part):
    def put_api_key(self, api_key: ApiKey) -> ApiKey:
        record = API_KEY.dump(api_key)
        puts = [
            {"Put": {"TableName": self.table.name, "Item": item(pk, sk, record), **absent()}}
            for pk, sk in layout.key_ids(api_key.tenant, api_key.key_id)
        ]
        try:
            self.table.send("transact_write_items", TransactItems=puts)
        except Refused:
            raise Conflict("API key id already exists", field="key_id") from None
        return api_key

    def get_api_key(self, key_id: str) -> ApiKey | None:
        found = self.table.get(*layout.key_item(key_id))
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
            self.table.send("transact_write_items", TransactItems=updates)
            return revoked

        revoked: ApiKey = self.table.optimistic(step)
        return revoked
