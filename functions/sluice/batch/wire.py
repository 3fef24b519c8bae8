"""Batch jobs on the wire: what `POST /api/v1/batch-jobs` takes and every batch route returns,
and what the Step Functions tasks hand each other. Each is built from the domain objects
(`BatchJob`, `ChunkResult`) by attribute, not copied field by field."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import ConfigDict, Field, model_validator

from sluice.types.base import WireModel

if TYPE_CHECKING:
    from sluice.domain.jobs import BatchJob, ChunkResult

_FROM_JOB = ConfigDict(from_attributes=True)


class BatchJobCreate(WireModel):
    deployment: str = Field(description="The deployment that scores every row.")
    input_uri: str = Field(
        description=(
            "The input, in your inbox (s3://<batch bucket>/inbox/<tenant>/… on AWS): one object, a prefix "
            "ending in / (every object under it), or a .json manifest {\"files\": [uri, …]} whose objects "
            "lie in your inbox too."
        )
    )
    format: Literal["parquet", "csv", "jsonl"] | None = Field(
        None, description="The input's format; default: from the file name. Not given for a prefix or manifest."
    )
    output_format: Literal["parquet", "csv", "jsonl"] | None = Field(
        None, description="The format of the part files; default: the input's (Parquet for a prefix or manifest)."
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
    model_config = _FROM_JOB

    chunks_done: int
    chunks_total: int | None
    rows_done: int = Field(validation_alias="rows_in")  # every row read is done, scored or failed
    rows_total: int | None


class BatchCounts(WireModel):
    model_config = _FROM_JOB

    rows_in: int
    rows_out: int
    rows_failed: int


class BatchTimings(WireModel):
    model_config = _FROM_JOB

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

    model_config = _FROM_JOB
    GROUPS: ClassVar[tuple[str, ...]] = ("progress", "counts", "timings")

    @model_validator(mode="before")
    @classmethod
    def _grouped(cls, data: Any) -> Any:
        # A BatchJob keeps its counters flat; the wire groups them, each group read from the job.
        if isinstance(data, dict):
            return data
        flat = {name: getattr(data, name) for name in cls.model_fields if name not in cls.GROUPS}
        return flat | dict.fromkeys(cls.GROUPS, data)


class JobSummary(WireModel):
    """What Finalize and MarkFailed return to the state machine."""

    model_config = _FROM_JOB

    job_id: str = Field(validation_alias="id")
    status: str
    rows_in: int
    rows_out: int
    rows_failed: int
    output_uri: str
    error: str | None


class ChunkScored(WireModel):
    """What Score returns to the state machine for a chunk it scored."""

    model_config = _FROM_JOB

    index: int
    rows_in: int
    rows_out: int
    rows_failed: int
    recorded: bool = False  # False when it was recorded before (scored twice), or the job stopped


def job_out(job: BatchJob) -> dict[str, Any]:
    return BatchJobOut.model_validate(job).model_dump(mode="json")


def job_summary(job: BatchJob) -> dict[str, Any]:
    return JobSummary.model_validate(job).model_dump(mode="json")


def chunk_scored(result: ChunkResult, *, recorded: bool) -> dict[str, Any]:
    return ChunkScored.model_validate(result).model_copy(update={"recorded": recorded}).model_dump(mode="json")
