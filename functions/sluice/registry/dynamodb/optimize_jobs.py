"""Optimize jobs in DynamoDB: one item per job in the tenant's partition (`pk=T#<tenant>`,
`sk=OJ#<id>`). The report is kept as one string of JSON, so its stored size is its byte count
(the domain bounds it well under the 400 KB item) and it reads back as it was written, floats
and all. A change rewrites the item on the condition that the status is still the one read
just before: a job another writer finished meanwhile is decided again from a fresh read."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from sluice.domain.optimize_jobs import UPDATABLE, bounded, check_optimize_move
from sluice.registry.codec import OPTIMIZE_JOB, to_json
from sluice.registry.dynamodb import layout
from sluice.registry.dynamodb.table import Part, condition, item
from sluice.registry.refusals import check_updatable, no_optimize_job, taken

if TYPE_CHECKING:
    from sluice.domain.optimize_jobs import OptimizeJob, OptimizeStatus


def _item(job: OptimizeJob) -> dict[str, Any]:
    record = OPTIMIZE_JOB.dump(job)
    if record["report"] is not None:
        record["report"] = to_json(record["report"])
    return item(layout.tenant(job.tenant), layout.optimize_job_sk(job.id), record)


def _load(found: dict[str, Any]) -> OptimizeJob:
    if isinstance(found.get("report"), str):
        found = found | {"report": json.loads(found["report"])}
    return OPTIMIZE_JOB.load(found)


class DynamoOptimizeJobs(Part):
    def create_optimize_job(self, job: OptimizeJob) -> OptimizeJob:
        job = bounded(job)
        self.put_new(_item(job), taken=taken("optimize job", job.id, field="id"))
        return job

    def get_optimize_job(self, tenant: str, job_id: str) -> OptimizeJob:
        return _load(self.found(layout.tenant(tenant), layout.optimize_job_sk(job_id), missing=no_optimize_job(job_id)))

    def list_optimize_jobs(self, tenant: str, *, limit: int = 100) -> list[OptimizeJob]:
        return self.newest((_load(d) for d in self.table.query(layout.tenant(tenant), layout.OPTIMIZE_JOB)), limit)

    def update_optimize_job(
        self, tenant: str, job_id: str, *, status: OptimizeStatus | None = None, **fields: object
    ) -> OptimizeJob:
        check_updatable("optimize job", fields, UPDATABLE)

        def step() -> OptimizeJob:
            current = self.get_optimize_job(tenant, job_id)
            target = status or current.status
            check_optimize_move(job_id, current.status, target)
            updated = bounded(replace(current, status=target, **fields))  # type: ignore[arg-type]
            self.table.send(
                "put_item", TableName=self.table.name, Item=_item(updated),
                **condition("#status = :was", {"#status": "status"}, {":was": current.status}),
            )  # fmt: skip
            return updated

        # A refusal means the status moved meanwhile (or the job is gone): decide again.
        job: OptimizeJob = self.table.optimistic(step)
        return job
