"""Batch jobs and their chunks in DynamoDB.

A job's status moves with a SET conditioned on the status read just before; a chunk is recorded
in one transaction that puts its item (only if absent) and ADDs its counts to the job (only
while RUNNING), so a chunk scored twice counts once.

The output folder an unfinished job holds is an item of its own, put in the same transaction
as the job, on the condition that no job holds it (or that the one holding it is the one the
caller found finished: `replacing`). The job's last move releases it: its `job` is removed on
the condition that it is still this job's, and it expires. A release lost to a crash leaves a
hold naming a finished job, which the next taker replaces.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

from sluice.domain.jobs import TERMINAL, UPDATABLE, OutputInUse, check_move
from sluice.domain.objects import now
from sluice.registry.codec import CHUNK, JOB
from sluice.registry.dynamodb import layout
from sluice.registry.dynamodb.table import (
    Part,
    Refused,
    absent,
    condition,
    item,
    key,
    set_fields,
    unmarshal,
)
from sluice.registry.refusals import check_updatable, no_job, taken

if TYPE_CHECKING:
    from sluice.domain.jobs import BatchJob, ChunkResult, JobStatus


RELEASED_KEPT_S = 3600  # a released hold lingers this long, then DynamoDB's time to live removes it


class DynamoJobs(Part):
    def create_job(self, job: BatchJob, *, replacing: str | None = None) -> BatchJob:
        record = item(layout.tenant(job.tenant), layout.job_sk(job.id), JOB.dump(job))
        exists = taken("batch job", job.id, field="id")
        if job.terminal:  # a job refused at its start holds nothing
            self.put_new(record, taken=exists)
            return job
        free = "attribute_not_exists(#job)" + (" OR #job = :replacing" if replacing else "")
        hold = item(
            layout.tenant(job.tenant), layout.output_sk(job.output_uri), {"uri": job.output_uri, "job": job.id}
        )

        def step() -> BatchJob:
            try:
                self.table.send(
                    "transact_write_items",
                    TransactItems=[
                        {"Put": {"TableName": self.table.name, "Item": record, **absent()}},
                        {"Put": {"TableName": self.table.name, "Item": hold,
                                 **condition(free, {"#job": "job"}, {":replacing": replacing} if replacing else None)}},
                    ],
                )  # fmt: skip
            except Refused as refused:
                if refused.reasons[:1] == ["ConditionalCheckFailed"]:
                    raise exists from None
                holder = self.output_holder(job.tenant, job.output_uri)
                if holder is None or holder == replacing:
                    raise  # released meanwhile: try again
                raise OutputInUse(f"batch job '{holder}' writes to this output folder", holder=holder) from None
            return job

        created: BatchJob = self.table.optimistic(step)
        return created

    def output_holder(self, tenant: str, output_uri: str) -> str | None:
        found = self.table.get(layout.tenant(tenant), layout.output_sk(output_uri))
        return None if found is None or "job" not in found else str(found["job"])

    def _release(self, tenant: str, output_uri: str, job_id: str) -> None:
        with contextlib.suppress(Refused):  # not this job's (taken over), or never held
            self.table.send(
                "update_item",
                TableName=self.table.name,
                Key=key(layout.tenant(tenant), layout.output_sk(output_uri)),
                UpdateExpression="SET expires_at = :later REMOVE #job",
                **condition("#job = :me", {"#job": "job"}, {":me": job_id, ":later": int(now()) + RELEASED_KEPT_S}),
            )

    def get_job(self, tenant: str, job_id: str) -> BatchJob:
        return JOB.load(self.found(layout.tenant(tenant), layout.job_sk(job_id), missing=no_job(job_id)))

    def list_jobs(self, tenant: str, *, limit: int = 100, schedule: str | None = None) -> list[BatchJob]:
        jobs = (JOB.load(d) for d in self.table.query(layout.tenant(tenant), layout.JOB))
        return self.newest((j for j in jobs if schedule is None or j.schedule == schedule), limit)

    def update_job(
        self, tenant: str, job_id: str, *, status: JobStatus | None = None, **fields: object
    ) -> BatchJob:
        check_updatable("batch job", fields, UPDATABLE)

        def step() -> BatchJob:
            current = self.get_job(tenant, job_id)
            target = status or current.status
            check_move(job_id, current.status, target)
            changes = {"status": target, **fields}
            expression, names, values = set_fields(changes)
            updated = self.table.send(
                "update_item",
                TableName=self.table.name,
                Key=key(layout.tenant(tenant), layout.job_sk(job_id)),
                UpdateExpression=expression,
                ReturnValues="ALL_NEW",
                **condition("#was = :was", names | {"#was": "status"}, values | {":was": current.status}),
            )
            return JOB.load(unmarshal(updated["Attributes"]))

        # A refusal means the status moved meanwhile: decide again from a fresh read.
        job: BatchJob = self.table.optimistic(step)
        if job.status in TERMINAL:  # the last move: let go of the output folder
            self._release(tenant, job.output_uri, job_id)
        return job

    def record_chunk(self, tenant: str, job_id: str, result: ChunkResult) -> bool:
        chunk = item(layout.chunks_pk(tenant, job_id), layout.chunk_sk(result.index), CHUNK.dump(result))
        counts = {":one": 1, ":in": result.rows_in, ":out": result.rows_out, ":failed": result.rows_failed}
        try:
            self.table.send(
                "transact_write_items",
                TransactItems=[
                    {"Put": {"TableName": self.table.name, "Item": chunk, **absent()}},
                    {
                        "Update": {
                            "TableName": self.table.name,
                            "Key": key(layout.tenant(tenant), layout.job_sk(job_id)),
                            "UpdateExpression": "ADD chunks_done :one, rows_in :in, "
                            "rows_out :out, rows_failed :failed",
                            **condition(
                                "#status = :running", {"#status": "status"},
                                counts | {":running": "RUNNING"},
                            ),
                        }
                    },
                ],
            )  # fmt: skip
        except Refused:
            return False  # recorded before, or the job is no longer running
        return True

    def list_chunks(self, tenant: str, job_id: str) -> list[ChunkResult]:
        return [CHUNK.load(d) for d in self.table.query(layout.chunks_pk(tenant, job_id), layout.CHUNK)]

    def get_chunk(self, tenant: str, job_id: str, index: int) -> ChunkResult | None:
        found = self.table.get(layout.chunks_pk(tenant, job_id), layout.chunk_sk(index))
        return None if found is None else CHUNK.load(found)
