"""A real SQLite registry made full or read-only, by SQLite's own limits on its connections:
`max_page_count` (the file may grow no further: SQLite answers `database or disk is full`,
as on a full disk) and `query_only` (`attempt to write a readonly database`, as for a file
or folder it may not write; root ignores a chmod, SQLite's limit holds for everyone)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import sqlite3

    from sluice.registry.sqlite import SqliteRegistry

NO_LIMIT = 1_073_741_823  # SQLite's default largest page count


class RegistryLimits:
    """Every connection the registry hands out, in any thread, gets the limits of the moment
    before it is used: those in force now, or those lifted."""

    def __init__(self, registry: SqliteRegistry) -> None:
        self.db = registry.db
        self._conn = registry.db.conn
        self.pragmas: list[str] = []
        self.db.conn = self._limited  # type: ignore[method-assign]

    def _limited(self) -> sqlite3.Connection:
        conn = self._conn()
        for pragma in self.pragmas:
            conn.execute(f"PRAGMA {pragma}")
        return conn

    def full(self) -> None:
        """No page beyond those the file has now."""
        pages = self._conn().execute("PRAGMA page_count").fetchone()[0]
        self.pragmas = ["query_only = 0", f"max_page_count = {pages}"]

    def read_only(self) -> None:
        self.pragmas = ["query_only = 1", f"max_page_count = {NO_LIMIT}"]

    def lift(self) -> None:
        self.pragmas = ["query_only = 0", f"max_page_count = {NO_LIMIT}"]
