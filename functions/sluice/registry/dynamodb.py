"""The AWS registry: one DynamoDB table, single-table design.

The table has two string keys, `pk` (partition) and `sk` (sort), on-demand billing, and no
secondary index. `create_table` builds it for tests and local tooling; the CDK stack defines
the production table with the same key schema.

- model: `pk=T#<tenant>`, `sk=M#<name>`; also `uid` and `last_version`
- version: `pk=T#<tenant>#M#<model>`, `sk=V#<version:010d>`
- deployment: `pk=T#<tenant>`, `sk=D#<name>`
- history counter: `pk=T#<tenant>#D#<name>`, `sk=SEQ`; also `last_seq`
- history entry: `pk=T#<tenant>#D#<name>`, `sk=H#<seq:010d>`
- statistics: `pk=T#<tenant>#D#<name>`, `sk=S#<revision:010d>#<subject>`; also `subject` and
  one `stat:<name>` per counter
- assignment: `pk=T#<tenant>#D#<name>#R#<request id>`, `sk=ASSIGNMENT`; also `expires_at`
- API key: `pk=K#<key id>`, `sk=KEY`
- API key listing: `pk=T#<tenant>`, `sk=K#<key id>`, a copy of the key
- batch job: `pk=T#<tenant>`, `sk=J#<job id>`; its counters are numbers added to in place
- batch chunk: `pk=T#<tenant>#J#<job id>`, `sk=C#<index:06d>`, one per scored chunk

Every read is a GetItem or a Query on one partition, strongly consistent, so the registry reads
its own writes as the SQLite one does; lists come back in sort-key order, which is the name
(or number) order SQLite gives. A key's listing copy is written in the same transaction as the
key, instead of a GSI, whose reads would lag behind writes.

Assignments carry `expires_at` (epoch seconds, `ASSIGNMENT_TTL_S` after they are made) for
the table's time-to-live: feedback comes within days, and one item per bandit request would
otherwise pile up forever.

Records are stored as top-level attributes (the dicts of `sluice.registry.codec`, fields that
are None left out); floats travel as Decimal and numbers come back as int when integral, else
float, so `1.0` in a policy reads back as `1`.

Concurrency:
- `add_version` bumps `last_version` with an atomic ADD, then puts the version in a transaction
  that checks the model is still the same incarnation (`uid`, new on every create).
- Every deployment write (create, update, delete) is one transaction over the deployment item,
  the history counter and the new history entry, conditioned on the counter value read just
  before (and on the entry's key being free); writes to one deployment therefore serialize,
  history order is commit order even across a delete and re-create, and a write that lost a
  race is decided again from a fresh read.
- Statistics merge with an atomic ADD for the sums and, per maximum, a SET conditioned on the
  stored value being smaller: many containers merge into one item without reading it.
- A batch job's status moves with a SET conditioned on the status read just before; a chunk
  is recorded in one transaction that puts its item (only if absent) and ADDs its counts to
  the job (only while RUNNING), so a chunk scored twice counts once.
- `delete_model` removes the versions while the model still exists, then deletes the model only
  if no version was added meanwhile; a failure half-way leaves the model to delete again.
"""

from __future__ import annotations

import math
import random
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import replace
from decimal import Decimal
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from sluice.domain import ApiKey, Deployment, DeploymentChange, Model, ModelVersion, now
from sluice.domain.errors import (
    BackendError,
    BadRequest,
    Conflict,
    NotFound,
    SluiceError,
    Unavailable,
)
from sluice.domain.jobs import UPDATABLE, BatchJob, ChunkResult, JobStatus, check_move
from sluice.registry import codec

if TYPE_CHECKING:
    from boto3.dynamodb.types import TypeDeserializer, TypeSerializer
    from botocore.exceptions import ClientError
    from mypy_boto3_dynamodb import DynamoDBClient

ASSIGNMENT_TTL_S = 30 * 24 * 3600
_STAT = "stat:"
_ATTEMPTS = 8
_BATCH = 25  # BatchWriteItem's limit
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


class DynamoRegistry:
    def __init__(
        self, table_name: str, *, client: DynamoDBClient | None = None, region: str | None = None
    ) -> None:
        self.table_name = table_name
        self.region = region
        self._client = client
        self._lock = threading.Lock()

    @classmethod
    def from_url(cls, url: str, *, region: str | None = None) -> DynamoRegistry:
        return cls(table_of_url(url), region=region)

    @property
    def client(self) -> DynamoDBClient:
        if self._client is None:
            # boto3's default session is not thread-safe: build one session, once.
            with self._lock:
                if self._client is None:
                    import boto3
                    from botocore.config import Config

                    config = Config(
                        retries={"mode": "standard"}, connect_timeout=3, read_timeout=10
                    )
                    self._client = boto3.session.Session().client(
                        "dynamodb", region_name=self.region, config=config
                    )
        return self._client

    # Models ---------------------------------------------------------------------------
    def create_model(self, model: Model) -> Model:
        record = codec.model_to_dict(model)
        item = _item(_tenant(model.tenant), f"M#{model.name}", record, uid=uuid.uuid4().hex)
        try:
            self._send(self.client.put_item, TableName=self.table_name, Item=item, **_absent())
        except _Refused:
            raise Conflict(f"model '{model.name}' already exists", field="name") from None
        return model

    def get_model(self, tenant: str, name: str) -> Model:
        item = self._get(_tenant(tenant), f"M#{name}")
        if item is None:
            raise NotFound(f"model '{name}' not found", field="model")
        return codec.model_from_dict(item)

    def list_models(self, tenant: str) -> list[Model]:
        return [codec.model_from_dict(d) for d in self._query(_tenant(tenant), "M#")]

    def delete_model(self, tenant: str, name: str) -> None:
        for _ in _attempts():
            item = self._get(_tenant(tenant), f"M#{name}")
            if item is None:
                raise NotFound(f"model '{name}' not found", field="model")
            self._delete_all(_versions_pk(tenant, name), "V#")
            last = item.get("last_version")
            same = "#last = :last" if last is not None else "attribute_not_exists(#last)"
            values = {":uid": item["uid"]} | ({":last": last} if last is not None else {})
            try:
                self._send(
                    self.client.delete_item,
                    TableName=self.table_name,
                    Key=_key(_tenant(tenant), f"M#{name}"),
                    **_condition(
                        f"#uid = :uid AND {same}", {"#uid": "uid", "#last": "last_version"}, values
                    ),
                )
                return
            except _Refused:
                continue
        raise _busy()

    # Versions -------------------------------------------------------------------------
    def add_version(self, version: ModelVersion) -> ModelVersion:
        model_key = _key(_tenant(version.tenant), f"M#{version.model}")
        try:
            updated = self._send(
                self.client.update_item,
                TableName=self.table_name,
                Key=model_key,
                UpdateExpression="ADD #last :one",
                ReturnValues="ALL_NEW",
                **_condition("attribute_exists(pk)", {"#last": "last_version"}, {":one": 1}),
            )
        except _Refused:
            raise NotFound(f"model '{version.model}' not found", field="model") from None
        model = _unmarshal(updated["Attributes"])
        stored = version.with_version(int(model["last_version"]))
        item = _item(
            _versions_pk(stored.tenant, stored.model),
            _version_sk(stored.version),
            codec.version_to_dict(stored),
        )
        try:
            self._send(
                self.client.transact_write_items,
                TransactItems=[
                    {
                        "ConditionCheck": {
                            "TableName": self.table_name,
                            "Key": model_key,
                            **_condition("#uid = :uid", {"#uid": "uid"}, {":uid": model["uid"]}),
                        }
                    },
                    {"Put": {"TableName": self.table_name, "Item": item, **_absent()}},
                ],
            )
        except _Refused as refused:
            if refused.reasons[:1] == ["ConditionalCheckFailed"]:
                raise NotFound(f"model '{version.model}' not found", field="model") from None
            raise Conflict(
                f"model '{stored.model}' already has a version {stored.version}", field="version"
            ) from None
        return stored

    def get_version(self, tenant: str, model: str, version: int) -> ModelVersion:
        item = self._get(_versions_pk(tenant, model), _version_sk(int(version)))
        if item is None:
            self.get_model(tenant, model)
            raise NotFound(f"model '{model}' has no version {version}", field="version")
        return codec.version_from_dict(item)

    def latest_version(self, tenant: str, model: str) -> ModelVersion:
        newest = next(
            self._query(_versions_pk(tenant, model), "V#", newest_first=True, limit=1), None
        )
        if newest is None:
            self.get_model(tenant, model)
            raise NotFound(f"model '{model}' has no versions", field="version")
        return codec.version_from_dict(newest)

    def list_versions(self, tenant: str, model: str) -> list[ModelVersion]:
        self.get_model(tenant, model)
        return [codec.version_from_dict(d) for d in self._query(_versions_pk(tenant, model), "V#")]

    def delete_version(self, tenant: str, model: str, version: int) -> None:
        try:
            self._send(
                self.client.delete_item,
                TableName=self.table_name,
                Key=_key(_versions_pk(tenant, model), _version_sk(int(version))),
                **_condition("attribute_exists(pk)"),
            )
        except _Refused:
            raise NotFound(f"model '{model}' has no version {version}", field="version") from None

    # Deployments ----------------------------------------------------------------------
    def create_deployment(self, deployment: Deployment) -> Deployment:
        stored = replace(deployment, revision=1)

        def change(current: Deployment | None) -> tuple[dict[str, Any], DeploymentChange]:
            if current is not None:
                raise Conflict(f"deployment '{deployment.name}' already exists", field="name")
            item = _item(
                _tenant(stored.tenant), f"D#{stored.name}", codec.deployment_to_dict(stored)
            )
            put = {"Put": {"TableName": self.table_name, "Item": item, **_absent()}}
            return put, _recorded(stored, None)

        self._change_deployment(stored.tenant, stored.name, change)
        return stored

    def get_deployment(self, tenant: str, name: str) -> Deployment:
        item = self._get(_tenant(tenant), f"D#{name}")
        if item is None:
            raise NotFound(f"deployment '{name}' not found", field="deployment")
        return codec.deployment_from_dict(item)

    def list_deployments(self, tenant: str) -> list[Deployment]:
        return [codec.deployment_from_dict(d) for d in self._query(_tenant(tenant), "D#")]

    def update_deployment(self, deployment: Deployment, *, expected_revision: int) -> Deployment:
        stored = replace(deployment, revision=expected_revision + 1, updated_at=now())

        def change(current: Deployment | None) -> tuple[dict[str, Any], DeploymentChange]:
            if current is None:
                raise NotFound(f"deployment '{deployment.name}' not found", field="deployment")
            if current.revision != expected_revision:
                raise Conflict(
                    f"deployment '{deployment.name}' is at revision {current.revision}, "
                    f"not {expected_revision}",
                    field="revision",
                )
            item = _item(
                _tenant(stored.tenant), f"D#{stored.name}", codec.deployment_to_dict(stored)
            )
            put = {
                "Put": {
                    "TableName": self.table_name,
                    "Item": item,
                    **_condition("#rev = :rev", {"#rev": "revision"}, {":rev": expected_revision}),
                }
            }
            return put, _recorded(stored, current.policy)

        self._change_deployment(stored.tenant, stored.name, change)
        return stored

    def delete_deployment(self, tenant: str, name: str, *, by: str = "") -> None:
        def change(current: Deployment | None) -> tuple[dict[str, Any], DeploymentChange]:
            if current is None:
                raise NotFound(f"deployment '{name}' not found", field="deployment")
            delete = {
                "Delete": {
                    "TableName": self.table_name,
                    "Key": _key(_tenant(tenant), f"D#{name}"),
                    **_condition("#rev = :rev", {"#rev": "revision"}, {":rev": current.revision}),
                }
            }
            gone = DeploymentChange(
                tenant, name, current.revision + 1, now(), by, current.policy, None
            )
            return delete, gone

        self._change_deployment(tenant, name, change)

    def deployment_history(self, tenant: str, name: str) -> list[DeploymentChange]:
        return [codec.change_from_dict(d) for d in self._query(_history_pk(tenant, name), "H#")]

    def _change_deployment(
        self,
        tenant: str,
        name: str,
        change: Callable[[Deployment | None], tuple[dict[str, Any], DeploymentChange]],
    ) -> None:
        """Write a deployment and its history entry at once; `change` decides from the current
        deployment (or None) and raises NotFound/Conflict when the write must not happen."""
        history_pk = _history_pk(tenant, name)
        for _ in _attempts():
            read = self._send(
                self.client.transact_get_items,
                TransactItems=[
                    {
                        "Get": {
                            "TableName": self.table_name,
                            "Key": _key(_tenant(tenant), f"D#{name}"),
                        }
                    },
                    {"Get": {"TableName": self.table_name, "Key": _key(history_pk, "SEQ")}},
                ],
            )
            found, counter = (r.get("Item") for r in read["Responses"])
            current = codec.deployment_from_dict(_unmarshal(found)) if found else None
            seq = int(_unmarshal(counter)["last_seq"]) if counter else 0
            write, entry = change(current)
            counter_write = {
                "TableName": self.table_name,
                "Item": _marshal({"pk": history_pk, "sk": "SEQ", "last_seq": seq + 1}),
                **(
                    _condition("#seq = :seq", {"#seq": "last_seq"}, {":seq": seq})
                    if seq
                    else _absent()
                ),
            }
            entry_write = {
                "TableName": self.table_name,
                "Item": _item(history_pk, f"H#{seq + 1:010d}", codec.change_to_dict(entry)),
                **_absent(),
            }
            try:
                self._send(
                    self.client.transact_write_items,
                    TransactItems=[write, {"Put": counter_write}, {"Put": entry_write}],
                )
                return
            except _Refused:
                continue
        raise _busy()

    # Statistics -----------------------------------------------------------------------
    def merge_stats(
        self,
        tenant: str,
        deployment: str,
        revision: int,
        subject: str,
        sums: dict[str, float],
        maxes: dict[str, float],
    ) -> None:
        key = _key(_history_pk(tenant, deployment), _stats_sk(revision, subject))
        if sums:
            names = {"#subject": "subject"} | {f"#s{i}": _STAT + n for i, n in enumerate(sums)}
            values = {":subject": subject} | {
                f":s{i}": _stat(v) for i, v in enumerate(sums.values())
            }
            adds = ", ".join(f"#s{i} :s{i}" for i in range(len(sums)))
            self._send(
                self.client.update_item,
                TableName=self.table_name,
                Key=key,
                UpdateExpression=f"SET #subject = :subject ADD {adds}",
                ExpressionAttributeNames=names,
                ExpressionAttributeValues=_marshal(values),
            )
        for name, value in maxes.items():
            try:
                self._send(
                    self.client.update_item,
                    TableName=self.table_name,
                    Key=key,
                    UpdateExpression="SET #subject = :subject, #max = :max",
                    **_condition(
                        "attribute_not_exists(#max) OR #max < :max",
                        {"#subject": "subject", "#max": _STAT + name},
                        {":subject": subject, ":max": _stat(value)},
                    ),
                )
            except _Refused:
                continue  # the stored maximum is already at least this large

    def read_stats(
        self, tenant: str, deployment: str, revision: int
    ) -> dict[str, dict[str, float]]:
        return {
            item["subject"]: {
                name.removeprefix(_STAT): float(value)
                for name, value in item.items()
                if name.startswith(_STAT)
            }
            for item in self._query(_history_pk(tenant, deployment), _stats_sk(revision, ""))
        }

    def put_assignment(self, tenant: str, deployment: str, request_id: str, variant: str) -> None:
        at = now()
        record = {"variant": variant, "at": at}
        item = _item(
            _assignment_pk(tenant, deployment, request_id),
            "ASSIGNMENT",
            record,
            expires_at=int(at) + ASSIGNMENT_TTL_S,
        )
        self._send(self.client.put_item, TableName=self.table_name, Item=item)

    def get_assignment(self, tenant: str, deployment: str, request_id: str) -> str | None:
        item = self._get(_assignment_pk(tenant, deployment, request_id), "ASSIGNMENT")
        return str(item["variant"]) if item else None

    # API keys -------------------------------------------------------------------------
    def put_api_key(self, key: ApiKey) -> ApiKey:
        record = codec.key_to_dict(key)
        try:
            self._send(
                self.client.transact_write_items,
                TransactItems=[
                    {
                        "Put": {
                            "TableName": self.table_name,
                            "Item": _item(*keys, record),
                            **_absent(),
                        }
                    }
                    for keys in _key_ids(key.tenant, key.key_id)
                ],
            )
        except _Refused:
            raise Conflict("API key id already exists", field="key_id") from None
        return key

    def get_api_key(self, key_id: str) -> ApiKey | None:
        item = self._get(f"K#{key_id}", "KEY")
        return codec.key_from_dict(item) if item else None

    def list_api_keys(self, tenant: str) -> list[ApiKey]:
        return [codec.key_from_dict(d) for d in self._query(_tenant(tenant), "K#")]

    def revoke_api_key(self, tenant: str, key_id: str) -> ApiKey:
        for _ in _attempts():
            item = self._get(f"K#{key_id}", "KEY")
            if item is None or item["tenant"] != tenant:
                raise NotFound(f"API key '{key_id}' not found", field="key_id")
            key = codec.key_from_dict(item)
            if key.revoked_at is not None:
                return key
            revoked = replace(key, revoked_at=now())
            updates = [
                {
                    "Update": {
                        "TableName": self.table_name,
                        "Key": _key(pk, sk),
                        "UpdateExpression": "SET #at = :at",
                        **_condition(
                            "attribute_exists(pk) AND attribute_not_exists(#at)",
                            {"#at": "revoked_at"},
                            {":at": revoked.revoked_at},
                        ),
                    }
                }
                for pk, sk in _key_ids(tenant, key_id)
            ]
            try:
                self._send(self.client.transact_write_items, TransactItems=updates)
                return revoked
            except _Refused:
                continue
        raise _busy()

    # Batch jobs -----------------------------------------------------------------------
    def create_job(self, job: BatchJob) -> BatchJob:
        item = _item(_tenant(job.tenant), f"J#{job.id}", codec.job_to_dict(job))
        try:
            self._send(self.client.put_item, TableName=self.table_name, Item=item, **_absent())
        except _Refused:
            raise Conflict(f"batch job '{job.id}' already exists", field="id") from None
        return job

    def get_job(self, tenant: str, job_id: str) -> BatchJob:
        item = self._get(_tenant(tenant), f"J#{job_id}")
        if item is None:
            raise NotFound(f"batch job '{job_id}' not found", field="job")
        return codec.job_from_dict(item)

    def list_jobs(self, tenant: str, *, limit: int = 100) -> list[BatchJob]:
        jobs = [codec.job_from_dict(d) for d in self._query(_tenant(tenant), "J#")]
        jobs.sort(key=lambda j: (j.created_at, j.id), reverse=True)
        return jobs[:limit]

    def update_job(
        self, tenant: str, job_id: str, *, status: JobStatus | None = None, **fields: object
    ) -> BatchJob:
        unknown = set(fields) - UPDATABLE
        if unknown:
            raise ValueError(f"cannot update batch job fields {sorted(unknown)}")
        for _ in _attempts():
            current = self.get_job(tenant, job_id)
            target = status or current.status
            check_move(job_id, current.status, target)
            changes = {"status": target, **fields}
            names = {f"#f{i}": name for i, name in enumerate(changes)} | {"#was": "status"}
            values = {f":f{i}": v for i, v in enumerate(changes.values()) if v is not None}
            sets = [f"#f{i} = :f{i}" for i, v in enumerate(changes.values()) if v is not None]
            removes = [f"#f{i}" for i, v in enumerate(changes.values()) if v is None]
            expression = "SET " + ", ".join(sets) + (" REMOVE " + ", ".join(removes) if removes else "")
            try:
                updated = self._send(
                    self.client.update_item,
                    TableName=self.table_name,
                    Key=_key(_tenant(tenant), f"J#{job_id}"),
                    UpdateExpression=expression,
                    ReturnValues="ALL_NEW",
                    **_condition("#was = :was", names, values | {":was": current.status}),
                )
            except _Refused:
                continue  # the status moved meanwhile: decide again from a fresh read
            return codec.job_from_dict(_unmarshal(updated["Attributes"]))
        raise _busy()

    def record_chunk(self, tenant: str, job_id: str, result: ChunkResult) -> bool:
        chunk = _item(_job_pk(tenant, job_id), f"C#{result.index:06d}", result.to_dict())
        counts = {":one": 1, ":in": result.rows_in, ":out": result.rows_out, ":failed": result.rows_failed}
        try:
            self._send(
                self.client.transact_write_items,
                TransactItems=[
                    {"Put": {"TableName": self.table_name, "Item": chunk, **_absent()}},
                    {
                        "Update": {
                            "TableName": self.table_name,
                            "Key": _key(_tenant(tenant), f"J#{job_id}"),
                            "UpdateExpression": "ADD chunks_done :one, rows_in :in, "
                            "rows_out :out, rows_failed :failed",
                            **_condition(
                                "#status = :running", {"#status": "status"},
                                counts | {":running": "RUNNING"},
                            ),
                        }
                    },
                ],
            )  # fmt: skip
        except _Refused:
            return False  # recorded before, or the job is no longer running
        return True

    def list_chunks(self, tenant: str, job_id: str) -> list[ChunkResult]:
        return [ChunkResult.from_dict(d) for d in self._query(_job_pk(tenant, job_id), "C#")]

    # DynamoDB calls -------------------------------------------------------------------
    def _send(self, call: Callable[..., Any], **params: Any) -> Any:
        """Make one call. A write that a concurrent transaction got in the way of is tried
        again; a failed condition raises `_Refused`; other failures become sluice errors."""
        from botocore.exceptions import BotoCoreError, ClientError

        for _ in _attempts():
            try:
                return call(**params)
            except ClientError as exc:
                outcome = _outcome(exc)
                if isinstance(outcome, _Refused):
                    raise outcome from None
                if outcome is None:
                    continue
                raise outcome from exc
            except BotoCoreError as exc:
                raise Unavailable("the registry is unavailable; try again") from exc
        raise _busy()

    def _get(self, pk: str, sk: str) -> dict[str, Any] | None:
        found = self._send(
            self.client.get_item, TableName=self.table_name, Key=_key(pk, sk), ConsistentRead=True
        )
        return _unmarshal(found["Item"]) if "Item" in found else None

    def _query(
        self,
        pk: str,
        prefix: str,
        *,
        newest_first: bool = False,
        limit: int | None = None,
        keys_only: bool = False,
    ) -> Iterator[dict[str, Any]]:
        params: dict[str, Any] = {
            "TableName": self.table_name,
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
            page = self._send(self.client.query, **params)
            for item in page.get("Items", []):
                yield _unmarshal(item)
            if limit is not None or "LastEvaluatedKey" not in page:
                return
            params["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    def _delete_all(self, pk: str, prefix: str) -> None:
        keys = [_key(d["pk"], d["sk"]) for d in self._query(pk, prefix, keys_only=True)]
        for start in range(0, len(keys), _BATCH):
            pending = [{"DeleteRequest": {"Key": k}} for k in keys[start : start + _BATCH]]
            for _ in _attempts():
                done = self._send(
                    self.client.batch_write_item, RequestItems={self.table_name: pending}
                )
                pending = done.get("UnprocessedItems", {}).get(self.table_name, [])
                if not pending:
                    break
            else:
                raise _busy()


class _Refused(Exception):
    """A condition failed. `reasons` holds a transaction's cancellation codes, item by item."""

    def __init__(self, reasons: list[str]) -> None:
        super().__init__("condition failed")
        self.reasons = reasons


def _outcome(exc: ClientError) -> _Refused | SluiceError | None:
    """What a failed call means: a refusal, an error to raise, or None to try again."""
    code = exc.response.get("Error", {}).get("Code", "")
    status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
    if code == "ConditionalCheckFailedException":
        return _Refused([code])
    if code == "TransactionConflictException":
        return None
    if code == "TransactionCanceledException":
        reasons = [r.get("Code", "None") for r in exc.response.get("CancellationReasons", [])]
        failed = set(reasons) - {"None"}
        if "ConditionalCheckFailed" in failed:
            return _Refused(reasons)
        if failed <= {"TransactionConflict"}:
            return None
        code = next(iter(failed))
    if code in _THROTTLED or status >= 500:
        return Unavailable("the registry is unavailable; try again")
    return BackendError("the registry could not complete the request")


def _attempts() -> Iterator[int]:
    """Tries of an optimistic step; each retry waits a little, with jitter, so racers spread out."""
    for attempt in range(_ATTEMPTS):
        if attempt:
            time.sleep(random.uniform(0, min(0.2, 0.005 * 2**attempt)))
        yield attempt


def _busy() -> Unavailable:
    return Unavailable("the registry is busy with concurrent changes; try again")


# Keys ---------------------------------------------------------------------------------
def _tenant(tenant: str) -> str:
    return f"T#{tenant}"


def _versions_pk(tenant: str, model: str) -> str:
    return f"T#{tenant}#M#{model}"


def _version_sk(version: int) -> str:
    return f"V#{version:010d}"


def _history_pk(tenant: str, name: str) -> str:
    return f"T#{tenant}#D#{name}"


def _job_pk(tenant: str, job_id: str) -> str:
    return f"T#{tenant}#J#{job_id}"


def _stats_sk(revision: int, subject: str) -> str:
    return f"S#{revision:010d}#{subject}"


def _assignment_pk(tenant: str, deployment: str, request_id: str) -> str:
    # One partition per request: assignments are written on the request path.
    return f"T#{tenant}#D#{deployment}#R#{request_id}"


def _stat(value: float) -> float:
    # DynamoDB adds numbers exactly, to 38 digits; a float's full repr could run past that.
    return round(float(value), 9)


def _key_ids(tenant: str, key_id: str) -> tuple[tuple[str, str], tuple[str, str]]:
    """The API key item and its listing copy under the tenant."""
    return (f"K#{key_id}", "KEY"), (_tenant(tenant), f"K#{key_id}")


def _key(pk: str, sk: str) -> dict[str, Any]:
    return {"pk": {"S": pk}, "sk": {"S": sk}}


def _absent() -> dict[str, Any]:
    return {"ConditionExpression": "attribute_not_exists(pk)"}


def _condition(
    expression: str, names: dict[str, str] | None = None, values: dict[str, Any] | None = None
) -> dict[str, Any]:
    params: dict[str, Any] = {"ConditionExpression": expression}
    if names:
        params["ExpressionAttributeNames"] = names
    if values:
        params["ExpressionAttributeValues"] = _marshal(values)
    return params


def _recorded(dep: Deployment, old_policy: dict[str, Any] | None) -> DeploymentChange:
    return DeploymentChange(
        dep.tenant, dep.name, dep.revision, dep.updated_at, dep.updated_by, old_policy, dep.policy
    )


# Attribute values ---------------------------------------------------------------------
@lru_cache(maxsize=1)
def _types() -> tuple[TypeSerializer, TypeDeserializer]:
    from boto3.dynamodb.types import TypeDeserializer, TypeSerializer

    return TypeSerializer(), TypeDeserializer()


def _item(pk: str, sk: str, record: dict[str, Any], **extra: Any) -> dict[str, Any]:
    fields = {k: v for k, v in record.items() if v is not None}
    return _marshal(fields | extra | {"pk": pk, "sk": sk})


def _marshal(fields: dict[str, Any]) -> dict[str, Any]:
    serializer, _ = _types()
    return {k: serializer.serialize(_to_dynamo(v)) for k, v in fields.items()}


def _unmarshal(item: dict[str, Any]) -> dict[str, Any]:
    _, deserializer = _types()
    return {k: _from_dynamo(deserializer.deserialize(v)) for k, v in item.items()}


def _to_dynamo(value: Any) -> Any:
    if isinstance(value, float):
        if not math.isfinite(value):
            raise BadRequest("the registry cannot store NaN or infinite numbers")
        return Decimal(repr(value))  # repr is the shortest string that reads back as the same float
    if isinstance(value, dict):
        return {k: _to_dynamo(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_to_dynamo(v) for v in value]
    return value


def _from_dynamo(value: Any) -> Any:
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, dict):
        return {k: _from_dynamo(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_from_dynamo(v) for v in value]
    return value
