"""Statistics and bandit assignments in SQLite: one row per counter, merged with an upsert
that adds (sums) or keeps the larger value (maxima)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sluice.domain import now
from sluice.domain.stat_numbers import FLOAT64
from sluice.registry.codec import assigned_variants, variants_assigned
from sluice.registry.sqlite.connection import Part

if TYPE_CHECKING:
    from collections.abc import Sequence


class SqliteStats(Part):
    stat_numbers = FLOAT64  # what the recorder keeps every statistic within (REAL, NOT NULL)

    def merge_stats(
        self, tenant: str, deployment: str, revision: int, subject: str,
        sums: dict[str, float], maxes: dict[str, float],
    ) -> None:  # fmt: skip
        key = (tenant, deployment, revision, subject)
        with self.db.tx() as db:
            db.executemany(
                "INSERT INTO stats VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT "
                "(tenant, deployment, revision, subject, name) DO UPDATE SET value = value + excluded.value",
                [(*key, name, value) for name, value in sums.items()],
            )
            db.executemany(
                "INSERT INTO stats VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT "
                "(tenant, deployment, revision, subject, name) DO UPDATE SET value = MAX(value, excluded.value)",
                [(*key, name, value) for name, value in maxes.items()],
            )

    def read_stats(self, tenant: str, deployment: str, revision: int) -> dict[str, dict[str, float]]:
        rows = self.db.conn().execute(
            "SELECT subject, name, value FROM stats WHERE tenant = ? AND deployment = ? AND revision = ?",
            (tenant, deployment, revision),
        ).fetchall()
        out: dict[str, dict[str, float]] = {}
        for subject, name, value in rows:
            out.setdefault(subject, {})[name] = value
        return out

    def put_assignment(self, tenant: str, deployment: str, request_id: str, variants: Sequence[str], *, revision: int) -> None:
        with self.db.tx() as db:
            db.execute(
                "INSERT OR REPLACE INTO assignments (tenant, deployment, request_id, variant, at, revision) VALUES (?, ?, ?, ?, ?, ?)",
                (tenant, deployment, request_id, assigned_variants(variants), now(), revision),
            )

    def claim_reward(self, tenant: str, deployment: str, request_id: str, *, made: int) -> bool:
        with self.db.tx() as db:
            done = db.execute(
                "INSERT INTO rewards (tenant, deployment, request_id, at, made) VALUES (?, ?, ?, ?, ?) "
                "ON CONFLICT (tenant, deployment, request_id) DO UPDATE SET at = excluded.at, made = excluded.made "
                "WHERE rewards.made < excluded.made",  # an earlier deployment's claim (NULL: unknown, kept)
                (tenant, deployment, request_id, now(), made),
            )
            return done.rowcount == 1

    def get_assignment(self, tenant: str, deployment: str, request_id: str) -> tuple[tuple[str, ...], int | None] | None:
        row = self.db.conn().execute(
            "SELECT variant, revision FROM assignments WHERE tenant = ? AND deployment = ? AND request_id = ?",
            (tenant, deployment, request_id),
        ).fetchone()
        return (variants_assigned(row[0]), row[1]) if row else None
