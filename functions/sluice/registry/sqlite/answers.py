"""The prediction cache's shared tier in SQLite: one row per kept answer, with its expiry.
Expired rows are never read, and every so many writes remove them."""

from __future__ import annotations

import itertools
import time

from sluice.registry.sqlite.connection import Part

PURGE_EVERY = 256  # writes between sweeps of expired rows


class SqliteAnswers(Part):
    _writes = itertools.count()

    def get_cached_answer(self, tenant: str, deployment: str, key: str, *, now: float) -> bytes | None:
        row = self.db.conn().execute(
            "SELECT body FROM cached_answers WHERE tenant = ? AND deployment = ? AND key = ? AND expires_at > ?",
            (tenant, deployment, key, now),
        ).fetchone()
        return bytes(row[0]) if row else None

    def put_cached_answer(self, tenant: str, deployment: str, key: str, body: bytes, *, expires_at: float) -> None:
        with self.db.tx() as db:
            if next(self._writes) % PURGE_EVERY == 0:
                db.execute("DELETE FROM cached_answers WHERE expires_at <= ?", (time.time(),))
            db.execute(
                "INSERT OR REPLACE INTO cached_answers VALUES (?, ?, ?, ?, ?)", (tenant, deployment, key, expires_at, body)
            )
