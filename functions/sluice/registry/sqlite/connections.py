"""Messages per WebSocket connection and window, in SQLite: one row a window, every window of
a message tested, then all counted, in one transaction. Expired rows are removed every so many
messages."""

from __future__ import annotations

import itertools
import time
from typing import TYPE_CHECKING

from sluice.registry.sqlite.connection import Part

if TYPE_CHECKING:
    from collections.abc import Sequence

    from sluice.registry.ports import MessageWindow

PURGE_EVERY = 256  # counted messages between sweeps of expired windows


class SqliteConnections(Part):
    _counts = itertools.count()

    def count_message(self, tenant: str, connection: str, windows: Sequence[MessageWindow]) -> int | None:
        with self.db.tx() as db:
            if next(self._counts) % PURGE_EVERY == 0:
                db.execute("DELETE FROM connection_messages WHERE expires_at <= ?", (time.time(),))
            for index, window in enumerate(windows):
                found = db.execute(
                    "SELECT n FROM connection_messages WHERE tenant = ? AND connection = ? AND win = ?",
                    (tenant, connection, window.name),
                ).fetchone()
                if (found[0] if found else 0) >= window.limit:
                    return index
            db.executemany(
                "INSERT INTO connection_messages VALUES (?, ?, ?, 1, ?) ON CONFLICT (tenant, connection, win) DO UPDATE SET n = n + 1",
                [(tenant, connection, w.name, w.expires_at) for w in windows],
            )
        return None
