"""Batch jobs on the wire: what `POST /api/v1/batch-jobs` takes and every batch route returns."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

from sluice.types.base import WireModel

if TYPE_CHECKING:
    from sluice.domain.jobs import BatchJob


class BatchJobCreate(WireModel):
    deployment: str = Field(description="The deployment that scores every row.")
    input_uri: str = Field(
        description="The input file, in your inbox: s3://<batch bucket>/inbox/<tenant>/… on AWS."
    )
    format: Literal["parquet", "csv", "jsonl"] | None = Field(
        None, description="The input's format; default: from the file name."
    )
    output_format: Literal["parquet", "csv", "jsonl"] | None = Field(
        None, description="The format of the part files; default: the input's."
    )
    key_columns: list[str] = Field(
        default_factory=list,
        max_length=16,
        description="Input columns copied beside each prediction; default: the row number as `row`.",
    )

    model_config = {
        "json_schema_extra": {
            "examples": [
                {
                    "deployment": "iris",
                    "input_uri": "s3://sluice-batch-123456789012-eu-west-1/inbox/acme/iris/2026-11-21.parquet",
                    "key_columns": ["customer_id"],
                }
            ]
        },
        "extra": "forbid",
    }


class BatchProgress(WireModel):
    chunks_done: int
    chunks_total: int | None
    rows_done: int
    rows_total: int | None


class BatchCounts(WireModel):
    rows_in: int
    rows_out: int
    rows_failed: int


class BatchTimings(WireModel):
    created_at: float
    started_at: float | None
    finished_at: float | None


class BatchJobOut(WireModel):
    id: str
    status: Literal["PENDING", "RUNNING", "SUCCEEDED", "FAILED", "CANCELLED"]
    deployment: str
    input_uri: str
    output_uri: str
    format: str
    output_format: str
    key_columns: list[str]
    source: str
    progress: BatchProgress
    counts: BatchCounts
    timings: BatchTimings
    error: str | None = None


def job_out(job: BatchJob) -> dict[str, Any]:
    return {
        "id": job.id,
        "status": job.status,
        "deployment": job.deployment,
        "input_uri": job.input_uri,
        "output_uri": job.output_uri,
        "format": job.format,
        "output_format": job.output_format,
        "key_columns": list(job.key_columns),
        "source": job.source,
        "progress": {
            "chunks_done": job.chunks_done,
            "chunks_total": job.chunks_total,
            "rows_done": job.rows_in,
            "rows_total": job.rows_total,
        },
        "counts": {"rows_in": job.rows_in, "rows_out": job.rows_out, "rows_failed": job.rows_failed},
        "timings": {"created_at": job.created_at, "started_at": job.started_at, "finished_at": job.finished_at},
        "error": job.error,
    }
