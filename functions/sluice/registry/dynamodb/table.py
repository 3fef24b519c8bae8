"""The registry table and the calls every aggregate makes on it: one place that turns
DynamoDB's failures into sluice errors, retries what a concurrent transaction got in the way
of, follows query pages, and maps records to attribute values and back."""

from __future__ import annotations

import math
import random
import time
from decimal import Decimal
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from sluice.clients import lazy_client
from sluice.domain.errors import BackendError, BadRequest, PayloadTooLarge, SluiceError, Unavailable
from sluice.domain.stat_numbers import DYNAMODB
from sluice.registry.codec import not_finite
from sluice.registry.dynamodb.layout import CATALOG

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator
    from typing import Unpack

    from boto3.dynamodb.types import TypeDeserializer, TypeSerializer
    from botocore.exceptions import ClientError
    from mypy_boto3_dynamodb import DynamoDBClient

    from sluice.clients import AwsArgs
    from sluice.domain.errors import Conflict, NotFound
    from sluice.registry.guards import Catalog

_ATTEMPTS = 8
_BATCH = 25  # BatchWriteItem's limit
_GET = 100  # BatchGetItem's limit
_THROTTLED = frozenset(
    {
        "ProvisionedThroughputExceededException",
        "ThrottlingException",
        "RequestLimitExceeded",
        "InternalServerError",
        "ServiceUnavailable",
        "ResourceNotFoundException",  # the table is missing: a deployment problem, not the caller's
        "ThrottlingError",
        "ProvisionedThroughputExceeded",
    }
)


def table_of_url(url: str) -> str:
    """`dynamodb://table-name` -> `table-name`."""
    if not url.startswith("dynamodb://") or not url[len("dynamodb://") :].strip("/"):
        raise ValueError(f"not a dynamodb URL: {url!r}")
    return url[len("dynamodb://") :].strip("/")


def create_table(client: DynamoDBClient, name: str) -> None:
    """Create the registry table (on-demand billing, time-to-live on `expires_at`) and wait
    until it is active."""
    client.create_table(
        TableName=name,
        AttributeDefinitions=[
            {"AttributeName": "pk", "AttributeType": "S"},
            {"AttributeName": "sk", "AttributeType": "S"},
        ],
        KeySchema=[
            {"AttributeName": "pk", "KeyType": "HASH"},
            {"AttributeName": "sk", "KeyType": "RANGE"},
        ],
        BillingMode="PAY_PER_REQUEST",
    )
    client.get_waiter("table_exists").wait(TableName=name)
    client.update_time_to_live(
        TableName=name, TimeToLiveSpecification={"Enabled": True, "AttributeName": "expires_at"}
    )


class Table:
    """The table by name, and its client: a ready one (tests), or one from `clients` (by
    default the process's factory for `region`), built on first use."""

    def __init__(self, name: str, **aws: Unpack[AwsArgs]) -> None:
        self.name = name
        self.region = aws.get("region")
        self._dynamodb = lazy_client("dynamodb", aws, region=self.region, connect_timeout=3, read_timeout=10)

    @property
    def client(self) -> DynamoDBClient:
        return self._dynamodb()  # type: ignore[no-any-return]

    def send(self, operation: str, **params: Any) -> Any:
        """Make one call. A write that a concurrent transaction got in the way of is tried
        again; a failed condition raises `Refused`; other failures become sluice errors."""
        from botocore.exceptions import BotoCoreError, ClientError

        for _ in attempts():
            try:
                return getattr(self.client, operation)(**params)
            except ClientError as exc:
                outcome = _outcome(exc)
                if isinstance(outcome, Refused):
                    raise outcome from None
                if outcome is None:
                    continue
                raise outcome from exc
            except BotoCoreError as exc:
                raise Unavailable("the registry is unavailable; try again") from exc
        raise busy()

    def get(self, pk: str, sk: str) -> dict[str, Any] | None:
        found = self.send("get_item", TableName=self.name, Key=key(pk, sk), ConsistentRead=True)
        return unmarshal(found["Item"]) if "Item" in found else None

    def query(
        self,
        pk: str,
        prefix: str,
        *,
        newest_first: bool = False,
        limit: int | None = None,
        keys_only: bool = False,
    ) -> Iterator[dict[str, Any]]:
        """The items of partition `pk` whose sort key starts with `prefix`, in sort-key order,
        every page of them (or the first `limit`)."""
        params: dict[str, Any] = {
            "TableName": self.name,
            "KeyConditionExpression": "pk = :pk AND begins_with(sk, :prefix)",
            "ExpressionAttributeValues": {":pk": {"S": pk}, ":prefix": {"S": prefix}},
            "ConsistentRead": True,
            "ScanIndexForward": not newest_first,
        }
        if limit is not None:
            params["Limit"] = limit
        if keys_only:
            params["ProjectionExpression"] = "pk, sk"
        while True:
            page = self.send("query", **params)
            for item in page.get("Items", []):
                yield unmarshal(item)
            if limit is not None or "LastEvaluatedKey" not in page:
                return
            params["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    def delete_all(self, pk: str, prefix: str) -> None:
        keys = [key(d["pk"], d["sk"]) for d in self.query(pk, prefix, keys_only=True)]
        for start in range(0, len(keys), _BATCH):
            pending = [{"DeleteRequest": {"Key": k}} for k in keys[start : start + _BATCH]]
            for _ in attempts():
                done = self.send("batch_write_item", RequestItems={self.name: pending})
                pending = done.get("UnprocessedItems", {}).get(self.name, [])
                if not pending:
                    break
            else:
                raise busy()

    def get_many(self, keys: list[dict[str, Any]], **read: Any) -> Iterator[dict[str, Any]]:
        """The items found of `keys` (raw, as DynamoDB answers), read `_GET` at a time by
        BatchGetItem with `read` (`ConsistentRead`, a projection); the keys a call leaves
        unprocessed asked again, with backoff, until none are left (else: busy)."""
        for start in range(0, len(keys), _GET):
            pending = keys[start : start + _GET]
            for _ in attempts():
                answer = self.send("batch_get_item", RequestItems={self.name: {"Keys": pending, **read}})
                yield from answer.get("Responses", {}).get(self.name, [])
                pending = answer.get("UnprocessedKeys", {}).get(self.name, {}).get("Keys", [])
                if not pending:
                    break
            else:
                raise busy()

    def optimistic(self, step: Callable[[], Any]) -> Any:
        """Run `step` until it is not refused: a read, then a write conditioned on what was
        read; a refusal means another writer got in between, so decide again."""
        for _ in attempts():
            try:
                return step()
            except Refused:
                continue
        raise busy()


class Part:
    """One aggregate's share of the registry, over the table it shares with the others."""

    def __init__(self, table: Table) -> None:
        self.table = table

    def put_new(self, record: dict[str, Any], *, taken: Conflict) -> None:
        """An item written only where none has its key, or `taken` raised."""
        try:
            self.table.send("put_item", TableName=self.table.name, Item=record, **absent())
        except Refused:
            raise taken from None

    @staticmethod
    def newest(jobs: Iterable[Any], limit: int) -> list[Any]:
        """Jobs newest first (by creation, then id, as SQLite lists them), at most `limit`."""
        return sorted(jobs, key=lambda j: (j.created_at, j.id), reverse=True)[:limit]

    def found(self, pk: str, sk: str, *, missing: NotFound) -> dict[str, Any]:
        """The item at (pk, sk), or `missing` raised where there is none."""
        found = self.table.get(pk, sk)
        if found is None:
            raise missing
        return found

    def delete_found(self, pk: str, sk: str, *, missing: NotFound) -> None:
        """The item at (pk, sk) deleted, or `missing` raised where there is none."""
        try:
            self.table.send("delete_item", TableName=self.table.name, Key=key(pk, sk), **condition("attribute_exists(pk)"))
        except Refused:
            raise missing from None

    def scan_names(self, params: dict[str, Any], name_of: Callable[[str, str], tuple[str, str] | None]) -> list[tuple[str, str]]:
        """Every page of a scan (`params`: what the caller's IAM policy allows it to read), as
        the (tenant, name) `name_of` reads from each item's keys (None: not one), sorted."""
        found: list[tuple[str, str]] = []
        while True:
            page = self.table.send("scan", **params)
            for record in page.get("Items", []):
                named = name_of(record["pk"]["S"], record["sk"]["S"])
                if named is not None:
                    found.append(named)
            if "LastEvaluatedKey" not in page:
                return sorted(found)
            params = {**params, "ExclusiveStartKey": page["LastEvaluatedKey"]}


class Refused(Exception):
    """A condition failed. `reasons` holds a transaction's cancellation codes, item by item."""

    def __init__(self, reasons: list[str]) -> None:
        super().__init__("condition failed")
        self.reasons = reasons


def _outcome(exc: ClientError) -> Refused | SluiceError | None:
    """What a failed call means: a refusal, an error to raise, or None to try again."""
    code = exc.response.get("Error", {}).get("Code", "")
    status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
    if code == "ConditionalCheckFailedException":
        return Refused([code])
    if code == "TransactionConflictException":
        return None
    if code == "TransactionCanceledException":
        reasons = [r.get("Code", "None") for r in exc.response.get("CancellationReasons", [])]  # type: ignore[attr-defined]
        failed = set(reasons) - {"None"}
        if "ConditionalCheckFailed" in failed:
            return Refused(reasons)
        if failed <= {"TransactionConflict"}:
            return None
        code = next(iter(failed))
    if code in _THROTTLED or status >= 500:
        return Unavailable("the registry is unavailable; try again")
    message = exc.response.get("Error", {}).get("Message", "").lower()
    if code == "ValidationException" and "size" in message and "exceeded" in message:  # an item's 400 KB, a key's 2 KB
        return PayloadTooLarge("the record is larger than DynamoDB keeps in one item")
    return BackendError("the registry could not complete the request")


def attempts() -> Iterator[int]:
    """Tries of an optimistic step; each retry waits a little, with jitter, so racers spread out."""
    for attempt in range(_ATTEMPTS):
        if attempt:
            time.sleep(random.uniform(0, min(0.2, 0.005 * 2**attempt)))
        yield attempt


def busy() -> Unavailable:
    return Unavailable("the registry is busy with concurrent changes; try again")


# Expressions ---------------------------------------------------------------------------
def key(pk: str, sk: str) -> dict[str, Any]:
    return {"pk": {"S": pk}, "sk": {"S": sk}}


def absent() -> dict[str, Any]:
    return {"ConditionExpression": "attribute_not_exists(pk)"}


def earlier_or_none(made: int) -> dict[str, Any]:
    """A claim's condition: none yet, or one an earlier deployment of the name made (its `made`
    below this one's; one without `made`, from before claims kept it, is kept)."""
    return condition("attribute_not_exists(pk) OR #made < :made", {"#made": "made"}, {":made": made})


def condition(
    expression: str, names: dict[str, str] | None = None, values: dict[str, Any] | None = None
) -> dict[str, Any]:
    params: dict[str, Any] = {"ConditionExpression": expression}
    if names:
        params["ExpressionAttributeNames"] = names
    if values:
        params["ExpressionAttributeValues"] = marshal(values)
    return params


def set_fields(fields: dict[str, Any]) -> tuple[str, dict[str, str], dict[str, Any]]:
    """An UpdateExpression that sets each field given (removes those given as None), with its
    names and values: the attributes not named are left as another writer left them."""
    names = {f"#f{i}": name for i, name in enumerate(fields)}
    values = {f":f{i}": v for i, v in enumerate(fields.values()) if v is not None}
    sets = [f"#f{i} = :f{i}" for i, v in enumerate(fields.values()) if v is not None]
    removes = [f"#f{i}" for i, v in enumerate(fields.values()) if v is None]
    expression = " ".join(f"{verb} {', '.join(parts)}" for verb, parts in (("SET", sets), ("REMOVE", removes)) if parts)
    return expression, names, values


# Attribute values ----------------------------------------------------------------------
# Records are top-level attributes (the stored forms of `sluice.registry.codec`, fields that
# are None left out); floats travel as Decimal and numbers come back as int when integral,
# else float, so `1.0` in a policy reads back as `1`.
@lru_cache(maxsize=1)
def _types() -> tuple[TypeSerializer, TypeDeserializer]:
    from boto3.dynamodb.types import TypeDeserializer, TypeSerializer

    return TypeSerializer(), TypeDeserializer()


def item(pk: str, sk: str, record: dict[str, Any], **extra: Any) -> dict[str, Any]:
    fields = {k: v for k, v in record.items() if v is not None}
    return marshal(fields | extra | {"pk": pk, "sk": sk})


def marshal(fields: dict[str, Any]) -> dict[str, Any]:
    serializer, _ = _types()
    return {k: serializer.serialize(_to_dynamo(v, k)) for k, v in fields.items()}


def unmarshal(attributes: dict[str, Any]) -> dict[str, Any]:
    _, deserializer = _types()
    return {k: _from_dynamo(deserializer.deserialize(v)) for k, v in attributes.items()}


def _to_dynamo(value: Any, field: str) -> Any:
    """`value` as boto3 writes it; a number DynamoDB cannot hold is a 400 naming `field`, its
    place in the record (a record's attributes are named as the API names them: `policy.…`)."""
    if isinstance(value, float):
        if not math.isfinite(value):
            raise not_finite(field)
        if value and not DYNAMODB.tiny <= abs(value) < DYNAMODB.below:  # what a DynamoDB number holds (1E-130 to 9.9E125)
            raise BadRequest(f"{field}: the registry stores numbers of 1e-130 to 9.9e125 in magnitude, or 0: not {value!r}", field=field)
        return Decimal(repr(value))  # repr is the shortest string that reads back as the same float
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**38:  # 38 digits, as boto3 writes them
        raise BadRequest(f"{field}: the registry stores integers of at most 38 digits, not one of {len(str(abs(value)))}", field=field)
    if isinstance(value, dict):
        return {k: _to_dynamo(v, f"{field}.{k}") for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_to_dynamo(v, f"{field}.{i}") for i, v in enumerate(value)]
    return value


def _from_dynamo(value: Any) -> Any:
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, dict):
        return {k: _from_dynamo(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_from_dynamo(v) for v in value]
    return value


def catalog_step(table: str, tenant_pk: str, seen: Catalog, kind: str) -> dict[str, Any]:
    """A transaction's update of the tenant's counters (`sluice.registry.guards`): `kind`'s
    ("writes", a deployment's; "deletes", a version's, a model's or a deployment's) moved on,
    refused (ConditionalCheckFailed) where the other kind's is no longer as `seen`."""
    other = "deletes" if kind == "writes" else "writes"
    was = getattr(seen, other)
    same = "#o = :was" if was else "attribute_not_exists(#o)"
    return {
        "Update": {
            "TableName": table, "Key": key(tenant_pk, CATALOG), "UpdateExpression": "ADD #k :one",
            **condition(same, {"#o": other, "#k": kind}, {":one": 1} | ({":was": was} if was else {})),
        }
    }  # fmt: skip
