"""The embedded registry's one choke point for a disk that is full, read-only or failing:
every statement goes through a connection of this class, which raises what SQLite reports
of its disk as the domain's `StorageFault` (`storage_full`, `storage_read_only`,
`storage_io_error`), whichever part of the registry ran it. Any other error is left as it is."""

from __future__ import annotations

import sqlite3
from typing import Any, NoReturn

from sluice.domain.errors import StorageFault, failing, full, read_only

STORAGE = "registry"

# SQLite's primary result codes (the low byte of an extended one).
_FULL, _READONLY, _IOERR, _CANTOPEN = 13, 8, 10, 14


def sqlite_fault(exc: sqlite3.Error) -> StorageFault | None:
    """The fault a SQLite error is, or None when it is not one of the disk's."""
    code = (getattr(exc, "sqlite_errorcode", None) or 0) & 0xFF
    if code == _FULL:
        return full(STORAGE)
    if code == _READONLY:
        return read_only(STORAGE)
    if code in (_IOERR, _CANTOPEN):
        return failing(STORAGE)
    return None


def _raise_named(exc: sqlite3.Error) -> NoReturn:
    """Raise what a statement that failed with `exc` raises: the disk's fault it is, else `exc`."""
    fault = sqlite_fault(exc)
    if fault is None:
        raise exc
    raise fault from exc


class FaultNamingConnection(sqlite3.Connection):
    """`sqlite3.Connection` whose statements raise a disk's faults as `StorageFault` (a plain
    `try` around each statement: a context manager there cost as much as a one-row read)."""

    def execute(self, sql: str, parameters: Any = (), /) -> sqlite3.Cursor:
        try:
            return super().execute(sql, parameters)
        except sqlite3.Error as exc:
            _raise_named(exc)

    def executemany(self, sql: str, parameters: Any, /) -> sqlite3.Cursor:
        try:
            return super().executemany(sql, parameters)
        except sqlite3.Error as exc:
            _raise_named(exc)

    def executescript(self, script: str, /) -> sqlite3.Cursor:
        try:
            return super().executescript(script)
        except sqlite3.Error as exc:
            _raise_named(exc)
