"""Messages per WebSocket connection and window, in SQLite: one row a window, counted up to
its limit in one statement. Expired rows are removed every so many new windows."""

from __future__ import annotations

import itertools
import time

from sluice.registry.sqlite.connection import Part

PURGE_EVERY = 256  # counted messages between sweeps of expired windows


class SqliteConnections(Part):
    _counts = itertools.count()

    def count_message(self, tenant: str, connection: str, window: str, *, limit: int, expires_at: float) -> bool:
        with self.db.tx() as db:
            if next(self._counts) % PURGE_EVERY == 0:
                db.execute("DELETE FROM connection_messages WHERE expires_at <= ?", (time.time(),))
            counted = db.execute(
                "INSERT INTO connection_messages VALUES (?, ?, ?, 1, ?) "
                "ON CONFLICT (tenant, connection, win) DO UPDATE SET n = n + 1 WHERE n < ?",
                (tenant, connection, window, expires_at, limit),
            ).rowcount
        return counted == 1 and limit > 0
