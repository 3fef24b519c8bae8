"""Optimize jobs in SQLite: one row per job, its status and time in columns (for the checked
move and the newest-first list), the rest its JSON document."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from sluice.registry.codec import OPTIMIZE_JOB
from sluice.registry.refusals import check_updatable, no_optimize_job, taken
from sluice.registry.sqlite.connection import Part

if TYPE_CHECKING:
    from sluice.domain.optimize_jobs import OptimizeJob, OptimizeStatus


class SqliteOptimizeJobs(Part):
    # The domain's rules are imported where a job is written: a process that never writes one
    # (a batch run, a server) does not import them.
    def create_optimize_job(self, job: OptimizeJob) -> OptimizeJob:
        from sluice.domain.optimize_jobs import bounded

        job = bounded(job)
        self.insert(
            "INSERT INTO optimize_jobs (tenant, id, status, created_at, doc) VALUES (?, ?, ?, ?, ?)",
            (job.tenant, job.id, job.status, job.created_at, OPTIMIZE_JOB.to_json(job)),
            taken=taken("optimize job", job.id, field="id"),
        )
        return job

    def get_optimize_job(self, tenant: str, job_id: str) -> OptimizeJob:
        sql = "SELECT doc FROM optimize_jobs WHERE tenant = ? AND id = ?"
        return OPTIMIZE_JOB.load(self.found(sql, tenant, job_id, missing=no_optimize_job(job_id)))

    def list_optimize_jobs(self, tenant: str, *, limit: int = 100) -> list[OptimizeJob]:
        docs = self.db.all(
            "SELECT doc FROM optimize_jobs WHERE tenant = ? ORDER BY created_at DESC, id DESC LIMIT ?",
            tenant, int(limit),
        )  # fmt: skip
        return [OPTIMIZE_JOB.load(d) for d in docs]

    def update_optimize_job(
        self, tenant: str, job_id: str, *, status: OptimizeStatus | None = None, **fields: object
    ) -> OptimizeJob:
        from sluice.domain.optimize_jobs import UPDATABLE, bounded, check_optimize_move

        check_updatable("optimize job", fields, UPDATABLE)
        with self.db.tx() as db:
            row = db.execute("SELECT doc FROM optimize_jobs WHERE tenant = ? AND id = ?", (tenant, job_id)).fetchone()
            if row is None:
                raise no_optimize_job(job_id)
            current = OPTIMIZE_JOB.from_json(row[0])
            target = status or current.status
            check_optimize_move(job_id, current.status, target)
            updated = bounded(replace(current, status=target, **fields))  # type: ignore[arg-type]
            db.execute(
                "UPDATE optimize_jobs SET status = ?, doc = ? WHERE tenant = ? AND id = ?",
                (target, OPTIMIZE_JOB.to_json(updated), tenant, job_id),
            )
        return updated
