"""Tables of precomputed answers in a DynamoDB table of their own (`pk`, `sk`, on-demand,
time to live on `expires_at`), every key under the tenant's prefix so that the tenant role's
leading-key condition (`T#<tenant>`, `T#<tenant>#*`) covers it as it covers the registry:

- publication: `pk=T#<tenant>#P#<table>`, `sk=PUBLISHED`; also `doc` (JSON, with the publication
  it replaced), `expires_at`, `generation` and `order` (`Publication.order`); publishing and
  withdrawing read it, then write only where `doc` is still what they read
- answer: `pk=T#<tenant>#P#<table>#E#<entity>`, `sk=G#<generation>`; also `body` (bytes),
  `at` (when computed) and `expires_at`
- what a generation holds: `pk=T#<tenant>#P#<table>#G#<generation>`, `sk=GENERATION`; also
  `doc` and `expires_at`

An answer's partition is its entity's, so a job's writes spread over the table. Reads are
BatchGetItem, up to 100 keys a call, eventually consistent (a publication is written after every
answer it names, and read again every few seconds); writes are BatchWriteItem, 25 items a call,
what DynamoDB leaves unprocessed sent again with a growing pause. Old generations are not
deleted (`retire` does nothing): their `expires_at` lets DynamoDB remove them, and a read
ignores an expired item.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from sluice.registry.dynamodb.table import Refused, Table, attempts, busy, key
from sluice.registry.precomputed import MAX_PUT, Publication, Stored, Superseded

if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Unpack

    from mypy_boto3_dynamodb import DynamoDBClient

    from sluice.clients import AwsArgs

PUBLISHED = "PUBLISHED"
GENERATION = "GENERATION"


def publication_pk(tenant: str, table: str) -> str:
    return f"T#{tenant}#P#{table}"


def answer_pk(tenant: str, table: str, entity: str) -> str:
    return f"T#{tenant}#P#{table}#E#{entity}"


def generation_pk(tenant: str, table: str, generation: str) -> str:
    return f"T#{tenant}#P#{table}#G#{generation}"


def generation_sk(generation: str) -> str:
    return f"G#{generation}"


class DynamoPrecomputed:
    """The table by name and its client (a ready one, or one from `clients` on first use);
    in the API a client whose calls go out as the request's tenant (`TenantRoutingClient`)."""

    def __init__(self, table_name: str, **aws: Unpack[AwsArgs]) -> None:
        self.table = Table(table_name, **aws)

    @classmethod
    def from_url(cls, url: str, **kw: Any) -> DynamoPrecomputed:
        from sluice.registry.dynamodb.table import table_of_url

        return cls(table_of_url(url), **kw)

    @property
    def client(self) -> DynamoDBClient:
        return self.table.client

    def publication(self, tenant: str, table: str, *, now: float) -> Publication | None:
        found = self._published(tenant, table)
        if found is None or float(found["expires_at"]["N"]) <= now:
            return None
        return self._publication_of(found)

    def get_answers(self, tenant: str, table: str, generation: str, entities: Sequence[str], *, now: float) -> dict[str, Stored]:
        found: dict[str, Stored] = {}
        unique = list(dict.fromkeys(entities))
        sk = generation_sk(generation)
        prefix = len(answer_pk(tenant, table, ""))
        keys = [key(answer_pk(tenant, table, e), sk) for e in unique]
        read = {"ProjectionExpression": "pk, body, #at, expires_at", "ExpressionAttributeNames": {"#at": "at"}}
        for item in self.table.get_many(keys, **read):
            until = float(item["expires_at"]["N"])
            if until > now:
                found[item["pk"]["S"][prefix:]] = Stored(bytes(item["body"]["B"]), float(item["at"]["N"]), until)
        return found

    def put_answers(
        self, tenant: str, table: str, generation: str, rows: Sequence[tuple[str, bytes]], *, computed_at: float, expires_at: float
    ) -> None:
        sk, ttl, at = generation_sk(generation), str(math.ceil(expires_at)), repr(float(computed_at))
        latest = dict(rows)  # one item per key in a call: DynamoDB refuses a call that names one twice
        items = [
            {"PutRequest": {"Item": {**key(answer_pk(tenant, table, e), sk), "body": {"B": body}, "at": {"N": at}, "expires_at": {"N": ttl}}}}
            for e, body in latest.items()
        ]
        for start in range(0, len(items), MAX_PUT):
            pending = items[start : start + MAX_PUT]
            for _ in attempts():
                done = self.table.send("batch_write_item", RequestItems={self.table.name: pending})
                pending = done.get("UnprocessedItems", {}).get(self.table.name, [])
                if not pending:
                    break
            else:
                raise busy()

    def describe(self, tenant: str, table: str, publication: Publication, *, expires_at: float) -> None:
        self.table.send(
            "put_item",
            TableName=self.table.name,
            Item={
                **key(generation_pk(tenant, table, publication.generation), GENERATION),
                "doc": {"S": publication.to_json()},
                "expires_at": {"N": str(math.ceil(expires_at))},
            },
        )

    def described(self, tenant: str, table: str, generation: str) -> Publication | None:
        found = self.table.send(
            "get_item", TableName=self.table.name, Key=key(generation_pk(tenant, table, generation), GENERATION), ConsistentRead=True
        ).get("Item")
        return Publication.from_json(found["doc"]["S"]) if found else None

    def publish(self, tenant: str, table: str, publication: Publication, *, expires_at: float) -> Publication | None:
        for _ in attempts():
            found = self._published(tenant, table)
            before = self._publication_of(found) if found is not None else None
            later = before is not None and before.expires_at > publication.published_at and before.order > publication.order
            # Superseded: kept in the later one's chain, to be put back should it be withdrawn.
            stood = before.admitting(replace(publication, expires_at=expires_at)) if later else publication.replacing(before, expires_at=expires_at)  # type: ignore[union-attr]
            if stood is not None:
                # Written only over what was read (`doc` names what it replaced, kept for `withdraw`).
                unchanged = (
                    {"ConditionExpression": "attribute_not_exists(pk)"}
                    if found is None
                    else {"ConditionExpression": "#d = :d", "ExpressionAttributeNames": {"#d": "doc"}, "ExpressionAttributeValues": {":d": found["doc"]}}
                )
                try:
                    self.table.send("put_item", TableName=self.table.name, Item=self._publication_item(tenant, table, stood), **unchanged)
                except Refused:
                    continue  # another publication or withdrawal meanwhile: look again
            if later:
                raise Superseded(before)  # type: ignore[arg-type]
            return stood.replaced  # type: ignore[union-attr]
        raise busy()

    def withdraw(self, tenant: str, table: str, generation: str) -> bool:
        for _ in attempts():
            found = self._published(tenant, table)
            current = self._publication_of(found) if found is not None else None
            if found is None or current is None:
                return False
            still = {
                "ConditionExpression": "#d = :d",
                "ExpressionAttributeNames": {"#d": "doc"},
                "ExpressionAttributeValues": {":d": found["doc"]},
            }
            try:
                if current.generation == generation:  # what it replaced, as it was (with its chain), or nothing
                    if current.replaced is None:
                        self.table.send("delete_item", TableName=self.table.name, Key=key(publication_pk(tenant, table), PUBLISHED), **still)
                    else:
                        self.table.send("put_item", TableName=self.table.name, Item=self._publication_item(tenant, table, current.replaced), **still)
                    return True
            except Refused:
                continue  # replaced meanwhile: look again (the one now served may hold it in its chain)
            kept = current.without(generation)  # what a later one would put back: never again
            if kept is None:
                return False
            try:
                self.table.send("put_item", TableName=self.table.name, Item=self._publication_item(tenant, table, kept), **still)
            except Refused:
                continue  # another publication meanwhile, its chain holding this one: look again
            return False
        raise busy()

    def retire(self, tenant: str, table: str, generation: str) -> None:
        return None  # its items expire with their time to live

    def settle(self, tenant: str, table: str, generation: str) -> None:
        for _ in attempts():
            found = self._published(tenant, table)
            kept = self._publication_of(found).settled(generation) if found is not None else None
            if kept is None:
                return
            still = {"ConditionExpression": "#d = :d", "ExpressionAttributeNames": {"#d": "doc"}, "ExpressionAttributeValues": {":d": found["doc"]}}
            try:
                self.table.send("put_item", TableName=self.table.name, Item=self._publication_item(tenant, table, kept), **still)
            except Refused:
                continue  # published or withdrawn meanwhile: look again
            return
        raise busy()

    def _published(self, tenant: str, table: str) -> dict[str, Any] | None:
        return self.table.send(
            "get_item", TableName=self.table.name, Key=key(publication_pk(tenant, table), PUBLISHED), ConsistentRead=True
        ).get("Item")

    @staticmethod
    def _publication_of(item: dict[str, Any]) -> Publication:
        return Publication.from_json(item["doc"]["S"], expires_at=float(item["expires_at"]["N"]))

    @staticmethod
    def _publication_item(tenant: str, table: str, publication: Publication) -> dict[str, Any]:
        return {
            **key(publication_pk(tenant, table), PUBLISHED),
            "doc": {"S": publication.to_json()},
            "generation": {"S": publication.generation},
            "order": {"S": publication.order},
            "expires_at": {"N": str(math.ceil(publication.expires_at))},
        }
