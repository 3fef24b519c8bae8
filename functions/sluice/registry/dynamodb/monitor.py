"""Monitoring baselines and profiles in DynamoDB, in the deployment's partition: the baseline
one item (`doc`, JSON), each profile written an item of its own (a process's flush: no
read-modify-write between containers), merged when read. Profiles carry `expires_at`
(`PROFILE_TTL_S` after they are written) for the table's time to live. Ground truth's kept
predictions live in their request's partition (found by id, many at once with BatchGetItem),
each labelled row claimed there with a conditional put; labelled counts are appended to the
deployment's partition like profiles."""

from __future__ import annotations

import json
import uuid
from typing import Any

from sluice.domain import now
from sluice.domain.errors import PayloadTooLarge
from sluice.registry.dynamodb import layout
from sluice.registry.dynamodb.table import (
    Part,
    Refused,
    earlier_or_none,
    item,
    key,
    unmarshal,
)

PROFILE_TTL_S = 35 * 24 * 3600
MAX_DOC_BYTES = 380 * 1024  # an item is at most 400 KB, keys and names included
PROFILE_ADVICE = ": profile fewer columns"


def _doc(data: dict[str, Any], field: str, advice: str = "") -> str:
    doc = json.dumps(data)
    if len(doc) > MAX_DOC_BYTES:
        raise PayloadTooLarge(f"the {field} is {len(doc)} bytes; DynamoDB keeps at most {MAX_DOC_BYTES} in one item{advice}", field=field)
    return doc


class DynamoMonitor(Part):
    def put_baseline(self, tenant: str, deployment: str, baseline: dict[str, Any]) -> None:
        record = item(layout.deployment_pk(tenant, deployment), layout.BASELINE, {"doc": _doc(baseline, "baseline", PROFILE_ADVICE)})
        self.table.send("put_item", TableName=self.table.name, Item=record)

    def get_baseline(self, tenant: str, deployment: str) -> dict[str, Any] | None:
        found = self.table.get(layout.deployment_pk(tenant, deployment), layout.BASELINE)
        return json.loads(found["doc"]) if found else None

    def delete_baseline(self, tenant: str, deployment: str) -> None:
        self.table.send("delete_item", TableName=self.table.name, Key=key(layout.deployment_pk(tenant, deployment), layout.BASELINE))

    def add_profile(self, tenant: str, deployment: str, revision: int, variant: str, window: int, profile: dict[str, Any]) -> None:
        record = item(
            layout.deployment_pk(tenant, deployment), layout.profile_sk(revision, window, uuid.uuid4().hex),
            {"variant": variant, "window": window, "doc": _doc(profile, "profile", PROFILE_ADVICE)}, expires_at=int(now()) + PROFILE_TTL_S,
        )  # fmt: skip
        self.table.send("put_item", TableName=self.table.name, Item=record)

    def read_profiles(self, tenant: str, deployment: str, revision: int, *, since: int = 0) -> list[tuple[str, int, dict[str, Any]]]:
        found = self.table.query(layout.deployment_pk(tenant, deployment), layout.profile_sk(revision))
        return [(str(r["variant"]), int(r["window"]), json.loads(r["doc"])) for r in found if int(r["window"]) >= since]

    def has_baseline(self, tenant: str, deployment: str) -> bool:
        found = self.table.send(
            "get_item", TableName=self.table.name, Key=key(layout.deployment_pk(tenant, deployment), layout.BASELINE),
            ProjectionExpression="pk", ConsistentRead=True,
        )  # fmt: skip
        return "Item" in found

    def monitored(self) -> list[tuple[str, str]]:
        """A scan for baseline items that reads their keys alone (what the scheduled check's
        IAM policy allows); its cost grows with the table: once a window."""
        params: dict[str, Any] = {
            "TableName": self.table.name, "FilterExpression": "sk = :b", "ExpressionAttributeValues": {":b": {"S": layout.BASELINE}},
            "ProjectionExpression": "pk, sk", "Select": "SPECIFIC_ATTRIBUTES",
        }  # fmt: skip

        def name_of(pk: str, sk: str) -> tuple[str, str] | None:
            tenant, marker, name = pk.removeprefix("T#").partition("#D#")
            return (tenant, name) if marker and "#" not in tenant and name else None

        return self.scan_names(params, name_of)

    # Ground truth: a kept prediction is an item of the request's partition (as a bandit
    # assignment is); labelled counts are appended to the deployment's, like profiles.
    def keep_predictions(self, tenant: str, deployment: str, records: list[dict[str, Any]], *, expires_at: float) -> list[str]:
        # One PutItem each: the API's tenant role has no BatchWriteItem (it can delete).
        too_large: list[str] = []
        for record in records:
            pk = layout.assignment_pk(tenant, deployment, record["request_id"])
            try:
                doc = _doc(record, "kept prediction")
                self.table.send("put_item", TableName=self.table.name, Item=item(pk, layout.PREDICTION, {"doc": doc}, expires_at=int(expires_at)))
            except PayloadTooLarge:  # never storable: the others are written all the same
                too_large.append(record["request_id"])
        return too_large

    def find_predictions(self, tenant: str, deployment: str, request_ids: list[str], *, now: float) -> dict[str, dict[str, Any]]:
        ids = list(dict.fromkeys(request_ids))
        keys = {layout.assignment_pk(tenant, deployment, rid): rid for rid in ids}
        found: dict[str, dict[str, Any]] = {}
        for raw in self.table.get_many([key(pk, layout.PREDICTION) for pk in keys], ConsistentRead=True):
            record = unmarshal(raw)
            if int(record.get("expires_at", 0)) > now:  # the table's TTL removes items late
                found[keys[record["pk"]]] = json.loads(record["doc"])
        return found

    def claim_labels(self, tenant: str, deployment: str, rows: list[tuple[str, int]], *, expires_at: float, made: int) -> list[bool]:
        claimed: list[bool] = []
        try:
            for request_id, row in rows:
                record = item(layout.assignment_pk(tenant, deployment, request_id), layout.label_sk(row), {"made": made}, expires_at=int(expires_at))
                try:
                    self.table.send("put_item", TableName=self.table.name, Item=record, **earlier_or_none(made))
                except Refused:
                    claimed.append(False)
                else:
                    claimed.append(True)
        except Exception:  # throttled, unreachable: the rows claimed so far are let go, as SQLite's transaction would
            self.release_labels(tenant, deployment, [r for r, first in zip(rows, claimed, strict=False) if first])
            raise
        return claimed

    def release_labels(self, tenant: str, deployment: str, rows: list[tuple[str, int]]) -> None:
        for request_id, row in rows:
            target = key(layout.assignment_pk(tenant, deployment, request_id), layout.label_sk(row))
            self.table.send("delete_item", TableName=self.table.name, Key=target)

    def add_outcomes(self, tenant: str, deployment: str, revision: int, window: int, outcomes: dict[str, Any]) -> None:
        record = item(
            layout.deployment_pk(tenant, deployment), layout.outcomes_sk(revision, window, uuid.uuid4().hex),
            {"window": window, "doc": _doc(outcomes, "labels")}, expires_at=int(now()) + PROFILE_TTL_S,
        )  # fmt: skip
        self.table.send("put_item", TableName=self.table.name, Item=record)

    def read_outcomes(self, tenant: str, deployment: str, revision: int) -> list[tuple[int, dict[str, Any]]]:
        found = self.table.query(layout.deployment_pk(tenant, deployment), layout.outcomes_sk(revision))
        return [(int(r["window"]), json.loads(r["doc"])) for r in found]
