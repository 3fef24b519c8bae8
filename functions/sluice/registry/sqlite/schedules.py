"""Batch schedules in SQLite: one JSON document per (tenant, name)."""

from __future__ import annotations

import sqlite3
from dataclasses import replace
from typing import TYPE_CHECKING

from sluice.domain.errors import Conflict, NotFound
from sluice.domain.schedules import SCHEDULE_UPDATABLE
from sluice.registry.codec import SCHEDULE
from sluice.registry.sqlite.connection import Part

if TYPE_CHECKING:
    from sluice.domain.schedules import Schedule


def _missing(name: str) -> NotFound:
    return NotFound(f"schedule '{name}' not found", field="schedule")


class SqliteSchedules(Part):
    def create_schedule(self, schedule: Schedule) -> Schedule:
        try:
            with self.db.tx() as db:
                db.execute(
                    "INSERT INTO batch_schedules (tenant, name, doc) VALUES (?, ?, ?)",
                    (schedule.tenant, schedule.name, SCHEDULE.to_json(schedule)),
                )
        except sqlite3.IntegrityError:
            raise Conflict(f"schedule '{schedule.name}' already exists", field="name") from None
        return schedule

    def get_schedule(self, tenant: str, name: str) -> Schedule:
        doc = self.db.one("SELECT doc FROM batch_schedules WHERE tenant = ? AND name = ?", tenant, name)
        if doc is None:
            raise _missing(name)
        return SCHEDULE.load(doc)

    def list_schedules(self, tenant: str) -> list[Schedule]:
        docs = self.db.all("SELECT doc FROM batch_schedules WHERE tenant = ? ORDER BY name", tenant)
        return [SCHEDULE.load(d) for d in docs]

    def all_schedules(self) -> list[Schedule]:
        """Every tenant's schedules: what the local scheduler runs (not part of the port;
        on AWS, EventBridge Scheduler keeps the time)."""
        docs = self.db.all("SELECT doc FROM batch_schedules ORDER BY tenant, name")
        return [SCHEDULE.load(d) for d in docs]

    def update_schedule(self, tenant: str, name: str, **fields: object) -> Schedule:
        unknown = set(fields) - SCHEDULE_UPDATABLE
        if unknown:
            raise ValueError(f"cannot update schedule fields {sorted(unknown)}")
        with self.db.tx() as db:
            row = db.execute(
                "SELECT doc FROM batch_schedules WHERE tenant = ? AND name = ?", (tenant, name)
            ).fetchone()
            if row is None:
                raise _missing(name)
            updated = replace(SCHEDULE.from_json(row[0]), **fields)  # type: ignore[arg-type]
            db.execute(
                "UPDATE batch_schedules SET doc = ? WHERE tenant = ? AND name = ?",
                (SCHEDULE.to_json(updated), tenant, name),
            )
        return updated

    def delete_schedule(self, tenant: str, name: str) -> None:
        with self.db.tx() as db:
            gone = db.execute("DELETE FROM batch_schedules WHERE tenant = ? AND name = ?", (tenant, name))
            if gone.rowcount == 0:
                raise _missing(name)
