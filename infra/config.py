"""What a deployment of sluice looks like, read from one YAML file (`infra/sluice.yaml`).

Every knob a platform engineer turns without writing CDK lives here: throttling and quotas,
batch concurrency, retention, alarms, and the GPU endpoints. A few settings can also be
given on the command line as CDK context (`cdk synth -c sluice:architecture=arm64`):
`sluice:config` (another file), `sluice:architecture` and `sluice:python`.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

DEFAULT_CONFIG = Path(__file__).with_name("sluice.yaml")

# The values CloudWatch Logs accepts for a log group's retention.
LOG_RETENTION_DAYS = (
    1,
    3,
    5,
    7,
    14,
    30,
    60,
    90,
    120,
    150,
    180,
    365,
    400,
    545,
    731,
    1096,
    1827,
    2192,
    2557,
    2922,
    3288,
    3653,
)

_TENANT = r"^[a-z0-9][a-z0-9._-]{0,62}$"
_SAGEMAKER_NAME = r"^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,47}$"


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class FunctionsConfig(_Section):
    architecture: Literal["x86_64", "arm64"] = Field(
        "x86_64", description="CPU architecture of every function and of the wheels in its layers."
    )
    python: Literal["3.12", "3.13", "3.14"] = Field(
        "3.14",
        description="Lambda Python runtime; layers are built for this version. Each value "
        "synthesizes: below the newest, cdk-nag's latest-runtime rules are acknowledged.",
    )
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    snap_start: bool = Field(
        True,
        description="Lambda SnapStart on the functions that answer requests (API, shadow): "
        "each deployment publishes a version, invoked through the `live` alias.",
    )
    preload: list[str] = Field(
        default_factory=list,
        description="Deployments (`tenant/name`) the SnapStart functions load before the "
        "snapshot (SLUICE_PRELOAD).",
    )
    preload_max_mb: int = Field(
        256, ge=0, description="Bound on the artifact MiB `preload` loads (SLUICE_PRELOAD_MAX_BYTES)."
    )

    @field_validator("preload")
    @classmethod
    def _tenant_slash_name(cls, value: list[str]) -> list[str]:
        for entry in value:
            tenant, slash, name = entry.partition("/")
            if not (slash and tenant and name) or "/" in name:
                raise ValueError(f"preload entries are tenant/deployment, not {entry!r}")
        return value


class StorageConfig(_Section):
    retain_data: bool = Field(
        True, description="Keep buckets and the table when their stack is deleted (recommended)."
    )
    inbox_expiry_days: int = Field(
        30, ge=1, description="Delete batch inputs under inbox/ after this."
    )
    outbox_expiry_days: int = Field(
        30, ge=1, description="Delete batch outputs under outbox/ after this."
    )
    work_expiry_days: int = Field(
        14, ge=1, description="Delete batch work files (chunk lists, map results) after this."
    )
    noncurrent_artifact_expiry_days: int = Field(
        90, ge=1, description="Delete overwritten or deleted artifact versions after this."
    )
    access_log_expiry_days: int = Field(
        365, ge=1, description="Delete S3 server access logs after this."
    )
    noncurrent_batch_expiry_days: int = Field(
        3,
        ge=1,
        description="Delete overwritten, deleted or expired batch files (the bucket is "
        "versioned, so a mistaken delete can be undone) after this.",
    )
    noncurrent_access_log_expiry_days: int = Field(
        7, ge=1, description="Delete deleted or expired access-log versions after this."
    )
    async_result_expiry_days: int = Field(
        7,
        ge=1,
        description="Delete asynchronous predictions' inputs, answers and errors (under "
        "artifacts/results/) after this; sluice stops serving them after 7 days either way.",
    )
    capture_expiry_days: int = Field(
        30, ge=1, description="Delete captured requests under capture/ in the batch bucket after this."
    )
    upload_expiry_days: int = Field(
        1,
        ge=1,
        description="Delete uploaded request bodies (under artifacts/uploads/) after this; sluice "
        "stops taking them in predictions an hour after they are made (SLUICE_UPLOAD_TTL_S).",
    )
    upload_cors_origins: tuple[str, ...] = Field(
        (),
        description="Web origins (https://app.example.com) whose pages may post uploads' presigned "
        "forms to the artifacts bucket (a CORS rule for POST); none: no CORS rule.",
    )

    @field_validator("upload_cors_origins")
    @classmethod
    def _origins(cls, origins: tuple[str, ...]) -> tuple[str, ...]:
        for origin in origins:
            if not re.fullmatch(r"https?://[^/\s*]+", origin):
                raise ValueError(f"{origin!r} is not an origin such as https://app.example.com (no path, no wildcard)")
        return origins


class PlanLimits(_Section):
    rate_limit: float = Field(gt=0, description="Steady-state requests per second.")
    burst_limit: int = Field(gt=0, description="Requests allowed in a burst.")
    quota: int | None = Field(None, gt=0, description="Requests per quota period; none: unlimited.")
    quota_period: Literal["DAY", "WEEK", "MONTH"] = "DAY"


class TenantPlan(PlanLimits):
    tenant: str = Field(pattern=_TENANT)


class ApiConfig(_Section):
    stage_name: str = Field("v1", pattern=r"^[a-zA-Z0-9_]{1,64}$")
    rate_limit: float = Field(200, gt=0, description="Stage-wide steady-state requests per second.")
    burst_limit: int = Field(400, gt=0, description="Stage-wide burst.")
    default_plan: PlanLimits = PlanLimits(rate_limit=50, burst_limit=100)
    tenants: tuple[TenantPlan, ...] = Field(
        (), description="Tenants with a usage plan of their own; all others share default_plan."
    )
    memory_mb: int = Field(2048, ge=128, le=10240)
    timeout_s: int = Field(
        30,
        ge=1,
        le=900,
        description="API function timeout; API Gateway gives up after 29 s anyway.",
    )
    authorizer_memory_mb: int = Field(512, ge=128, le=10240)
    prediction_cache_shared: bool = Field(
        False,
        description="Share the prediction cache of deployments that turn it on between Lambda "
        "containers, through DynamoDB (one read per miss, one write per computed answer).",
    )
    shadow_memory_mb: int = Field(2048, ge=128, le=10240)
    shadow_timeout_s: int = Field(120, ge=1, le=900)
    execution_log_level: Literal["OFF", "ERROR", "INFO"] = Field(
        "OFF",
        description="API Gateway execution logs. Needs the account's API Gateway CloudWatch "
        "role to be set already; access logs are always on.",
    )

    @field_validator("tenants")
    @classmethod
    def _unique_tenants(cls, tenants: tuple[TenantPlan, ...]) -> tuple[TenantPlan, ...]:
        names = [t.tenant for t in tenants]
        if len(names) != len(set(names)):
            raise ValueError("each tenant may have one usage plan")
        return tenants


_ONE_RATE = r"\s*[1-9][0-9]*\s*(?:/|per)\s*(?:[1-9][0-9]*\s*)?(?:second|minute|hour|day)s?\s*"
_CONNECTION_RATE = rf"^(?:{_ONE_RATE}(?:[;,]{_ONE_RATE})*)?$"


class WebSocketConfig(_Section):
    """Predictions over a WebSocket (API Gateway WebSocket API -> the websocket function)."""

    enabled: bool = Field(False, description="Create the WebSocket API (`wss://…/<stage>`).")
    stage_name: str = Field("v1", pattern=r"^[a-zA-Z0-9_]{1,64}$")
    rate_limit: float = Field(
        100, gt=0, description="Messages per second for the whole stage (each message is an invocation)."
    )
    burst_limit: int = Field(200, gt=0)
    connection_rate_limit: str = Field(
        "100/second",
        pattern=_CONNECTION_RATE,
        description="Messages one connection may send (`100/second`, `600 per minute;20/second`), "
        "counted in the registry across the function's containers; empty: off.",
    )
    memory_mb: int = Field(2048, ge=128, le=10240)
    timeout_s: int = Field(
        29, ge=1, le=29, description="One message's budget (API Gateway's integration limit is 29 s)."
    )
    reserved_concurrency: int | None = Field(
        50, ge=1, description="Reserved concurrency of the websocket function (null: the shared pool)."
    )


class BatchConfig(_Section):
    max_concurrency: int = Field(40, ge=1, le=10000, description="Chunks scored at once.")
    tolerated_failure_percentage: float = Field(
        0, ge=0, le=100, description="Share of chunks that may fail before the job fails."
    )
    child_execution_type: Literal["STANDARD", "EXPRESS"] = Field(
        "STANDARD", description="EXPRESS is cheaper but caps one chunk at 5 minutes."
    )
    execution_timeout_hours: int = Field(24, ge=1, le=8760)
    plan_memory_mb: int = Field(1024, ge=128, le=10240)
    plan_timeout_s: int = Field(300, ge=1, le=900)
    score_memory_mb: int = Field(3008, ge=128, le=10240)
    score_timeout_s: int = Field(900, ge=1, le=900)
    catalog_database: str = Field(
        "sluice_batch",
        pattern=r"^[a-z0-9_]{1,128}$",
        description="The Glue database (made by the stack) jobs with `catalog` publish their output "
        "to, as partitions of tables created on first use; Finalize may write in it and no other.",
    )


# Lambda keeps this much of an account's concurrency unreserved, whatever functions reserve.
UNRESERVED_MINIMUM = 100
BATCH_FUNCTIONS = (
    "batch_create_job",
    "batch_plan",
    "batch_score",
    "batch_finalize",
    "batch_mark_failed",
    "batch_on_upload",
)


class ConcurrencyConfig(_Section):
    """Reserved concurrency per function: each is both guaranteed and capped at its value, so
    a large batch job cannot take the concurrency the API needs (and the API cannot starve
    batch). `null` leaves a function in the shared, unreserved pool."""

    account_limit: int = Field(
        1000,
        ge=UNRESERVED_MINIMUM,
        description="The account's Lambda concurrency quota in the region (Service Quotas).",
    )
    api: int | None = Field(300, ge=1, description="The API function.")
    authorizer: int | None = Field(
        100, ge=1, description="Called once per request (no gateway cache), briefly."
    )
    shadow: int | None = Field(20, ge=1, description="Shadow mirrors, off the request path.")
    batch_create_job: int | None = Field(
        5, ge=1, description="One invoke per execution started with a job specification."
    )
    batch_plan: int | None = Field(5, ge=1)
    batch_score: int | None = Field(
        40, ge=1, description="At least batch.max_concurrency, or chunks wait on throttles."
    )
    batch_finalize: int | None = Field(5, ge=1)
    batch_mark_failed: int | None = Field(5, ge=1)
    batch_on_upload: int | None = Field(10, ge=1, description="One invoke per uploaded file.")
    rollouts: int | None = Field(
        1, ge=1, description="The rollout controller, invoked once a minute; its looks need no overlap."
    )

    def reserved(self, purpose: str) -> int | None:
        """The reservation of the function named `purpose` (`api`, `batch-score`, ...)."""
        return getattr(self, purpose.replace("-", "_"))

    @property
    def batch_total(self) -> int:
        return sum(getattr(self, name) or 0 for name in BATCH_FUNCTIONS)

    @property
    def total(self) -> int:
        return sum(v or 0 for k, v in self.model_dump().items() if k != "account_limit")

    @model_validator(mode="after")
    def _fits(self) -> ConcurrencyConfig:
        if self.total > self.account_limit - UNRESERVED_MINIMUM:
            raise ValueError(
                f"reserved concurrency adds up to {self.total}, but Lambda keeps "
                f"{UNRESERVED_MINIMUM} of the account's {self.account_limit} unreserved: "
                f"at most {self.account_limit - UNRESERVED_MINIMUM} may be reserved"
            )
        if self.api is not None and self.batch_total >= self.api:
            raise ValueError(
                f"batch functions reserve {self.batch_total} in all, which must stay below "
                f"the API's {self.api}"
            )
        return self


class AlarmsConfig(_Section):
    topic: bool = Field(False, description="Create an SNS topic that every alarm notifies.")
    emails: tuple[str, ...] = Field((), description="Addresses subscribed to the topic.")
    api_5xx_percent: float = Field(1.0, gt=0, le=100)
    api_p99_latency_ms: float = Field(5000, gt=0)
    lambda_errors: int = Field(5, ge=1, description="Errors per function in 5 minutes.")
    lambda_throttles: int = Field(1, ge=1, description="Throttles per function in 5 minutes.")
    batch_failures: int = Field(1, ge=1, description="Failed executions in 5 minutes.")
    stream_error_percent: float = Field(
        5.0, gt=0, le=100, description="Share of a stream function's invocations that failed."
    )

    @property
    def wants_topic(self) -> bool:
        return self.topic or bool(self.emails)


class EndpointVariant(_Section):
    name: str = Field("primary", pattern=_SAGEMAKER_NAME)
    model_data_key: str = Field(
        pattern=r"^[^/].*model\.tar\.gz$",
        description="Key of the Triton model repository archive in the artifacts bucket.",
    )
    model_name: str = Field(description="SAGEMAKER_TRITON_DEFAULT_MODEL_NAME: the model to serve.")
    instance_type: str = Field(pattern=r"^ml\.[a-z0-9]+\.[a-z0-9]+$")
    initial_instance_count: int = Field(1, ge=1)
    weight: float = Field(1.0, ge=0)
    min_instances: int = Field(1, ge=0, description="0 only on an asynchronous endpoint.")
    max_instances: int = Field(1, ge=1)
    target_invocations_per_instance: float = Field(
        100, gt=0, description="Auto scaling target for SageMakerVariantInvocationsPerInstance."
    )
    environment: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _bounds(self) -> EndpointVariant:
        if not self.min_instances <= self.initial_instance_count <= self.max_instances:
            raise ValueError("need min_instances <= initial_instance_count <= max_instances")
        return self


class AsyncInference(_Section):
    """SageMaker asynchronous inference: requests queue, inputs and answers travel through S3."""

    tenant: str = Field(
        pattern=_TENANT,
        description="The tenant whose versions use this endpoint: answers and errors land "
        "under its results prefix (artifacts/results/tenants/<tenant>/), where sluice reads them.",
    )
    max_concurrent_invocations_per_instance: int = Field(
        4, ge=1, le=1000, description="Requests a single instance works on at once."
    )
    notifications: bool = Field(
        True, description="SNS topics (encrypted) told of each success and each error."
    )
    backlog_per_instance: float = Field(
        5,
        gt=0,
        description="Auto scaling target for ApproximateBacklogSizePerInstance (queued requests).",
    )


class InferenceComponents(_Section):
    """Serve the variant as a SageMaker inference component on instances SageMaker manages: the
    component's copies scale to zero, and the instances with them."""

    min_instances: int = Field(0, ge=0, description="ManagedInstanceScaling floor (0: scale to zero).")
    max_instances: int = Field(1, ge=1)
    copies: int = Field(1, ge=0, description="Copies of the model at creation.")
    min_copies: int = Field(0, ge=0)
    max_copies: int = Field(1, ge=1)
    memory_mb: int = Field(4096, ge=128, description="Memory one copy needs.")
    accelerators: int = Field(1, ge=0, description="GPUs one copy needs (0 on CPU instances).")
    target_invocations_per_copy: float = Field(
        50, gt=0, description="Auto scaling target for SageMakerInferenceComponentInvocationsPerCopy."
    )

    @model_validator(mode="after")
    def _bounds(self) -> InferenceComponents:
        if not self.min_copies <= self.copies <= self.max_copies:
            raise ValueError("need min_copies <= copies <= max_copies")
        if self.min_instances > self.max_instances:
            raise ValueError("need min_instances <= max_instances")
        return self


class EndpointConfig(_Section):
    name: str = Field(
        pattern=_SAGEMAKER_NAME, description="Endpoint name, prefixed with the app name."
    )
    triton_version: str = Field("25.09", description="Version of the SageMaker Triton image.")
    variants: tuple[EndpointVariant, ...] = Field(min_length=1, max_length=10)
    asynchronous: AsyncInference | None = Field(
        None,
        description="Make it an asynchronous endpoint (one variant; min_instances may be 0: it "
        "scales to zero when its queue is empty and back up when requests wait).",
    )
    inference_components: InferenceComponents | None = Field(
        None,
        description="Serve the one variant as an inference component that scales to zero "
        "(copies and instances), starting a copy when a request finds none.",
    )

    @model_validator(mode="after")
    def _async(self) -> EndpointConfig:
        if self.asynchronous is not None and len(self.variants) != 1:
            raise ValueError("an asynchronous endpoint has exactly one variant")
        if self.inference_components is not None and len(self.variants) != 1:
            raise ValueError("an endpoint of inference components has exactly one variant here")
        if self.inference_components is not None and self.asynchronous is not None:
            raise ValueError("an endpoint is asynchronous or built from inference components, not both")
        if self.asynchronous is None and any(v.min_instances < 1 for v in self.variants):
            raise ValueError(
                "min_instances 0 needs an asynchronous endpoint: real-time variants keep 1"
            )
        return self

    @field_validator("variants")
    @classmethod
    def _unique_variants(cls, variants: tuple[EndpointVariant, ...]) -> tuple[EndpointVariant, ...]:
        if len({v.name for v in variants}) != len(variants):
            raise ValueError("variant names must be unique within an endpoint")
        return variants


class StreamSource(_Section):
    kind: Literal["sqs", "kinesis", "msk", "kafka"] = Field(
        description="sqs (standard or FIFO), kinesis, msk (Amazon MSK) or kafka (self-managed)."
    )
    arn: str | None = Field(
        None,
        pattern=r"^arn:aws[a-z-]*:(sqs|kinesis|kafka):",
        description="The queue, stream or MSK cluster to read; none with create.",
    )
    create: bool = Field(False, description="Create the queue or stream (sqs, kinesis).")
    fifo: bool = Field(False, description="A created queue is FIFO (order per message group).")
    shards: int | None = Field(
        None, ge=1, description="A created stream's shards; none: on-demand capacity."
    )
    topic: str | None = Field(None, description="The Kafka topic (msk, kafka).")
    bootstrap_servers: tuple[str, ...] = Field((), description="Brokers of self-managed Kafka.")
    secret_arn: str | None = Field(
        None, description="Secrets Manager secret with the Kafka SASL/SCRAM credentials."
    )
    starting_position: Literal["LATEST", "TRIM_HORIZON"] = "LATEST"

    @model_validator(mode="after")
    def _one_source(self) -> StreamSource:
        if self.kind in ("sqs", "kinesis") and (self.arn is None) == (not self.create):
            raise ValueError(f"a {self.kind} source needs exactly one of arn or create: true")
        if self.create and self.kind not in ("sqs", "kinesis"):
            raise ValueError("create: true makes an SQS queue or a Kinesis stream only")
        if self.kind in ("msk", "kafka") and not self.topic:
            raise ValueError(f"a {self.kind} source needs a topic")
        if self.kind == "msk" and not self.arn:
            raise ValueError("an msk source needs the cluster's arn")
        if self.kind == "kafka" and (not self.bootstrap_servers or not self.secret_arn):
            raise ValueError("a kafka source needs bootstrap_servers and secret_arn")
        return self

    @property
    def is_fifo(self) -> bool:
        return self.kind == "sqs" and (self.fifo or str(self.arn).endswith(".fifo"))


class StreamDestination(_Section):
    kind: Literal["sqs", "kinesis", "firehose", "s3"]
    arn: str | None = Field(
        None, description="The queue, stream or delivery stream to write to (sqs, kinesis, firehose)."
    )
    create: bool = Field(False, description="Create the queue or stream (sqs, kinesis).")
    fifo: bool = Field(False, description="A created queue is FIFO.")
    prefix: str | None = Field(
        None,
        pattern=r"^[A-Za-z0-9!_.*'()/-]*$",
        description="s3: the key prefix in the batch bucket; default outbox/<tenant>/streams/<name>/.",
    )

    @model_validator(mode="after")
    def _one_target(self) -> StreamDestination:
        if self.kind == "s3":
            if self.arn or self.create:
                raise ValueError("an s3 destination writes under the batch bucket: give a prefix only")
        elif (self.arn is None) == (not self.create):
            raise ValueError(f"a {self.kind} destination needs exactly one of arn or create: true")
        if self.create and self.kind not in ("sqs", "kinesis"):
            raise ValueError("create: true makes an SQS queue or a Kinesis stream only")
        return self


def _check_outbox_prefix(prefix: str, tenant: str) -> None:
    """A stream's S3 outputs lie in its tenant's outbox, parsed and compared as every location
    a tenant names is (`sluice.domain.locations`): `outbox/acme/../globex/` is refused."""
    from sluice.domain.errors import SluiceError
    from sluice.domain.locations import Root, confine

    bucket = "s3://sluice-batch-bucket/"  # any bucket: only the key is compared
    try:
        confine(bucket + prefix, (Root.of("outbox", f"{bucket}outbox/{tenant}/"),), field="prefix")
    except SluiceError:
        raise ValueError(f"an s3 destination's prefix lies in the tenant's outbox: outbox/{tenant}/…") from None


class StreamConfig(_Section):
    """One source bound to one tenant's deployment, with its own function and mapping."""

    name: str = Field(pattern=r"^[a-z][a-z0-9-]{0,23}$")
    tenant: str = Field(pattern=_TENANT)
    deployment: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
    source: StreamSource
    destination: StreamDestination
    batch_size: int = Field(100, ge=1, le=10000, description="Records per invocation at most.")
    batching_window_s: int = Field(
        1, ge=0, le=300, description="Wait up to this long to fill a batch."
    )
    parallelization_factor: int = Field(
        1, ge=1, le=10, description="Kinesis: concurrent invocations per shard."
    )
    max_record_age_s: int = Field(
        3600, ge=60, le=604800, description="Kinesis and Kafka: older records go to the DLQ."
    )
    retry_attempts: int = Field(
        3, ge=0, le=10000, description="Retries before the DLQ (SQS: deliveries - 1)."
    )
    bisect_on_error: bool = Field(True, description="Kinesis and Kafka: split a failing batch.")
    max_concurrency: int | None = Field(
        None, ge=2, le=1000, description="SQS: invocations the mapping may run at once."
    )
    memory_mb: int = Field(2048, ge=128, le=10240)
    timeout_s: int = Field(60, ge=1, le=900)
    reserved_concurrency: int | None = Field(10, ge=1)
    iterator_age_alarm_s: int = Field(
        300, ge=1, description="Alarm when the oldest record waited longer (SQS, Kinesis)."
    )
    offset_lag_alarm: int = Field(
        10000, ge=1, description="Kafka: alarm when the consumer lags this many records."
    )

    @model_validator(mode="after")
    def _limits(self) -> StreamConfig:
        source = self.source
        if source.is_fifo and (self.batch_size > 10 or self.batching_window_s):
            raise ValueError("a FIFO queue takes batch_size <= 10 and no batching window")
        if source.kind == "sqs" and self.batch_size > 10 and self.batching_window_s < 1:
            raise ValueError("an SQS batch over 10 records needs batching_window_s >= 1")
        if self.parallelization_factor > 1 and source.kind != "kinesis":
            raise ValueError("parallelization_factor applies to Kinesis sources only")
        if self.max_concurrency and source.kind != "sqs":
            raise ValueError("max_concurrency applies to SQS sources only")
        if self.destination.fifo and not self.destination.kind == "sqs":
            raise ValueError("fifo applies to SQS destinations only")
        if self.destination.kind == "s3" and self.destination.prefix:
            _check_outbox_prefix(self.destination.prefix, self.tenant)
        return self


class SluiceConfig(_Section):
    name: str = Field(
        "sluice",
        pattern=r"^[a-z][a-z0-9-]{0,15}$",
        description="Prefix of stack and resource names.",
    )
    tags: dict[str, str] = Field(default_factory=dict)
    log_retention_days: int = 30
    functions: FunctionsConfig = FunctionsConfig()
    storage: StorageConfig = StorageConfig()
    api: ApiConfig = ApiConfig()
    websocket: WebSocketConfig = WebSocketConfig()
    batch: BatchConfig = BatchConfig()
    alarms: AlarmsConfig = AlarmsConfig()
    concurrency: ConcurrencyConfig = ConcurrencyConfig()
    endpoints: tuple[EndpointConfig, ...] = ()
    streams: tuple[StreamConfig, ...] = Field(
        (), description="Event sources scored as they arrive (see docs/streaming.md)."
    )

    @field_validator("streams")
    @classmethod
    def _unique_streams(cls, streams: tuple[StreamConfig, ...]) -> tuple[StreamConfig, ...]:
        if len({s.name for s in streams}) != len(streams):
            raise ValueError("stream names must be unique")
        return streams

    @model_validator(mode="after")
    def _stream_concurrency(self) -> SluiceConfig:
        reserved = self.concurrency.total + sum(s.reserved_concurrency or 0 for s in self.streams)
        room = self.concurrency.account_limit - UNRESERVED_MINIMUM
        if self.streams and reserved > room:
            raise ValueError(
                f"reserved concurrency with the streams adds up to {reserved}; at most {room} "
                "may be reserved"
            )
        return self

    @field_validator("log_retention_days")
    @classmethod
    def _retention(cls, days: int) -> int:
        if days not in LOG_RETENTION_DAYS:
            raise ValueError(f"log_retention_days must be one of {LOG_RETENTION_DAYS}")
        return days

    @model_validator(mode="after")
    def _websocket_capacity(self) -> SluiceConfig:
        reserved = self.websocket.reserved_concurrency if self.websocket.enabled else None
        limit = self.concurrency.account_limit - UNRESERVED_MINIMUM
        if reserved is not None and self.concurrency.total + reserved > limit:
            raise ValueError(
                f"reserved concurrency adds up to {self.concurrency.total + reserved} with "
                f"websocket.reserved_concurrency, but at most {limit} may be reserved"
            )
        return self

    @model_validator(mode="after")
    def _score_capacity(self) -> SluiceConfig:
        score = self.concurrency.batch_score
        if score is not None and self.batch.max_concurrency > score:
            raise ValueError(
                f"batch.max_concurrency ({self.batch.max_concurrency}) exceeds "
                f"concurrency.batch_score ({score}): the extra chunks would only be throttled"
            )
        return self

    @field_validator("endpoints")
    @classmethod
    def _unique_endpoints(cls, endpoints: tuple[EndpointConfig, ...]) -> tuple[EndpointConfig, ...]:
        if len({e.name for e in endpoints}) != len(endpoints):
            raise ValueError("endpoint names must be unique")
        return endpoints

    def with_overrides(self, **sections: Any) -> SluiceConfig:
        """A copy with some fields replaced, validated like the file."""
        return SluiceConfig.model_validate(self.model_dump() | sections)


def load_config(
    path: Path | str = DEFAULT_CONFIG, *, context: dict[str, Any] | None = None
) -> SluiceConfig:
    """Read the config file, then apply the `sluice:*` context overrides."""
    raw = yaml.safe_load(Path(path).read_text()) or {}
    if not isinstance(raw, dict):
        raise ValueError(f"{path}: expected a mapping at the top level")
    context = context or {}
    functions = dict(raw.get("functions") or {})
    if context.get("sluice:architecture"):
        functions["architecture"] = str(context["sluice:architecture"])
    if context.get("sluice:python"):
        functions["python"] = str(context["sluice:python"])
    return SluiceConfig.model_validate(raw | {"functions": functions})
