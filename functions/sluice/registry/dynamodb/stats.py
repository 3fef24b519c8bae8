"""Statistics and bandit assignments in DynamoDB.

Statistics merge with an atomic ADD for the sums and, per maximum, a SET conditioned on the
stored value being smaller: many containers merge into one item without reading it.
Assignments carry `expires_at` (epoch seconds, `ASSIGNMENT_TTL_S` after they are made) for the
table's time-to-live: feedback comes within days, and one item per bandit request would
otherwise pile up forever.
"""

from __future__ import annotations

from decimal import Decimal
from typing import TYPE_CHECKING

from sluice.domain import now
from sluice.domain.stat_numbers import DYNAMODB
from sluice.registry.codec import assigned_variants, variants_assigned
from sluice.registry.dynamodb import layout
from sluice.registry.dynamodb.table import (
    Part,
    Refused,
    condition,
    earlier_or_none,
    item,
    key,
    marshal,
)

if TYPE_CHECKING:
    from collections.abc import Sequence

ASSIGNMENT_TTL_S = 30 * 24 * 3600
_STAT = "stat:"


def _stat(value: float) -> Decimal:
    """`value` as a statistic is added: to 9 decimals (DynamoDB adds numbers exactly, to 38
    digits; a float's full repr could run past that), spelled with a point (`6.0E-8`, not
    `6E-8`: the same number, which an emulator's ADD that reads a number with no point as an
    integer also adds)."""
    number = Decimal(repr(round(float(value), 9)))
    text = str(number)
    return number if "." in text or "E" not in text else Decimal(f"{number:.1E}")


class DynamoStats(Part):
    stat_numbers = DYNAMODB  # what the recorder keeps every statistic within

    def merge_stats(
        self, tenant: str, deployment: str, revision: int, subject: str,
        sums: dict[str, float], maxes: dict[str, float],
    ) -> None:  # fmt: skip
        stats_key = key(layout.deployment_pk(tenant, deployment), layout.stats_sk(revision, subject))
        if sums:
            names = {"#subject": "subject"} | {f"#s{i}": _STAT + n for i, n in enumerate(sums)}
            values = {":subject": subject} | {f":s{i}": _stat(v) for i, v in enumerate(sums.values())}
            adds = ", ".join(f"#s{i} :s{i}" for i in range(len(sums)))
            self.table.send(
                "update_item",
                TableName=self.table.name,
                Key=stats_key,
                UpdateExpression=f"SET #subject = :subject ADD {adds}",
                ExpressionAttributeNames=names,
                ExpressionAttributeValues=marshal(values),
            )
        for name, value in maxes.items():
            try:
                self.table.send(
                    "update_item",
                    TableName=self.table.name,
                    Key=stats_key,
                    UpdateExpression="SET #subject = :subject, #max = :max",
                    **condition(
                        "attribute_not_exists(#max) OR #max < :max",
                        {"#subject": "subject", "#max": _STAT + name},
                        {":subject": subject, ":max": _stat(value)},
                    ),
                )
            except Refused:
                continue  # the stored maximum is already at least this large

    def read_stats(self, tenant: str, deployment: str, revision: int) -> dict[str, dict[str, float]]:
        found = self.table.query(layout.deployment_pk(tenant, deployment), layout.stats_sk(revision, ""))
        return {
            record["subject"]: {
                name.removeprefix(_STAT): float(value)
                for name, value in record.items()
                if name.startswith(_STAT)
            }
            for record in found
        }

    def put_assignment(self, tenant: str, deployment: str, request_id: str, variants: Sequence[str], *, revision: int) -> None:
        at = now()
        record = item(
            layout.assignment_pk(tenant, deployment, request_id), layout.ASSIGNMENT,
            {"variant": assigned_variants(variants), "at": at, "revision": revision}, expires_at=int(at) + ASSIGNMENT_TTL_S,
        )  # fmt: skip
        self.table.send("put_item", TableName=self.table.name, Item=record)

    def claim_reward(self, tenant: str, deployment: str, request_id: str, *, made: int) -> bool:
        at = now()
        record = item(
            layout.assignment_pk(tenant, deployment, request_id), layout.REWARD,
            {"at": at, "made": made}, expires_at=int(at) + ASSIGNMENT_TTL_S,
        )  # fmt: skip
        try:
            self.table.send("put_item", TableName=self.table.name, Item=record, **earlier_or_none(made))
        except Refused:
            return False
        return True

    def get_assignment(self, tenant: str, deployment: str, request_id: str) -> tuple[tuple[str, ...], int | None] | None:
        found = self.table.get(layout.assignment_pk(tenant, deployment, request_id), layout.ASSIGNMENT)
        if found is None:
            return None
        return variants_assigned(str(found["variant"])), (int(found["revision"]) if "revision" in found else None)
