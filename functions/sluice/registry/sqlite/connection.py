"""The embedded registry's file: one SQLite database, a connection per thread, WAL for
concurrent readers, `BEGIN IMMEDIATE` transactions for writers. A disk that is full,
read-only or failing is raised as the domain's `StorageFault`, from every statement
(`sluice.registry.sqlite.faults`) and from opening the file."""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sluice import owner_only
from sluice.domain.errors import faults_named
from sluice.registry.guards import Catalog, catalog_changed
from sluice.registry.sqlite.faults import STORAGE, FaultNamingConnection

if TYPE_CHECKING:
    from sluice.domain.errors import Conflict, NotFound

# Kept byte for byte: its digest in `user_version` tells an existing file it already has it.
_SCHEMA = """
CREATE TABLE IF NOT EXISTS models (
    tenant TEXT NOT NULL, name TEXT NOT NULL, doc TEXT NOT NULL,
    next_version INTEGER NOT NULL DEFAULT 1,
    PRIMARY KEY (tenant, name));
CREATE TABLE IF NOT EXISTS versions (
    tenant TEXT NOT NULL, model TEXT NOT NULL, version INTEGER NOT NULL, doc TEXT NOT NULL,
    PRIMARY KEY (tenant, model, version));
CREATE TABLE IF NOT EXISTS version_numbers (
    tenant TEXT NOT NULL, model TEXT NOT NULL, next_version INTEGER NOT NULL,
    PRIMARY KEY (tenant, model));
CREATE TABLE IF NOT EXISTS deployments (
    tenant TEXT NOT NULL, name TEXT NOT NULL, revision INTEGER NOT NULL, doc TEXT NOT NULL,
    PRIMARY KEY (tenant, name));
CREATE TABLE IF NOT EXISTS deployment_history (
    tenant TEXT NOT NULL, name TEXT NOT NULL, seq INTEGER PRIMARY KEY AUTOINCREMENT,
    doc TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS deployment_history_by_name ON deployment_history (tenant, name, seq);
CREATE TABLE IF NOT EXISTS stats (
    tenant TEXT NOT NULL, deployment TEXT NOT NULL, revision INTEGER NOT NULL,
    subject TEXT NOT NULL, name TEXT NOT NULL, value REAL NOT NULL,
    PRIMARY KEY (tenant, deployment, revision, subject, name));
CREATE TABLE IF NOT EXISTS assignments (
    tenant TEXT NOT NULL, deployment TEXT NOT NULL, request_id TEXT NOT NULL,
    variant TEXT NOT NULL, at REAL NOT NULL,
    PRIMARY KEY (tenant, deployment, request_id));
CREATE TABLE IF NOT EXISTS rewards (
    tenant TEXT NOT NULL, deployment TEXT NOT NULL, request_id TEXT NOT NULL, at REAL NOT NULL,
    PRIMARY KEY (tenant, deployment, request_id));
CREATE TABLE IF NOT EXISTS api_keys (
    key_id TEXT PRIMARY KEY, tenant TEXT NOT NULL, doc TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS api_keys_by_tenant ON api_keys (tenant);
CREATE TABLE IF NOT EXISTS batch_jobs (
    tenant TEXT NOT NULL, id TEXT NOT NULL, status TEXT NOT NULL, created_at REAL NOT NULL,
    doc TEXT NOT NULL, chunks_done INTEGER NOT NULL DEFAULT 0, rows_in INTEGER NOT NULL DEFAULT 0,
    rows_out INTEGER NOT NULL DEFAULT 0, rows_failed INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant, id));
CREATE INDEX IF NOT EXISTS batch_jobs_by_time ON batch_jobs (tenant, created_at);
CREATE TABLE IF NOT EXISTS batch_outputs (
    tenant TEXT NOT NULL, uri TEXT NOT NULL, job TEXT NOT NULL, PRIMARY KEY (tenant, uri));
CREATE TABLE IF NOT EXISTS batch_chunks (
    tenant TEXT NOT NULL, job TEXT NOT NULL, chunk INTEGER NOT NULL, doc TEXT NOT NULL,
    PRIMARY KEY (tenant, job, chunk));
CREATE TABLE IF NOT EXISTS batch_schedules (
    tenant TEXT NOT NULL, name TEXT NOT NULL, doc TEXT NOT NULL, PRIMARY KEY (tenant, name));
CREATE TABLE IF NOT EXISTS cached_answers (
    tenant TEXT NOT NULL, deployment TEXT NOT NULL, key TEXT NOT NULL,
    expires_at REAL NOT NULL, body BLOB NOT NULL,
    PRIMARY KEY (tenant, deployment, key));
CREATE INDEX IF NOT EXISTS cached_answers_by_expiry ON cached_answers (expires_at);
CREATE TABLE IF NOT EXISTS connection_messages (
    tenant TEXT NOT NULL, connection TEXT NOT NULL, win TEXT NOT NULL,
    n INTEGER NOT NULL, expires_at REAL NOT NULL,
    PRIMARY KEY (tenant, connection, win));
CREATE TABLE IF NOT EXISTS optimize_jobs (
    tenant TEXT NOT NULL, id TEXT NOT NULL, status TEXT NOT NULL, created_at REAL NOT NULL,
    doc TEXT NOT NULL, PRIMARY KEY (tenant, id));
CREATE INDEX IF NOT EXISTS optimize_jobs_by_time ON optimize_jobs (tenant, created_at);
CREATE TABLE IF NOT EXISTS monitor_baselines (
    tenant TEXT NOT NULL, deployment TEXT NOT NULL, doc TEXT NOT NULL,
    PRIMARY KEY (tenant, deployment));
CREATE TABLE IF NOT EXISTS monitor_profiles (
    tenant TEXT NOT NULL, deployment TEXT NOT NULL, revision INTEGER NOT NULL,
    win INTEGER NOT NULL, variant TEXT NOT NULL, doc TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS monitor_profiles_by_window ON monitor_profiles (tenant, deployment, revision, win);
CREATE TABLE IF NOT EXISTS monitor_predictions (
    tenant TEXT NOT NULL, deployment TEXT NOT NULL, request_id TEXT NOT NULL,
    expires_at REAL NOT NULL, doc TEXT NOT NULL, PRIMARY KEY (tenant, deployment, request_id));
CREATE INDEX IF NOT EXISTS monitor_predictions_by_expiry ON monitor_predictions (expires_at);
CREATE TABLE IF NOT EXISTS monitor_labels (
    tenant TEXT NOT NULL, deployment TEXT NOT NULL, request_id TEXT NOT NULL, row INTEGER NOT NULL,
    expires_at REAL NOT NULL, PRIMARY KEY (tenant, deployment, request_id, row));
CREATE INDEX IF NOT EXISTS monitor_labels_by_expiry ON monitor_labels (expires_at);
CREATE TABLE IF NOT EXISTS monitor_outcomes (
    tenant TEXT NOT NULL, deployment TEXT NOT NULL, revision INTEGER NOT NULL,
    win INTEGER NOT NULL, doc TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS monitor_outcomes_by_window ON monitor_outcomes (tenant, deployment, revision, win);
CREATE TABLE IF NOT EXISTS follows (
    tenant TEXT NOT NULL, name TEXT NOT NULL, revision INTEGER NOT NULL, watch TEXT NOT NULL,
    doc TEXT NOT NULL, PRIMARY KEY (tenant, name));
CREATE INDEX IF NOT EXISTS follows_by_watch ON follows (watch);
CREATE TABLE IF NOT EXISTS catalog (
    tenant TEXT NOT NULL PRIMARY KEY, writes INTEGER NOT NULL DEFAULT 0, deletes INTEGER NOT NULL DEFAULT 0);
"""
# Columns a table gained after files were made with it (CREATE TABLE IF NOT EXISTS leaves a
# table as it is): added where missing, NULL in the rows already there. A bandit assignment's
# revision, and the revision a claimed reward's or label's deployment was made at (a deployment
# created again under the name claims afresh: `sluice.domain.objects.made_at_revision`).
_ADDED_COLUMNS = (("assignments", "revision"), ("rewards", "made"), ("monitor_labels", "made"))


def _owner_only(path: Path) -> None:
    """The file holds every tenant's key hashes: readable by its owner alone. SQLite gives its
    -wal and -shm files the database file's mode (those an older sluice left open to others
    are tightened here too)."""
    owner_only.folder(path.parent)
    os.close(owner_only.descriptor(path, "r+b"))
    for each in (path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
        owner_only.tighten(each)


def path_of_url(url: str) -> Path:
    """`sqlite:////abs/path.db`, `sqlite:///relative.db` or `sqlite:///~/x.db` -> a Path."""
    if not url.startswith("sqlite:///"):
        raise ValueError(f"not a sqlite URL: {url!r}")
    return Path(url[len("sqlite:///") :]).expanduser()


class Database:
    """The file, with its schema, and a connection per thread."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        if str(self.path) != ":memory:":
            with faults_named(STORAGE):
                _owner_only(self.path)
        self._local = threading.local()
        conn = self.conn()
        # The schema script costs tens of milliseconds at every cold start; its digest in
        # user_version says whether this file already has it.
        version = int(hashlib.sha256((_SCHEMA + repr(_ADDED_COLUMNS)).encode()).hexdigest()[:7], 16)
        if conn.execute("PRAGMA user_version").fetchone()[0] != version:
            conn.executescript(_SCHEMA)
            with Transaction(conn) as db:  # one process adds them; another opening the file at once finds them
                for table, column in _ADDED_COLUMNS:
                    if column not in {row[1] for row in db.execute(f"PRAGMA table_info({table})")}:
                        db.execute(f"ALTER TABLE {table} ADD COLUMN {column} INTEGER")
                db.execute(f"PRAGMA user_version = {version}")

    def conn(self) -> sqlite3.Connection:
        return thread_connection(self._local, self.path)

    def tx(self) -> Transaction:
        return Transaction(self.conn())

    def one(self, sql: str, *args: Any) -> dict[str, Any] | None:
        """The JSON document in the first column of the first row, or None."""
        row = self.conn().execute(sql, args).fetchone()
        return json.loads(row[0]) if row else None

    def all(self, sql: str, *args: Any) -> list[dict[str, Any]]:
        return [json.loads(row[0]) for row in self.conn().execute(sql, args).fetchall()]


class Transaction:
    """`BEGIN IMMEDIATE … COMMIT`, rolled back on error: one writer at a time, no lost updates."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def __enter__(self) -> sqlite3.Connection:
        self.conn.execute("BEGIN IMMEDIATE")
        return self.conn

    def __exit__(self, exc_type: object, *_: object) -> None:
        if exc_type is None:
            try:
                self.conn.execute("COMMIT")
                return
            except BaseException:
                self._rollback()  # a COMMIT that failed (a full disk) may leave it open
                raise
        self._rollback()

    def _rollback(self) -> None:
        # SQLite ends a transaction itself on some errors (a full disk, an I/O error): a
        # ROLLBACK then would fail and hide the error that ended it.
        if self.conn.in_transaction:
            self.conn.execute("ROLLBACK")


class Part:
    """One aggregate's share of the registry, over a database it shares with the others."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def insert(self, sql: str, params: tuple[Any, ...], *, taken: Conflict) -> None:
        """One row written in a transaction of its own, or `taken` raised where its key is."""
        try:
            with self.db.tx() as db:
                db.execute(sql, params)
        except sqlite3.IntegrityError:
            raise taken from None

    def found(self, sql: str, *args: Any, missing: NotFound) -> dict[str, Any]:
        """The document `sql` selects, or `missing` raised where there is none."""
        doc = self.db.one(sql, *args)
        if doc is None:
            raise missing
        return doc

    # Models, deployments and batch schedules: one document per (tenant, name) in `table`.
    def added(self, table: str, tenant: str, name: str, doc: str, *, taken: Conflict) -> None:
        """A new document of `name`, or `taken` raised where the tenant has one already."""
        self.insert(f"INSERT INTO {table} (tenant, name, doc) VALUES (?, ?, ?)", (tenant, name, doc), taken=taken)

    def named(self, table: str, tenant: str, name: str, *, missing: NotFound) -> dict[str, Any]:
        """The document of `name`, or `missing` raised where there is none."""
        return self.found(f"SELECT doc FROM {table} WHERE tenant = ? AND name = ?", tenant, name, missing=missing)

    def listed(self, table: str, tenant: str) -> list[dict[str, Any]]:
        """The tenant's documents, by name."""
        return self.db.all(f"SELECT doc FROM {table} WHERE tenant = ? ORDER BY name", tenant)


def thread_connection(local: threading.local, path: Any) -> sqlite3.Connection:
    """This thread's connection to the file at `path` (kept on `local`), opened once: write-ahead
    log, autocommit (transactions are explicit), storage faults named."""
    conn = getattr(local, "conn", None)
    if conn is None:
        conn = sqlite3.connect(path, timeout=30, isolation_level=None, factory=FaultNamingConnection)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        local.conn = conn
    return conn


def read_catalog(db: sqlite3.Connection, tenant: str) -> Catalog:
    row = db.execute("SELECT writes, deletes FROM catalog WHERE tenant = ?", (tenant,)).fetchone()
    return Catalog(*row) if row else Catalog()


def advance_catalog(db: sqlite3.Connection, tenant: str, seen: Catalog | None, kind: str, field: str) -> None:
    """Inside a write's transaction (`kind`: "writes", a deployment's, or "deletes", a version's,
    a model's or a deployment's): StaleRead where the other kind's counter moved since `seen`,
    read before the caller's checks (`sluice.registry.guards`); then this kind's moved on.
    Nothing where `seen` is None."""
    if seen is None:
        return
    now = read_catalog(db, tenant)
    other = "deletes" if kind == "writes" else "writes"
    if getattr(now, other) != getattr(seen, other):
        raise catalog_changed(field)
    db.execute(
        f"INSERT INTO catalog (tenant, {kind}) VALUES (?, 1) ON CONFLICT (tenant) DO UPDATE SET {kind} = {kind} + 1",
        (tenant,),
    )
