"""Tables of precomputed answers in SQLite: a file of their own beside the embedded registry
(`precomputed.db`), so the registry's schema stays as it is. One statement reads a request's
entities (in pieces of `MAX_GET`), one transaction writes a piece of a chunk; publishing is
one transaction that points the table at the new generation (where no later job's stands) and
removes every expired row; a generation replaced expires a minute after its replacement stands
(`retire`), so a container that still serves it finds its answers meanwhile."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from sluice import owner_only
from sluice.domain.errors import faults_named
from sluice.registry.precomputed import MAX_GET, Publication, Stored, Superseded
from sluice.registry.sqlite.connection import thread_connection
from sluice.registry.sqlite.faults import STORAGE

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator, Sequence

RETIRED_KEPT_S = 60.0  # how long a replaced generation's answers outlive its replacement (`retire`)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS answers (
    tenant TEXT NOT NULL, tbl TEXT NOT NULL, entity TEXT NOT NULL, generation TEXT NOT NULL,
    body BLOB NOT NULL, computed_at REAL NOT NULL, expires_at REAL NOT NULL,
    PRIMARY KEY (tenant, tbl, entity, generation));
CREATE INDEX IF NOT EXISTS answers_by_expiry ON answers (expires_at);
CREATE TABLE IF NOT EXISTS generations (
    tenant TEXT NOT NULL, tbl TEXT NOT NULL, generation TEXT NOT NULL, doc TEXT NOT NULL, expires_at REAL NOT NULL,
    PRIMARY KEY (tenant, tbl, generation));
CREATE TABLE IF NOT EXISTS publications (
    tenant TEXT NOT NULL, tbl TEXT NOT NULL, doc TEXT NOT NULL, expires_at REAL NOT NULL,
    PRIMARY KEY (tenant, tbl));
"""

# The read of n entities (1..MAX_GET), each statement's text made once: SQLite keeps a prepared
# statement per text, so a request's read finds its statement prepared. `body` is a BLOB and
# `computed_at` a REAL column: read as bytes and float.
_SELECT = "SELECT entity, body, computed_at, expires_at FROM answers WHERE tenant = ? AND tbl = ? AND generation = ? AND expires_at > ? AND "
_GET = ("", _SELECT + "entity = ?", *(_SELECT + f"entity IN ({','.join('?' * n)})" for n in range(2, MAX_GET + 1)))


class SqlitePrecomputed:
    reads_inline = True  # WAL: a read never waits on a writer (see `inference.precomputed.PrecomputedReader`)

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self._local = threading.local()
        self._made = False  # the file and its schema, made on first use (most processes never read one)
        self._lock = threading.Lock()

    def _make(self) -> None:
        with self._lock:
            if self._made:
                return
            with faults_named(STORAGE):  # every tenant's answers: readable by the owner alone, as the registry
                owner_only.folder(self.path.parent)
                os.close(owner_only.descriptor(self.path, "ab"))
                self._connect().executescript(_SCHEMA)
            for each in (self.path.with_name(self.path.name + "-wal"), self.path.with_name(self.path.name + "-shm")):
                owner_only.tighten(each)
            self._made = True

    @classmethod
    def beside(cls, registry_url: str) -> SqlitePrecomputed:
        """The file beside a `sqlite:///…/registry.db` registry."""
        from sluice.registry.sqlite.connection import path_of_url

        return cls(path_of_url(registry_url).with_name("precomputed.db"))

    def _conn(self) -> sqlite3.Connection:
        if not self._made:
            self._make()
        return self._connect()

    def _connect(self) -> sqlite3.Connection:
        return thread_connection(self._local, self.path)

    def publication(self, tenant: str, table: str, *, now: float) -> Publication | None:
        row = self._conn().execute(
            "SELECT doc FROM publications WHERE tenant = ? AND tbl = ? AND expires_at > ?", (tenant, table, now)
        ).fetchone()
        return Publication.from_json(row[0]) if row else None

    def get_answers(self, tenant: str, table: str, generation: str, entities: Sequence[str], *, now: float) -> dict[str, Stored]:
        conn = self._conn()
        found: dict[str, Stored] = {}
        unique = list(dict.fromkeys(entities))
        for start in range(0, len(unique), MAX_GET):
            piece = unique[start : start + MAX_GET]
            rows = conn.execute(_GET[len(piece)], (tenant, table, generation, now, *piece)).fetchall()
            found.update((entity, Stored(body, at, until)) for entity, body, at, until in rows)
        return found

    def put_answers(
        self, tenant: str, table: str, generation: str, rows: Sequence[tuple[str, bytes]], *, computed_at: float, expires_at: float
    ) -> None:
        if not rows:
            return
        with self._immediate() as conn:
            conn.executemany(
                "INSERT OR REPLACE INTO answers VALUES (?, ?, ?, ?, ?, ?, ?)",
                [(tenant, table, entity, generation, body, computed_at, expires_at) for entity, body in rows],
            )

    def describe(self, tenant: str, table: str, publication: Publication, *, expires_at: float) -> None:
        self._conn().execute(
            "INSERT OR REPLACE INTO generations VALUES (?, ?, ?, ?, ?)", (tenant, table, publication.generation, publication.to_json(), expires_at)
        )

    def described(self, tenant: str, table: str, generation: str) -> Publication | None:
        row = self._conn().execute(
            "SELECT doc FROM generations WHERE tenant = ? AND tbl = ? AND generation = ?", (tenant, table, generation)
        ).fetchone()
        return Publication.from_json(row[0]) if row else None

    def publish(self, tenant: str, table: str, publication: Publication, *, expires_at: float) -> Publication | None:
        with self._immediate() as conn:
            row = conn.execute("SELECT doc, expires_at FROM publications WHERE tenant = ? AND tbl = ?", (tenant, table)).fetchone()
            before = Publication.from_json(row[0], expires_at=row[1]) if row else None
            later = before is not None and row[1] > publication.published_at and before.order > publication.order
            if later:  # not served: kept in the later one's chain, its answers with it, to be put back should that one be withdrawn
                kept = before.admitting(replace(publication, expires_at=expires_at))  # type: ignore[union-attr]
                if kept is not None:
                    conn.execute("INSERT OR REPLACE INTO publications VALUES (?, ?, ?, ?)", (tenant, table, kept.to_json(), row[1]))
                elif publication.generation not in {p.generation for p in (before, *before.chain())}:  # type: ignore[union-attr]
                    # never to be served (the later one succeeded): its answers go now
                    conn.execute("DELETE FROM answers WHERE tenant = ? AND tbl = ? AND generation = ?", (tenant, table, publication.generation))
            else:
                stood = publication.replacing(before, expires_at=expires_at)
                conn.execute("INSERT OR REPLACE INTO publications VALUES (?, ?, ?, ?)", (tenant, table, stood.to_json(), expires_at))
            conn.execute("DELETE FROM answers WHERE expires_at <= ?", (publication.published_at,))
            conn.execute("DELETE FROM generations WHERE expires_at <= ?", (publication.published_at,))
        if later:
            raise Superseded(before)  # type: ignore[arg-type]
        return stood.replaced

    def withdraw(self, tenant: str, table: str, generation: str) -> bool:
        with self._immediate() as conn:
            row = conn.execute("SELECT doc FROM publications WHERE tenant = ? AND tbl = ?", (tenant, table)).fetchone()
            current = Publication.from_json(row[0]) if row else None
            if current is None:
                return False
            if current.generation != generation:
                kept = current.without(generation)  # what a later one would put back: never again
                if kept is not None:
                    conn.execute("INSERT OR REPLACE INTO publications VALUES (?, ?, ?, ?)", (tenant, table, kept.to_json(), current.expires_at))
                return False
            put_back = current.replaced
            if put_back is None:
                conn.execute("DELETE FROM publications WHERE tenant = ? AND tbl = ?", (tenant, table))
            else:
                conn.execute("INSERT OR REPLACE INTO publications VALUES (?, ?, ?, ?)", (tenant, table, put_back.to_json(), put_back.expires_at))
        return True

    def retire(self, tenant: str, table: str, generation: str, *, now: float | None = None) -> None:
        """The replaced generation's answers expire `RETIRED_KEPT_S` from now: a container that
        read the publication before the new one stood keeps serving them that long (at most
        `precomputed_publication_ttl_s`), rather than finding none and answering live; the next
        publication of any table removes them, as every expired row."""
        with self._immediate() as conn:
            row = conn.execute("SELECT doc FROM publications WHERE tenant = ? AND tbl = ?", (tenant, table)).fetchone()
            if row is not None and Publication.from_json(row[0]).generation == generation:
                return  # served again (put back meanwhile): kept
            _expire(conn, tenant, table, [generation], now)

    def settle(self, tenant: str, table: str, generation: str, *, now: float | None = None) -> None:
        with self._immediate() as conn:
            row = conn.execute("SELECT doc, expires_at FROM publications WHERE tenant = ? AND tbl = ?", (tenant, table)).fetchone()
            current = Publication.from_json(row[0]) if row else None
            kept = current.settled(generation) if current is not None else None
            if kept is not None:
                conn.execute("INSERT OR REPLACE INTO publications VALUES (?, ?, ?, ?)", (tenant, table, kept.to_json(), row[1]))
                forgotten = {p.generation for p in current.chain()} - {p.generation for p in (kept, *kept.chain())}  # type: ignore[union-attr]
                _expire(conn, tenant, table, forgotten, now)  # never to be put back: retired

    @contextlib.contextmanager
    def _immediate(self) -> Iterator[sqlite3.Connection]:
        """One write transaction, taken at its start: committed, or rolled back on any error."""
        conn = self._conn()
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")


def _expire(conn: sqlite3.Connection, tenant: str, table: str, generations: Iterable[str], now: float | None) -> None:
    """These generations' answers expire `RETIRED_KEPT_S` from `now` (`retire`)."""
    at = (time.time() if now is None else now) + RETIRED_KEPT_S
    conn.executemany(
        "UPDATE answers SET expires_at = min(expires_at, ?) WHERE tenant = ? AND tbl = ? AND generation = ?", [(at, tenant, table, g) for g in generations]
    )
