"""Monitoring baselines and profiles in SQLite: a baseline document per deployment, and one
row per profile written (merged when read); for ground truth, one row per kept prediction
(by request id, deleted once expired), one per labelled row claimed, and one per record of
labelled counts (merged when read)."""

from __future__ import annotations

import json
from typing import Any

from sluice.domain import now
from sluice.registry.sqlite.connection import Part

IN_CHUNK = 500  # request ids per `IN (...)` (SQLite allows 32,766 variables; no need to near it)


class SqliteMonitor(Part):
    def put_baseline(self, tenant: str, deployment: str, baseline: dict[str, Any]) -> None:
        with self.db.tx() as db:
            db.execute("INSERT OR REPLACE INTO monitor_baselines VALUES (?, ?, ?)", (tenant, deployment, json.dumps(baseline)))

    def get_baseline(self, tenant: str, deployment: str) -> dict[str, Any] | None:
        return self.db.one("SELECT doc FROM monitor_baselines WHERE tenant = ? AND deployment = ?", tenant, deployment)

    def delete_baseline(self, tenant: str, deployment: str) -> None:
        with self.db.tx() as db:
            db.execute("DELETE FROM monitor_baselines WHERE tenant = ? AND deployment = ?", (tenant, deployment))

    def has_baseline(self, tenant: str, deployment: str) -> bool:
        sql = "SELECT 1 FROM monitor_baselines WHERE tenant = ? AND deployment = ?"
        return self.db.conn().execute(sql, (tenant, deployment)).fetchone() is not None

    def monitored(self) -> list[tuple[str, str]]:
        rows = self.db.conn().execute("SELECT tenant, deployment FROM monitor_baselines ORDER BY tenant, deployment").fetchall()
        return [(str(r[0]), str(r[1])) for r in rows]

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

    # Ground truth -------------------------------------------------------------------------------
    def keep_predictions(self, tenant: str, deployment: str, records: list[dict[str, Any]], *, expires_at: float) -> list[str]:
        rows = [(tenant, deployment, r["request_id"], expires_at, json.dumps(r)) for r in records]
        with self.db.tx() as db:
            db.execute("DELETE FROM monitor_predictions WHERE expires_at < ?", (now(),))  # the expired, by the index
            db.executemany("INSERT OR REPLACE INTO monitor_predictions VALUES (?, ?, ?, ?, ?)", rows)
        return []  # a row holds any size

    def find_predictions(self, tenant: str, deployment: str, request_ids: list[str], *, now: float) -> dict[str, dict[str, Any]]:
        found: dict[str, dict[str, Any]] = {}
        ids = list(dict.fromkeys(request_ids))
        for start in range(0, len(ids), IN_CHUNK):
            part = ids[start : start + IN_CHUNK]
            marks = ",".join("?" * len(part))
            rows = self.db.conn().execute(
                f"SELECT request_id, doc FROM monitor_predictions WHERE tenant = ? AND deployment = ? AND expires_at > ? AND request_id IN ({marks})",
                (tenant, deployment, now, *part),
            ).fetchall()
            found.update((rid, json.loads(doc)) for rid, doc in rows)
        return found

    def claim_labels(self, tenant: str, deployment: str, rows: list[tuple[str, int]], *, expires_at: float, made: int) -> list[bool]:
        claimed = []
        with self.db.tx() as db:
            db.execute("DELETE FROM monitor_labels WHERE expires_at < ?", (now(),))
            for request_id, row in rows:
                done = db.execute(
                    "INSERT INTO monitor_labels (tenant, deployment, request_id, row, expires_at, made) VALUES (?, ?, ?, ?, ?, ?) "
                    "ON CONFLICT (tenant, deployment, request_id, row) DO UPDATE SET expires_at = excluded.expires_at, made = excluded.made "
                    "WHERE monitor_labels.made < excluded.made",  # an earlier deployment's claim (NULL: unknown, kept)
                    (tenant, deployment, request_id, row, expires_at, made),
                )
                claimed.append(done.rowcount == 1)
        return claimed

    def release_labels(self, tenant: str, deployment: str, rows: list[tuple[str, int]]) -> None:
        with self.db.tx() as db:
            db.executemany(
                "DELETE FROM monitor_labels WHERE tenant = ? AND deployment = ? AND request_id = ? AND row = ?",
                [(tenant, deployment, request_id, row) for request_id, row in rows],
            )

    def add_outcomes(self, tenant: str, deployment: str, revision: int, window: int, outcomes: dict[str, Any]) -> None:
        with self.db.tx() as db:
            db.execute("INSERT INTO monitor_outcomes VALUES (?, ?, ?, ?, ?)", (tenant, deployment, revision, window, json.dumps(outcomes)))

    def read_outcomes(self, tenant: str, deployment: str, revision: int) -> list[tuple[int, dict[str, Any]]]:
        rows = self.db.conn().execute(
            "SELECT win, doc FROM monitor_outcomes WHERE tenant = ? AND deployment = ? AND revision = ? ORDER BY win, rowid",
            (tenant, deployment, revision),
        ).fetchall()
        return [(int(win), json.loads(doc)) for win, doc in rows]
