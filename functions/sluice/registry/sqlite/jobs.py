"""Batch jobs and their chunks in SQLite. A job's progress counters live in columns of their
own, added to in place; the rest of the job is its JSON document. The output folder an
unfinished job holds is a row of `batch_outputs`, written and removed in the same
transactions as the job's creation and its last move."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from sluice.domain.jobs import TERMINAL, UPDATABLE, OutputInUse, check_move
from sluice.registry.codec import CHUNK, JOB, JOB_COUNTERS
from sluice.registry.refusals import check_updatable, no_job, taken
from sluice.registry.sqlite.connection import Part

if TYPE_CHECKING:
    from sluice.domain.jobs import BatchJob, ChunkResult, JobStatus

_JOB = "SELECT doc, status, chunks_done, rows_in, rows_out, rows_failed FROM batch_jobs"


def _job(row: tuple[Any, ...]) -> BatchJob:
    doc = json.loads(row[0])
    doc["status"] = row[1]
    doc.update(zip(JOB_COUNTERS, row[2:], strict=True))
    return JOB.load(doc)


class SqliteJobs(Part):
    def create_job(self, job: BatchJob, *, replacing: str | None = None) -> BatchJob:
        try:
            with self.db.tx() as db:
                db.execute(
                    "INSERT INTO batch_jobs (tenant, id, status, created_at, doc, chunks_done, "
                    "rows_in, rows_out, rows_failed) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (job.tenant, job.id, job.status, job.created_at, JOB.to_json(job),
                     *(getattr(job, c) for c in JOB_COUNTERS)),
                )  # fmt: skip
                if not job.terminal:
                    held = db.execute(
                        "SELECT job FROM batch_outputs WHERE tenant = ? AND uri = ?", (job.tenant, job.output_uri)
                    ).fetchone()
                    if held is not None and held[0] not in (job.id, replacing):
                        raise OutputInUse(f"batch job '{held[0]}' writes to this output folder", holder=held[0])
                    db.execute(
                        "INSERT OR REPLACE INTO batch_outputs (tenant, uri, job) VALUES (?, ?, ?)",
                        (job.tenant, job.output_uri, job.id),
                    )
        except sqlite3.IntegrityError:
            raise taken("batch job", job.id, field="id") from None
        return job

    def output_holder(self, tenant: str, output_uri: str) -> str | None:
        row = self.db.conn().execute(
            "SELECT job FROM batch_outputs WHERE tenant = ? AND uri = ?", (tenant, output_uri)
        ).fetchone()
        return None if row is None else str(row[0])

    def unfinished_jobs(self) -> list[BatchJob]:
        """Every tenant's jobs that have not finished (this file's registry only: `sluice
        serve` looks for those whose process is gone when it starts)."""
        rows = self.db.conn().execute(f"{_JOB} WHERE status IN ('PENDING', 'RUNNING') ORDER BY tenant, created_at").fetchall()
        return [_job(row) for row in rows]

    def get_job(self, tenant: str, job_id: str) -> BatchJob:
        row = self.db.conn().execute(f"{_JOB} WHERE tenant = ? AND id = ?", (tenant, job_id)).fetchone()
        if row is None:
            raise no_job(job_id)
        return _job(row)

    def list_jobs(self, tenant: str, *, limit: int = 100, schedule: str | None = None) -> list[BatchJob]:
        named = "" if schedule is None else " AND json_extract(doc, '$.schedule') = ?"
        rows = self.db.conn().execute(
            f"{_JOB} WHERE tenant = ?{named} ORDER BY created_at DESC, id DESC LIMIT ?",
            (tenant, *(() if schedule is None else (schedule,)), int(limit)),
        ).fetchall()
        return [_job(row) for row in rows]

    def update_job(
        self, tenant: str, job_id: str, *, status: JobStatus | None = None, **fields: object
    ) -> BatchJob:
        check_updatable("batch job", fields, UPDATABLE)
        with self.db.tx() as db:
            row = db.execute(f"{_JOB} WHERE tenant = ? AND id = ?", (tenant, job_id)).fetchone()
            if row is None:
                raise no_job(job_id)
            current = _job(row)
            target = status or current.status
            check_move(job_id, current.status, target)
            updated = replace(current, status=target, **fields)  # type: ignore[arg-type]
            db.execute(
                "UPDATE batch_jobs SET status = ?, doc = ? WHERE tenant = ? AND id = ?",
                (target, JOB.to_json(updated), tenant, job_id),
            )
            if target in TERMINAL:  # a finished job lets go of its output folder
                db.execute(
                    "DELETE FROM batch_outputs WHERE tenant = ? AND uri = ? AND job = ?",
                    (tenant, current.output_uri, job_id),
                )
        return updated

    def record_chunk(self, tenant: str, job_id: str, result: ChunkResult) -> bool:
        with self.db.tx() as db:
            added = db.execute(
                "INSERT OR IGNORE INTO batch_chunks (tenant, job, chunk, doc) VALUES (?, ?, ?, ?)",
                (tenant, job_id, result.index, CHUNK.to_json(result)),
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
        docs = self.db.all(
            "SELECT doc FROM batch_chunks WHERE tenant = ? AND job = ? ORDER BY chunk", tenant, job_id
        )
        return [CHUNK.load(d) for d in docs]

    def get_chunk(self, tenant: str, job_id: str, index: int) -> ChunkResult | None:
        doc = self.db.one(
            "SELECT doc FROM batch_chunks WHERE tenant = ? AND job = ? AND chunk = ?", tenant, job_id, int(index)
        )
        return None if doc is None else CHUNK.load(doc)
