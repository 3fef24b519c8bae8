"""Messages per WebSocket connection and window in DynamoDB: one item a window in the
connection's partition (`pk=T#<tenant>#W#<connection>`, so the tenant role's leading-key
condition covers it), counted up to its limit by one conditional update, with `expires_at`
for the table's time to live."""

from __future__ import annotations

import math

from sluice.registry.dynamodb import layout
from sluice.registry.dynamodb.table import Part, Refused, key


class DynamoConnections(Part):
    def count_message(self, tenant: str, connection: str, window: str, *, limit: int, expires_at: float) -> bool:
        if limit <= 0:
            return False
        try:
            self.table.send(
                "update_item",
                TableName=self.table.name,
                Key=key(layout.connection_pk(tenant, connection), layout.messages_sk(window)),
                UpdateExpression="ADD n :one SET expires_at = if_not_exists(expires_at, :expires)",
                ConditionExpression="attribute_not_exists(n) OR n < :limit",
                ExpressionAttributeValues={
                    ":one": {"N": "1"},
                    ":limit": {"N": str(limit)},
                    ":expires": {"N": str(math.ceil(expires_at))},
                },
            )
        except Refused:
            return False
        return True
