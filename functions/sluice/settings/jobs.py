"""The groups of work beside requests: batch scoring and its jobs, streams, data capture
and the endpoints deployments get."""

from __future__ import annotations

import re
from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from sluice.settings.process import DAY_S, Group, MiB

BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")  # S3's rule for a bucket's name


class BatchSettings(Group):
    """Read by the batch runner, which plans and scores chunks, and the local orchestrator."""

    title: ClassVar[str] = "Batch scoring"

    batch_chunk_rows: int = Field(
        default=250_000, gt=0, description="Rows per batch chunk (Parquet: whole row groups, merged up to it; a larger group is a chunk of its own)."
    )
    batch_chunk_bytes: int = Field(
        default=64 * MiB, ge=64 * 1024, description="Bytes per batch chunk of a CSV or JSON Lines input."
    )
    batch_infer_rows: int = Field(
        default=4096, gt=0, description="Rows per inference call while scoring a chunk."
    )
    batch_concurrency: int = Field(
        default=0, ge=0, description="Threads that score a local job (0: one per core): CSV and JSON Lines chunks that many at once, Parquet chunks one at a time with that many inference threads (two at a time when each is read in one piece and there are 2 threads or more)."
    )
    batch_max_request_bytes: int = Field(
        default=5 * MiB,
        gt=0,
        description="Largest request body a chunk sends to a SageMaker endpoint (InvokeEndpoint takes 6 MB).",
    )


class JobSettings(Group):
    """Read by the wiring, which builds the orchestrator, the schedules and the catalog of
    batch jobs, and by the batch functions."""

    title: ClassVar[str] = "Batch jobs"

    orchestrator: str = Field(
        default="",
        description="Who runs batch jobs: `local` (a thread pool in this process) or "
        "`stepfunctions://<state machine ARN>`; empty: local, and none on AWS.",
    )
    batch_bucket: str = Field(
        default="",
        description="The batch bucket (`inbox/`, `outbox/`, `work/`); empty: the folder `batch/` under home.",
    )
    schedule_group: str = Field(
        default="",
        description="The EventBridge Scheduler group batch schedules are created in (AWS); "
        "empty: schedules run in `sluice serve`.",
    )
    scheduler_role_arn: str = Field(
        default="",
        description="The role EventBridge Scheduler assumes to start the batch state machine (AWS).",
    )
    catalog_database: str = Field(
        default="",
        description="The AWS Glue database batch jobs may publish their output to (`catalog`); "
        "empty: any (the IAM policy decides).",
    )

    @model_validator(mode="after")
    def _check_orchestrator(self) -> JobSettings:
        # What each request would build from them is checked as the process starts: a value
        # found wrong on a request is a 500 for every tenant.
        if self.orchestrator not in ("", "local") and not self.orchestrator.startswith("stepfunctions://arn:"):
            raise ValueError("SLUICE_ORCHESTRATOR must be local or stepfunctions://STATE_MACHINE_ARN")
        if self.batch_bucket and not BUCKET.fullmatch(self.batch_bucket):
            raise ValueError(f"SLUICE_BATCH_BUCKET is an S3 bucket's name (my-batch-bucket), not {self.batch_bucket!r}")
        if self.schedule_group and (not self.orchestrator.startswith("stepfunctions://") or not self.scheduler_role_arn):
            raise ValueError("SLUICE_SCHEDULE_GROUP needs SLUICE_ORCHESTRATOR=stepfunctions://ARN and SLUICE_SCHEDULER_ROLE_ARN")
        return self


class StreamSettings(Group):
    """Read by the stream function and `sluice stream`."""

    title: ClassVar[str] = "Streams"

    streams: dict[str, Any] = Field(
        default_factory=dict,
        description=(
            "The stream function's bindings: JSON `{source: {tenant, deployment, destination: {kind, target}}}`, "
            "source a queue or stream ARN, `kafka:<topic>` or `*` (see the streaming guide)."
        ),
    )
    stream_batch_rows: int = Field(
        default=4096, gt=0, description="Rows per inference call at most while scoring stream records."
    )

    @field_validator("streams")
    @classmethod
    def _check_streams(cls, value: dict[str, Any]) -> dict[str, Any]:
        # Each binding read as the stream function reads it, now rather than on every invocation
        # (the bindings' models imported only where there are some: every process reads settings).
        if not value:
            return value
        from pydantic import ValidationError

        from sluice.domain.stream_bindings import Binding

        for source, spec in value.items():
            try:
                Binding.model_validate(spec)
            except ValidationError as exc:
                first = exc.errors()[0]
                where = ".".join(str(p) for p in first["loc"]) or "binding"
                raise ValueError(f"SLUICE_STREAMS: the binding of {source!r}: {where}: {first['msg']}") from None
        return value
    stream_max_wait_ms: float = Field(
        default=50.0, ge=0, le=DAY_S * 1000, description="How long `sluice stream` holds a partial micro-batch for more lines."
    )


class DataCaptureSettings(Group):
    """Read by the wiring, which builds data capture's sink and replay's reader."""

    title: ClassVar[str] = "Data capture"

    capture: str = Field(
        default="",
        description=(
            "Where data capture writes (deployments that turn it on): `file:///path` (JSON Lines "
            "under `tenant=/deployment=/dt=/hour=`), `firehose://stream-name`, or `off`; empty: "
            "`capture/` under home locally, off on AWS unless set (the CDK app sets it)."
        ),
    )
    @field_validator("capture")
    @classmethod
    def _check_capture(cls, value: str) -> str:
        ok = value in ("", "off") or (value.startswith("file://") and len(value) > 7) or (value.startswith("firehose://") and len(value) > 11)
        if not ok:
            raise ValueError(f"SLUICE_CAPTURE must be file:///PATH, firehose://STREAM or off, not {value!r}")
        return value

    capture_queue: int = Field(
        default=10_000,
        ge=1,
        description="Captured records waiting for the sink, at most, per process; past it a sampled record is dropped and counted.",
    )


class EndpointSettings(Group):
    """Read by the wiring, which builds the endpoint control plane (SageMaker or the local
    twin) and the SageMaker runtime."""

    title: ClassVar[str] = "Endpoints"

    endpoints: Literal["", "sagemaker", "local"] = Field(
        default="",
        description="Where `sluice endpoints deploy` puts a deployment's endpoint: `sagemaker` (SageMaker "
        "endpoints running Triton: real-time, asynchronous or inference components) or `local` (a local "
        "Triton per variant, CPU, with the SageMaker port on; real-time only); empty: local in local mode, "
        "sagemaker in aws mode.",
    )
    sagemaker_endpoint_url: str | None = Field(
        default=None,
        description="Send sagemaker-runtime calls here instead of AWS, e.g. the local Triton's SageMaker port.",
    )
    sagemaker_execution_role_arn: str | None = Field(
        default=None,
        description=(
            "IAM role SageMaker endpoints run as: it pulls the Triton image and reads model.tar.gz "
            "from the artifact store. Needed to deploy endpoints."
        ),
    )
    sagemaker_triton_version: str = Field(
        default="25.09",
        description="Version of SageMaker's Triton image for new endpoints, as the SageMaker SDK's image registry lists it.",
    )
    sagemaker_triton_image: str | None = Field(
        default=None,
        description="An image URI to run instead of the registry's Triton image (e.g. a copy in your own ECR).",
    )
