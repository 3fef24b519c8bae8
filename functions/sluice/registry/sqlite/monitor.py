"""Monitoring baselines and profiles in SQLite: a baseline document per deployment, and one
row per profile written (merged when read)."""

from __future__ import annotations

import json
from typing import Any

from sluice.registry.sqlite.connection import Part


class SqliteMonitor(Part):
    def put_baseline(self, tenant: str, deployment: str, baseline: dict[str, Any]) -> None:
        with self.db.tx() as db:
            db.execute("INSERT OR REPLACE INTO monitor_baselines VALUES (?, ?, ?)", (tenant, deployment, json.dumps(baseline)))

    def get_baseline(self, tenant: str, deployment: str) -> dict[str, Any] | None:
        return self.db.one("SELECT doc FROM monitor_baselines WHERE tenant = ? AND deployment = ?", tenant, deployment)

    def add_profile(self, tenant: str, deployment: str, revision: int, variant: str, window: int, profile: dict[str, Any]) -> None:
        with self.db.tx() as db:
            db.execute(
                "INSERT INTO monitor_profiles VALUES (?, ?, ?, ?, ?, ?)",
                (tenant, deployment, revision, window, variant, json.dumps(profile)),
            )

    def read_profiles(self, tenant: str, deployment: str, revision: int, *, since: int = 0) -> list[tuple[str, int, dict[str, Any]]]:
        rows = self.db.conn().execute(
            "SELECT variant, win, doc FROM monitor_profiles WHERE tenant = ? AND deployment = ? AND revision = ? AND win >= ? "
            "ORDER BY win, rowid",
            (tenant, deployment, revision, since),
        ).fetchall()
        return [(variant, int(win), json.loads(doc)) for variant, win, doc in rows]
