"""Messages per WebSocket connection and window in DynamoDB: one item a window in the
connection's partition (`pk=T#<tenant>#W#<connection>`, so the tenant role's leading-key
condition covers it), each counted up to its limit by a conditional update, with `expires_at`
for the table's time to live. A message's windows are counted in one transaction, so a window
that is full leaves the others uncounted."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from sluice.registry.dynamodb import layout
from sluice.registry.dynamodb.table import Part, Refused, key

if TYPE_CHECKING:
    from collections.abc import Sequence

    from sluice.registry.ports import MessageWindow


class DynamoConnections(Part):
    def count_message(self, tenant: str, connection: str, windows: Sequence[MessageWindow]) -> int | None:
        empty = next((i for i, w in enumerate(windows) if w.limit <= 0), None)
        if empty is not None:
            return empty
        updates = [self._message_update(tenant, connection, w) for w in windows]
        try:
            if len(updates) == 1:  # half the write units of a transaction
                self.table.send("update_item", **updates[0])
            else:
                self.table.send("transact_write_items", TransactItems=[{"Update": u} for u in updates])
        except Refused as refused:
            return next((i for i, r in enumerate(refused.reasons) if r == "ConditionalCheckFailed"), 0)
        return None

    def _message_update(self, tenant: str, connection: str, window: MessageWindow) -> dict[str, Any]:
        return {
            "TableName": self.table.name,
            "Key": key(layout.connection_pk(tenant, connection), layout.messages_sk(window.name)),
            "UpdateExpression": "ADD n :one SET expires_at = if_not_exists(expires_at, :expires)",
            "ConditionExpression": "attribute_not_exists(n) OR n < :limit",
            "ExpressionAttributeValues": {
                ":one": {"N": "1"},
                ":limit": {"N": str(window.limit)},
                ":expires": {"N": str(math.ceil(window.expires_at))},
            },
        }
