"""The embedded registry: one SQLite file, a connection per thread, WAL for concurrent readers."""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

from sluice.domain import ApiKey, Deployment, DeploymentChange, Model, ModelVersion, now
from sluice.domain.errors import Conflict, NotFound
from sluice.domain.jobs import UPDATABLE, BatchJob, ChunkResult, JobStatus, check_move
from sluice.registry import codec

_SCHEMA = """
CREATE TABLE IF NOT EXISTS models (
    tenant TEXT NOT NULL, name TEXT NOT NULL, doc TEXT NOT NULL,
    next_version INTEGER NOT NULL DEFAULT 1,
    PRIMARY KEY (tenant, name));
CREATE TABLE IF NOT EXISTS versions (
    tenant TEXT NOT NULL, model TEXT NOT NULL, version INTEGER NOT NULL, doc TEXT NOT NULL,
    PRIMARY KEY (tenant, model, version));
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
CREATE TABLE IF NOT EXISTS api_keys (
    key_id TEXT PRIMARY KEY, tenant TEXT NOT NULL, doc TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS api_keys_by_tenant ON api_keys (tenant);
CREATE TABLE IF NOT EXISTS batch_jobs (
    tenant TEXT NOT NULL, id TEXT NOT NULL, status TEXT NOT NULL, created_at REAL NOT NULL,
    doc TEXT NOT NULL, chunks_done INTEGER NOT NULL DEFAULT 0, rows_in INTEGER NOT NULL DEFAULT 0,
    rows_out INTEGER NOT NULL DEFAULT 0, rows_failed INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant, id));
CREATE INDEX IF NOT EXISTS batch_jobs_by_time ON batch_jobs (tenant, created_at);
CREATE TABLE IF NOT EXISTS batch_chunks (
    tenant TEXT NOT NULL, job TEXT NOT NULL, chunk INTEGER NOT NULL, doc TEXT NOT NULL,
    PRIMARY KEY (tenant, job, chunk));
"""


def path_of_url(url: str) -> Path:
    """`sqlite:////abs/path.db`, `sqlite:///relative.db` or `sqlite:///~/x.db` -> a Path."""
    if not url.startswith("sqlite:///"):
        raise ValueError(f"not a sqlite URL: {url!r}")
    return Path(url[len("sqlite:///") :]).expanduser()


class SqliteRegistry:
    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        if str(self.path) != ":memory:":
            self.path.parent.mkdir(parents=True, exist_ok=True)
        self._local = threading.local()
        conn = self._conn()
        # The schema script costs tens of milliseconds at every cold start; its digest in
        # user_version says whether this file already has it.
        version = int(hashlib.sha256(_SCHEMA.encode()).hexdigest()[:7], 16)
        if conn.execute("PRAGMA user_version").fetchone()[0] != version:
            conn.executescript(_SCHEMA)
            conn.execute(f"PRAGMA user_version = {version}")

    @classmethod
    def from_url(cls, url: str) -> SqliteRegistry:
        return cls(path_of_url(url))

    def _conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(self.path, timeout=30, isolation_level=None)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            self._local.conn = conn
        return conn

    def _tx(self) -> _Transaction:
        return _Transaction(self._conn())

    def _one(self, sql: str, *args: Any) -> dict[str, Any] | None:
        row = self._conn().execute(sql, args).fetchone()
        return json.loads(row[0]) if row else None

    def _all(self, sql: str, *args: Any) -> list[dict[str, Any]]:
        return [json.loads(row[0]) for row in self._conn().execute(sql, args).fetchall()]

    # Models ---------------------------------------------------------------------------
    def create_model(self, model: Model) -> Model:
        try:
            with self._tx() as db:
                db.execute(
                    "INSERT INTO models (tenant, name, doc) VALUES (?, ?, ?)",
                    (model.tenant, model.name, json.dumps(codec.model_to_dict(model))),
                )
        except sqlite3.IntegrityError:
            raise Conflict(f"model '{model.name}' already exists", field="name") from None
        return model

    def get_model(self, tenant: str, name: str) -> Model:
        doc = self._one("SELECT doc FROM models WHERE tenant = ? AND name = ?", tenant, name)
        if doc is None:
            raise NotFound(f"model '{name}' not found", field="model")
        return codec.model_from_dict(doc)

    def list_models(self, tenant: str) -> list[Model]:
        docs = self._all("SELECT doc FROM models WHERE tenant = ? ORDER BY name", tenant)
        return [codec.model_from_dict(d) for d in docs]

    def delete_model(self, tenant: str, name: str) -> None:
        with self._tx() as db:
            gone = db.execute("DELETE FROM models WHERE tenant = ? AND name = ?", (tenant, name))
            if gone.rowcount == 0:
                raise NotFound(f"model '{name}' not found", field="model")
            db.execute("DELETE FROM versions WHERE tenant = ? AND model = ?", (tenant, name))

    # Versions -------------------------------------------------------------------------
    def add_version(self, version: ModelVersion) -> ModelVersion:
        with self._tx() as db:
            row = db.execute(
                "UPDATE models SET next_version = next_version + 1 WHERE tenant = ? AND name = ? "
                "RETURNING next_version - 1",
                (version.tenant, version.model),
            ).fetchone()
            if row is None:
                raise NotFound(f"model '{version.model}' not found", field="model")
            stored = version.with_version(int(row[0]))
            db.execute(
                "INSERT INTO versions (tenant, model, version, doc) VALUES (?, ?, ?, ?)",
                (stored.tenant, stored.model, stored.version, json.dumps(codec.version_to_dict(stored))),
            )
        return stored

    def get_version(self, tenant: str, model: str, version: int) -> ModelVersion:
        doc = self._one(
            "SELECT doc FROM versions WHERE tenant = ? AND model = ? AND version = ?",
            tenant, model, int(version),
        )
        if doc is None:
            self.get_model(tenant, model)
            raise NotFound(f"model '{model}' has no version {version}", field="version")
        return codec.version_from_dict(doc)

    def latest_version(self, tenant: str, model: str) -> ModelVersion:
        doc = self._one(
            "SELECT doc FROM versions WHERE tenant = ? AND model = ? ORDER BY version DESC LIMIT 1",
            tenant, model,
        )
        if doc is None:
            self.get_model(tenant, model)
            raise NotFound(f"model '{model}' has no versions", field="version")
        return codec.version_from_dict(doc)

    def list_versions(self, tenant: str, model: str) -> list[ModelVersion]:
        self.get_model(tenant, model)
        docs = self._all(
            "SELECT doc FROM versions WHERE tenant = ? AND model = ? ORDER BY version", tenant, model
        )
        return [codec.version_from_dict(d) for d in docs]

    def delete_version(self, tenant: str, model: str, version: int) -> None:
        with self._tx() as db:
            gone = db.execute(
                "DELETE FROM versions WHERE tenant = ? AND model = ? AND version = ?",
                (tenant, model, int(version)),
            )
        if gone.rowcount == 0:
            raise NotFound(f"model '{model}' has no version {version}", field="version")

    # Deployments ----------------------------------------------------------------------
    def create_deployment(self, deployment: Deployment) -> Deployment:
        stored = replace(deployment, revision=1)
        try:
            with self._tx() as db:
                db.execute(
                    "INSERT INTO deployments (tenant, name, revision, doc) VALUES (?, ?, 1, ?)",
                    (stored.tenant, stored.name, json.dumps(codec.deployment_to_dict(stored))),
                )
                self._record(db, stored, None)
        except sqlite3.IntegrityError:
            raise Conflict(f"deployment '{deployment.name}' already exists", field="name") from None
        return stored

    def get_deployment(self, tenant: str, name: str) -> Deployment:
        doc = self._one("SELECT doc FROM deployments WHERE tenant = ? AND name = ?", tenant, name)
        if doc is None:
            raise NotFound(f"deployment '{name}' not found", field="deployment")
        return codec.deployment_from_dict(doc)

    def list_deployments(self, tenant: str) -> list[Deployment]:
        docs = self._all("SELECT doc FROM deployments WHERE tenant = ? ORDER BY name", tenant)
        return [codec.deployment_from_dict(d) for d in docs]

    def update_deployment(self, deployment: Deployment, *, expected_revision: int) -> Deployment:
        stored = replace(deployment, revision=expected_revision + 1, updated_at=now())
        with self._tx() as db:
            row = db.execute(
                "SELECT doc FROM deployments WHERE tenant = ? AND name = ?",
                (deployment.tenant, deployment.name),
            ).fetchone()
            if row is None:
                raise NotFound(f"deployment '{deployment.name}' not found", field="deployment")
            old = codec.deployment_from_dict(json.loads(row[0]))
            if old.revision != expected_revision:
                raise Conflict(
                    f"deployment '{deployment.name}' is at revision {old.revision}, not {expected_revision}",
                    field="revision",
                )
            db.execute(
                "UPDATE deployments SET revision = ?, doc = ? WHERE tenant = ? AND name = ?",
                (stored.revision, json.dumps(codec.deployment_to_dict(stored)), stored.tenant, stored.name),
            )
            self._record(db, stored, old.policy)
        return stored

    def delete_deployment(self, tenant: str, name: str, *, by: str = "") -> None:
        with self._tx() as db:
            row = db.execute(
                "SELECT doc FROM deployments WHERE tenant = ? AND name = ?", (tenant, name)
            ).fetchone()
            if row is None:
                raise NotFound(f"deployment '{name}' not found", field="deployment")
            old = codec.deployment_from_dict(json.loads(row[0]))
            db.execute("DELETE FROM deployments WHERE tenant = ? AND name = ?", (tenant, name))
            change = DeploymentChange(tenant, name, old.revision + 1, now(), by, old.policy, None)
            db.execute(
                "INSERT INTO deployment_history (tenant, name, doc) VALUES (?, ?, ?)",
                (tenant, name, json.dumps(codec.change_to_dict(change))),
            )

    def deployment_history(self, tenant: str, name: str) -> list[DeploymentChange]:
        docs = self._all(
            "SELECT doc FROM deployment_history WHERE tenant = ? AND name = ? ORDER BY seq", tenant, name
        )
        return [DeploymentChange(**d) for d in docs]

    def _record(self, db: sqlite3.Connection, dep: Deployment, old: dict[str, Any] | None) -> None:
        change = DeploymentChange(dep.tenant, dep.name, dep.revision, dep.updated_at, dep.updated_by, old, dep.policy)
        db.execute(
            "INSERT INTO deployment_history (tenant, name, doc) VALUES (?, ?, ?)",
            (dep.tenant, dep.name, json.dumps(codec.change_to_dict(change))),
        )

    # Statistics -----------------------------------------------------------------------
    def merge_stats(
        self, tenant: str, deployment: str, revision: int, subject: str,
        sums: dict[str, float], maxes: dict[str, float],
    ) -> None:
        key = (tenant, deployment, revision, subject)
        with self._tx() as db:
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
        rows = self._conn().execute(
            "SELECT subject, name, value FROM stats WHERE tenant = ? AND deployment = ? AND revision = ?",
            (tenant, deployment, revision),
        ).fetchall()
        out: dict[str, dict[str, float]] = {}
        for subject, name, value in rows:
            out.setdefault(subject, {})[name] = value
        return out

    def put_assignment(self, tenant: str, deployment: str, request_id: str, variant: str) -> None:
        with self._tx() as db:
            db.execute(
                "INSERT OR REPLACE INTO assignments VALUES (?, ?, ?, ?, ?)",
                (tenant, deployment, request_id, variant, now()),
            )

    def get_assignment(self, tenant: str, deployment: str, request_id: str) -> str | None:
        row = self._conn().execute(
            "SELECT variant FROM assignments WHERE tenant = ? AND deployment = ? AND request_id = ?",
            (tenant, deployment, request_id),
        ).fetchone()
        return row[0] if row else None

    # API keys -------------------------------------------------------------------------
    def put_api_key(self, key: ApiKey) -> ApiKey:
        try:
            with self._tx() as db:
                db.execute(
                    "INSERT INTO api_keys (key_id, tenant, doc) VALUES (?, ?, ?)",
                    (key.key_id, key.tenant, json.dumps(codec.key_to_dict(key))),
                )
        except sqlite3.IntegrityError:
            raise Conflict("API key id already exists", field="key_id") from None
        return key

    def get_api_key(self, key_id: str) -> ApiKey | None:
        doc = self._one("SELECT doc FROM api_keys WHERE key_id = ?", key_id)
        return codec.key_from_dict(doc) if doc else None

    def list_api_keys(self, tenant: str) -> list[ApiKey]:
        docs = self._all("SELECT doc FROM api_keys WHERE tenant = ? ORDER BY key_id", tenant)
        return [codec.key_from_dict(d) for d in docs]

    def revoke_api_key(self, tenant: str, key_id: str) -> ApiKey:
        with self._tx() as db:
            row = db.execute(
                "SELECT doc FROM api_keys WHERE key_id = ? AND tenant = ?", (key_id, tenant)
            ).fetchone()
            if row is None:
                raise NotFound(f"API key '{key_id}' not found", field="key_id")
            key = codec.key_from_dict(json.loads(row[0]))
            if key.revoked_at is None:
                key = replace(key, revoked_at=now())
                db.execute(
                    "UPDATE api_keys SET doc = ? WHERE key_id = ?",
                    (json.dumps(codec.key_to_dict(key)), key_id),
                )
        return key

    # Batch jobs -----------------------------------------------------------------------
    # The counters live in columns of their own, added to in place; the rest is the doc.
    _JOB = "SELECT doc, status, chunks_done, rows_in, rows_out, rows_failed FROM batch_jobs"

    @staticmethod
    def _job(row: tuple[Any, ...]) -> BatchJob:
        doc = json.loads(row[0])
        doc["status"] = row[1]
        doc.update(zip(codec.JOB_COUNTERS, row[2:], strict=True))
        return codec.job_from_dict(doc)

    def create_job(self, job: BatchJob) -> BatchJob:
        doc = codec.job_to_dict(job)
        try:
            with self._tx() as db:
                db.execute(
                    "INSERT INTO batch_jobs (tenant, id, status, created_at, doc, chunks_done, "
                    "rows_in, rows_out, rows_failed) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (job.tenant, job.id, job.status, job.created_at, json.dumps(doc),
                     *(doc[c] for c in codec.JOB_COUNTERS)),
                )  # fmt: skip
        except sqlite3.IntegrityError:
            raise Conflict(f"batch job '{job.id}' already exists", field="id") from None
        return job

    def get_job(self, tenant: str, job_id: str) -> BatchJob:
        row = self._conn().execute(
            f"{self._JOB} WHERE tenant = ? AND id = ?", (tenant, job_id)
        ).fetchone()
        if row is None:
            raise NotFound(f"batch job '{job_id}' not found", field="job")
        return self._job(row)

    def list_jobs(self, tenant: str, *, limit: int = 100) -> list[BatchJob]:
        rows = self._conn().execute(
            f"{self._JOB} WHERE tenant = ? ORDER BY created_at DESC, id DESC LIMIT ?",
            (tenant, int(limit)),
        ).fetchall()
        return [self._job(row) for row in rows]

    def update_job(
        self, tenant: str, job_id: str, *, status: JobStatus | None = None, **fields: object
    ) -> BatchJob:
        unknown = set(fields) - UPDATABLE
        if unknown:
            raise ValueError(f"cannot update batch job fields {sorted(unknown)}")
        with self._tx() as db:
            row = db.execute(f"{self._JOB} WHERE tenant = ? AND id = ?", (tenant, job_id)).fetchone()
            if row is None:
                raise NotFound(f"batch job '{job_id}' not found", field="job")
            current = self._job(row)
            target = status or current.status
            check_move(job_id, current.status, target)
            doc = json.loads(row[0]) | fields | {"status": target}
            db.execute(
                "UPDATE batch_jobs SET status = ?, doc = ? WHERE tenant = ? AND id = ?",
                (target, json.dumps(doc), tenant, job_id),
            )
            row = db.execute(f"{self._JOB} WHERE tenant = ? AND id = ?", (tenant, job_id)).fetchone()
        return self._job(row)

    def record_chunk(self, tenant: str, job_id: str, result: ChunkResult) -> bool:
        with self._tx() as db:
            added = db.execute(
                "INSERT OR IGNORE INTO batch_chunks (tenant, job, chunk, doc) VALUES (?, ?, ?, ?)",
                (tenant, job_id, result.index, json.dumps(result.to_dict())),
            )
            if added.rowcount == 0:
                return False
            counted = db.execute(
                "UPDATE batch_jobs SET chunks_done = chunks_done + 1, rows_in = rows_in + ?, "
                "rows_out = rows_out + ?, rows_failed = rows_failed + ? "
                "WHERE tenant = ? AND id = ? AND status = 'RUNNING'",
                (result.rows_in, result.rows_out, result.rows_failed, tenant, job_id),
            )
            if counted.rowcount == 0:
                db.execute(
                    "DELETE FROM batch_chunks WHERE tenant = ? AND job = ? AND chunk = ?",
                    (tenant, job_id, result.index),
                )
                return False
        return True

    def list_chunks(self, tenant: str, job_id: str) -> list[ChunkResult]:
        docs = self._all(
            "SELECT doc FROM batch_chunks WHERE tenant = ? AND job = ? ORDER BY chunk", tenant, job_id
        )
        return [ChunkResult.from_dict(d) for d in docs]


class _Transaction:
    """`BEGIN IMMEDIATE … COMMIT`, rolled back on error: one writer at a time, no lost updates."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def __enter__(self) -> sqlite3.Connection:
        self.conn.execute("BEGIN IMMEDIATE")
        return self.conn

    def __exit__(self, exc_type: object, *_: object) -> None:
        self.conn.execute("ROLLBACK" if exc_type else "COMMIT")
