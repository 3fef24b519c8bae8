"""Batch jobs on the wire: what `POST /api/v1/batch-jobs` takes and every batch route returns,
and what the Step Functions tasks hand each other. Each is built from the domain objects
(`BatchJob`, `ChunkResult`) by attribute, not copied field by field. Schedules' are in
`sluice.batch.schedule_wire`: a batch run or a Score task builds none of them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal

from pydantic import ConfigDict, Field, computed_field, model_validator

from sluice.domain.jobs import KEY_COLUMN_CHARS, MAX_KEY_COLUMNS, MAX_PUBLISH_TTL_S, PUBLISH_TTL_S
from sluice.types.base import WireModel

if TYPE_CHECKING:
    from sluice.batch.schedule_wire import ScheduleCreate
    from sluice.domain.jobs import BatchJob, ChunkResult
    from sluice.domain.locations import Roots

_FROM_JOB = ConfigDict(from_attributes=True)
# Checked by the services (`check_key_columns`), which the CLI calls too: a 400 naming the field.
KeyColumns = Annotated[list[str], Field(
    description=f"Input columns copied beside each prediction (at most {MAX_KEY_COLUMNS}, each name at most "
    f"{KEY_COLUMN_CHARS} characters); default: the row number as `row`.",
)]  # fmt: skip


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
    key_columns: KeyColumns = Field(default_factory=list)
    catalog: CatalogIn | None = Field(
        None, description="Publish the output, once the job succeeds, as a partition of this Glue table."
    )
    publish: PublishIn | None = Field(
        None, description="Publish the answers, once the job succeeds, into this table of precomputed answers (by the key column)."
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


class CatalogIn(WireModel):
    database: str = Field(pattern=r"^[a-z0-9_]{1,128}$", description="The AWS Glue database.")
    table: str = Field(pattern=r"^[a-z0-9_]{1,128}$", description="The table, created on first use.")

    model_config = {"extra": "forbid", "from_attributes": True}


class PublishIn(WireModel):
    table: str = Field(pattern=r"^[a-z0-9][a-z0-9._-]{0,62}$", description="The table `precomputed` nodes name.")
    key: str = Field(min_length=1, max_length=128, description="The input column holding each row's entity (a row without one fails).")
    ttl_s: int = Field(PUBLISH_TTL_S, ge=60, le=MAX_PUBLISH_TTL_S, description="How long the answers are kept (seconds).")

    model_config = {"extra": "forbid", "from_attributes": True}


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
    revision: int | None = Field(
        None, description="The deployment's revision every row is scored by: its policy as it stood when the job started "
        "(none before then), whatever the deployment becomes meanwhile.",
    )
    refs: dict[str, int] | None = Field(
        None, description="The revisions of the deployments that policy references (`ref`), and those they reference, "
        "pinned with it: every row follows each reference at its revision here (none before the job started).",
    )
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
    schedule: str | None = Field(None, description="The schedule whose run this job is, if any.")
    catalog: CatalogIn | None = Field(None, description="The Glue table a success is published to.")
    publish: PublishIn | None = Field(None, description="The table of precomputed answers a success is published into.")

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



class BatchErrorsOut(WireModel):
    """The first rows of a job's error files (`GET /api/v1/batch-jobs/{id}/errors`)."""

    job: str
    rows_failed: int = Field(description="Rows the job has failed so far, in all its error files.")
    rows: list[dict[str, Any]] = Field(
        description="The first rows, in chunk order: `row` (its number in the input), the key columns, "
        "`reason`, and `input` (the raw line) for a text row that did not parse."
    )
    files: list[str] = Field(description="The error files these rows were read from.")
    truncated: bool = Field(description="True when the job failed more rows than these.")


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

    @computed_field  # type: ignore[prop-decorator]
    @property
    def manifest_uri(self) -> str:
        """Where the job's manifest is (Finalize and MarkFailed write it)."""
        return self.output_uri.rstrip("/") + "/_manifest.json"


class ChunkScored(WireModel):
    """What Score returns to the state machine for a chunk it scored."""

    model_config = _FROM_JOB

    index: int
    rows_in: int
    rows_out: int
    rows_failed: int
    recorded: bool = False  # False when it was recorded before (scored twice), or the job stopped


def job_out(job: BatchJob, roots: Roots | None = None) -> dict[str, Any]:
    """A job as a response shows it: with `roots` (the API), its locations relative to the
    tenant's roots (`inbox/…`) and its error with no server path (see `Roots.shown`)."""
    out = BatchJobOut.model_validate(job).model_dump(mode="json")
    if roots is not None:
        out["input_uri"], out["output_uri"] = roots.shown(job.input_uri), roots.shown(job.output_uri)
        out["error"] = roots.scrub(job.error)
    return out


def job_summary(job: BatchJob) -> dict[str, Any]:
    return JobSummary.model_validate(job).model_dump(mode="json")


def chunk_scored(result: ChunkResult, *, recorded: bool) -> dict[str, Any]:
    return ChunkScored.model_validate(result).model_copy(update={"recorded": recorded}).model_dump(mode="json")


def job_fields(body: BatchJobCreate | ScheduleCreate) -> dict[str, Any]:
    """What a create body says of the jobs it runs (the deployment, the input, the formats,
    the key columns, the catalog table), as `BatchService.submit` and `ScheduleService.create`
    take it."""
    return {
        "deployment": body.deployment,
        "input_uri": body.input_uri,
        "format": body.format,
        "output_format": body.output_format,
        "key_columns": body.key_columns,
        "catalog": body.catalog.model_dump() if body.catalog else None,
        "publish": body.publish.model_dump() if body.publish else None,
    }
