"""Monitoring baselines and profiles in DynamoDB, in the deployment's partition: the baseline
one item (`doc`, JSON), each profile written an item of its own (a process's flush: no
read-modify-write between containers), merged when read. Profiles carry `expires_at`
(`PROFILE_TTL_S` after they are written) for the table's time to live."""

from __future__ import annotations

import json
import uuid
from typing import Any

from sluice.domain import now
from sluice.domain.errors import PayloadTooLarge
from sluice.registry.dynamodb import layout
from sluice.registry.dynamodb.table import Part, item

PROFILE_TTL_S = 35 * 24 * 3600
MAX_DOC_BYTES = 380 * 1024  # an item is at most 400 KB, keys and names included


def _doc(data: dict[str, Any], field: str) -> str:
    doc = json.dumps(data)
    if len(doc) > MAX_DOC_BYTES:
        raise PayloadTooLarge(f"the {field} is {len(doc)} bytes; DynamoDB keeps at most {MAX_DOC_BYTES} in one item: profile fewer columns", field=field)
    return doc


class DynamoMonitor(Part):
    def put_baseline(self, tenant: str, deployment: str, baseline: dict[str, Any]) -> None:
        record = item(layout.deployment_pk(tenant, deployment), layout.BASELINE, {"doc": _doc(baseline, "baseline")})
        self.table.send("put_item", TableName=self.table.name, Item=record)

    def get_baseline(self, tenant: str, deployment: str) -> dict[str, Any] | None:
        found = self.table.get(layout.deployment_pk(tenant, deployment), layout.BASELINE)
        return json.loads(found["doc"]) if found else None

    def add_profile(self, tenant: str, deployment: str, revision: int, variant: str, window: int, profile: dict[str, Any]) -> None:
        record = item(
            layout.deployment_pk(tenant, deployment), layout.profile_sk(revision, window, uuid.uuid4().hex),
            {"variant": variant, "window": window, "doc": _doc(profile, "profile")}, expires_at=int(now()) + PROFILE_TTL_S,
        )  # fmt: skip
        self.table.send("put_item", TableName=self.table.name, Item=record)

    def read_profiles(self, tenant: str, deployment: str, revision: int, *, since: int = 0) -> list[tuple[str, int, dict[str, Any]]]:
        found = self.table.query(layout.deployment_pk(tenant, deployment), layout.profile_sk(revision))
        return [(str(r["variant"]), int(r["window"]), json.loads(r["doc"])) for r in found if int(r["window"]) >= since]
