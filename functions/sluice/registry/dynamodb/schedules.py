"""Batch schedules in DynamoDB: one item per schedule in the tenant's partition
(`pk=T#<tenant>`, `sk=SC#<name>`). Created only if absent; an update sets the fields it is
given, only while the item exists (a schedule deleted meanwhile stays deleted)."""

from __future__ import annotations

from dataclasses import MISSING
from dataclasses import fields as dataclass_fields
from typing import TYPE_CHECKING

from sluice.domain.schedules import SCHEDULE_UPDATABLE, Schedule
from sluice.registry.codec import SCHEDULE
from sluice.registry.dynamodb import layout
from sluice.registry.dynamodb.table import (
    Part,
    Refused,
    condition,
    item,
    key,
    set_fields,
    unmarshal,
)
from sluice.registry.refusals import check_updatable, no_schedule, schedule_moved, taken

if TYPE_CHECKING:
    from collections.abc import Mapping


class DynamoSchedules(Part):
    def create_schedule(self, schedule: Schedule) -> Schedule:
        self.put_new(self._schedule_item(schedule), taken=taken("schedule", schedule.name, field="name"))
        return schedule

    def get_schedule(self, tenant: str, name: str) -> Schedule:
        return SCHEDULE.load(self.found(layout.tenant(tenant), layout.schedule_sk(name), missing=no_schedule(name)))

    def list_schedules(self, tenant: str) -> list[Schedule]:
        return [SCHEDULE.load(d) for d in self.table.query(layout.tenant(tenant), layout.SCHEDULE)]

    def update_schedule(
        self, tenant: str, name: str, *, expect: Mapping[str, object] | None = None, **fields: object
    ) -> Schedule:
        """Only the fields given are written (as SQLite's transaction changes them): the
        scheduler recording a run never puts back a state a tenant's pause changed meanwhile.
        `expect`: only while each field holds the value read (None, or a record's default that
        an older item leaves out: absent), else StaleRead."""
        check_updatable("schedule", fields, SCHEDULE_UPDATABLE)
        check_updatable("schedule", expect or {}, SCHEDULE_UPDATABLE)
        if not fields:
            return self.get_schedule(tenant, name)
        expression, names, values = set_fields(fields)
        held = ["attribute_exists(pk)"]
        for i, (field, value) in enumerate((expect or {}).items()):
            names[f"#e{i}"] = field
            absent = f"attribute_not_exists(#e{i})"
            if value is None:
                held.append(absent)
                continue
            values[f":e{i}"] = value
            held.append(f"(#e{i} = :e{i} OR {absent})" if value == _default(field) else f"#e{i} = :e{i}")
        try:
            updated = self.table.send(
                "update_item", TableName=self.table.name, Key=key(layout.tenant(tenant), layout.schedule_sk(name)),
                UpdateExpression=expression, ReturnValues="ALL_NEW",
                **condition(" AND ".join(held), names, values),
            )  # fmt: skip
        except Refused:
            self.get_schedule(tenant, name)  # NotFound: no such schedule
            raise schedule_moved(name, expect or {}) from None
        return SCHEDULE.load(unmarshal(updated["Attributes"]))

    def delete_schedule(self, tenant: str, name: str) -> None:
        self.delete_found(layout.tenant(tenant), layout.schedule_sk(name), missing=no_schedule(name))

    def _schedule_item(self, schedule: Schedule) -> dict[str, object]:
        return item(layout.tenant(schedule.tenant), layout.schedule_sk(schedule.name), SCHEDULE.dump(schedule))


def _default(field: str) -> object:
    """A schedule field's default: what an item written before the field was kept means."""
    return next((f.default for f in dataclass_fields(Schedule) if f.name == field), MISSING)
