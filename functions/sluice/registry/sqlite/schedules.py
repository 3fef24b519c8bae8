"""Batch schedules in SQLite: one JSON document per (tenant, name)."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from sluice.registry.codec import SCHEDULE
from sluice.registry.refusals import check_updatable, no_schedule, schedule_moved, taken
from sluice.registry.sqlite.connection import Part

if TYPE_CHECKING:
    from collections.abc import Mapping

    from sluice.domain.schedules import Schedule


class SqliteSchedules(Part):
    def create_schedule(self, schedule: Schedule) -> Schedule:
        self.added(
            "batch_schedules", schedule.tenant, schedule.name, SCHEDULE.to_json(schedule),
            taken=taken("schedule", schedule.name, field="name"),
        )  # fmt: skip
        return schedule

    def get_schedule(self, tenant: str, name: str) -> Schedule:
        return SCHEDULE.load(self.named("batch_schedules", tenant, name, missing=no_schedule(name)))

    def list_schedules(self, tenant: str) -> list[Schedule]:
        return [SCHEDULE.load(d) for d in self.listed("batch_schedules", tenant)]

    def all_schedules(self) -> list[Schedule]:
        """Every tenant's schedules: what the local scheduler runs (not part of the port;
        on AWS, EventBridge Scheduler keeps the time)."""
        docs = self.db.all("SELECT doc FROM batch_schedules ORDER BY tenant, name")
        return [SCHEDULE.load(d) for d in docs]

    def update_schedule(
        self, tenant: str, name: str, *, expect: Mapping[str, object] | None = None, **fields: object
    ) -> Schedule:
        from sluice.domain.schedules import SCHEDULE_UPDATABLE  # where a schedule is changed

        check_updatable("schedule", fields, SCHEDULE_UPDATABLE)
        check_updatable("schedule", expect or {}, SCHEDULE_UPDATABLE)
        with self.db.tx() as db:
            row = db.execute(
                "SELECT doc FROM batch_schedules WHERE tenant = ? AND name = ?", (tenant, name)
            ).fetchone()
            if row is None:
                raise no_schedule(name)
            stored = SCHEDULE.from_json(row[0])
            if expect and any(getattr(stored, field) != value for field, value in expect.items()):
                raise schedule_moved(name, expect)
            updated = replace(stored, **fields)  # type: ignore[arg-type]
            db.execute(
                "UPDATE batch_schedules SET doc = ? WHERE tenant = ? AND name = ?",
                (SCHEDULE.to_json(updated), tenant, name),
            )
        return updated

    def delete_schedule(self, tenant: str, name: str) -> None:
        with self.db.tx() as db:
            gone = db.execute("DELETE FROM batch_schedules WHERE tenant = ? AND name = ?", (tenant, name))
            if gone.rowcount == 0:
                raise no_schedule(name)
