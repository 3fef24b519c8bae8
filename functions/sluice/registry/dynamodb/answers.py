"""The prediction cache's shared tier in DynamoDB: one item per kept answer, in the
deployment's partition family (`pk=T#<tenant>#D#<name>#A#<key>`, `sk=ANSWER`, so the tenant
role's leading-key condition covers it), the answer as a binary attribute, `expires_at` for
the table's time to live (whole seconds, rounded up so DynamoDB never removes an answer early),
and `expires_at_exact`, the answer's own expiry. DynamoDB removes expired items within days,
not at once: a read ignores an item past its exact expiry, so an answer is never served even a
fraction of a second past its `ttl_s` (an item an earlier release wrote, without it, is read
by its `expires_at`; the cache checks the expiry the answer itself carries as well). An item
holds at most 400 KB: a larger answer stays in its container's tier only."""

from __future__ import annotations

import math

from sluice.registry.dynamodb import layout
from sluice.registry.dynamodb.table import Part, key

MAX_BODY_BYTES = 380 * 1024  # the item limit, less the keys and attribute names


class DynamoAnswers(Part):
    def get_cached_answer(self, tenant: str, deployment: str, key_: str, *, now: float) -> bytes | None:
        found = self.table.send(
            "get_item",
            TableName=self.table.name,
            Key=key(layout.answer_pk(tenant, deployment, key_), layout.ANSWER),
            ProjectionExpression="body, expires_at, expires_at_exact",
        )
        record = found.get("Item")
        if record is None or float((record.get("expires_at_exact") or record["expires_at"])["N"]) <= now:
            return None
        return bytes(record["body"]["B"])

    def put_cached_answer(self, tenant: str, deployment: str, key_: str, body: bytes, *, expires_at: float) -> None:
        if len(body) > MAX_BODY_BYTES:
            return
        self.table.send(
            "put_item",
            TableName=self.table.name,
            Item={
                **key(layout.answer_pk(tenant, deployment, key_), layout.ANSWER),
                "body": {"B": body},
                "expires_at": {"N": str(math.ceil(expires_at))},
                "expires_at_exact": {"N": f"{expires_at:.6f}"},
            },
        )
