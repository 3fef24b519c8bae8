"""The batch wire shapes, built from the domain objects: what the API and CLI print for a job,
and what the Step Functions tasks return, field for field."""

from __future__ import annotations

from sluice.batch.wire import BatchJobOut, chunk_scored, job_out, job_summary
from sluice.domain.jobs import BatchJob, ChunkResult

JOB = BatchJob(
    id="job-1", tenant="acme", deployment="iris", input_uri="s3://b/inbox/acme/iris/day.csv",
    output_uri="s3://b/outbox/acme/job-1/", format="csv", output_format="parquet", key_columns=("id",),
    status="FAILED", source="upload", created_by="key-1", execution="arn:exec", chunks_total=3, chunks_done=2,
    rows_total=10, rows_in=7, rows_out=5, rows_failed=2, created_at=1.0, started_at=1.5, finished_at=2.25, error="boom",
    revision=3,
)  # fmt: skip


def test_a_job_on_the_wire_groups_its_counters_and_keeps_its_own_fields_private() -> None:
    assert job_out(JOB) == {
        "id": "job-1", "status": "FAILED", "deployment": "iris", "revision": 3, "refs": None, "input_uri": "s3://b/inbox/acme/iris/day.csv",
        "output_uri": "s3://b/outbox/acme/job-1/", "format": "csv", "output_format": "parquet", "key_columns": ["id"],
        "source": "upload",
        "progress": {"chunks_done": 2, "chunks_total": 3, "rows_done": 7, "rows_total": 10},
        "counts": {"rows_in": 7, "rows_out": 5, "rows_failed": 2},
        "timings": {"created_at": 1.0, "started_at": 1.5, "finished_at": 2.25},
        "error": "boom", "schedule": None, "catalog": None, "publish": None,
    }  # fmt: skip
    assert list(job_out(JOB)) == list(BatchJobOut.model_fields)  # the documented order
    assert BatchJobOut.model_validate(job_out(JOB)).model_dump(mode="json") == job_out(JOB)  # a client reads it back


def test_the_state_machine_gets_the_same_summaries_as_before() -> None:
    assert job_summary(JOB) == {
        "job_id": "job-1", "status": "FAILED", "rows_in": 7, "rows_out": 5, "rows_failed": 2,
        "output_uri": "s3://b/outbox/acme/job-1/", "error": "boom",
        "manifest_uri": "s3://b/outbox/acme/job-1/_manifest.json",
    }  # fmt: skip
    result = ChunkResult(index=4, rows_in=100, rows_out=98, rows_failed=2, part="s3://b/p", errors="s3://b/e", versions={"iris:1": 98}, seconds=0.5)
    assert chunk_scored(result, recorded=True) == {"index": 4, "rows_in": 100, "rows_out": 98, "rows_failed": 2, "recorded": True}
    assert chunk_scored(result, recorded=False)["recorded"] is False
