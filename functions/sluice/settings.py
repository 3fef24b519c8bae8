"""Process settings, read once from `SLUICE_*` environment variables.

Adapters are chosen by URL (`sqlite:///…` or `dynamodb://table`, `file:///…` or
`s3://bucket/prefix`); unset means the embedded default under `SLUICE_HOME`.
"""

from __future__ import annotations

import os
import re
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

MiB = 1024 * 1024


def in_lambda() -> bool:
    """Whether this process runs in AWS Lambda: the one place sluice asks."""
    return "AWS_LAMBDA_FUNCTION_NAME" in os.environ


def lambda_memory_mb() -> int | None:
    """The memory Lambda gave this function, in MB (its CPU share follows it); None elsewhere."""
    memory = os.environ.get("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "")
    return int(memory) if memory.isdigit() else None


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="SLUICE_", extra="ignore")

    mode: Literal["local", "aws"] = Field(
        default_factory=lambda: "aws" if in_lambda() else "local",
        description="`local` allows embedded defaults; `aws` refuses them (set automatically in Lambda).",
    )
    home: Path = Field(
        default=Path("~/.sluice"),
        description="Folder for the embedded registry, artifact store and local state.",
    )
    registry: str = Field(
        default="",
        description="`sqlite:///path/registry.db` or `dynamodb://table-name`; empty: SQLite under home.",
    )
    store: str = Field(
        default="",
        description="`file:///path` or `s3://bucket/prefix`; empty: a folder under home.",
    )
    mirror: str = Field(
        default="",
        description="Where shadow mirrors run: `local` (a thread of this process) or `lambda://function-name`; empty: local.",
    )
    capture: str = Field(
        default="",
        description=(
            "Where data capture writes (deployments that turn it on): `file:///path` (JSON Lines "
            "under `tenant=/deployment=/dt=/hour=`), `firehose://stream-name`, or `off`; empty: "
            "`capture/` under home locally, off on AWS unless set (the CDK app sets it)."
        ),
    )
    capture_queue: int = Field(
        default=10_000,
        ge=1,
        description="Captured records waiting for the sink, at most, per process; past it a sampled record is dropped and counted.",
    )
    import_prefixes: list[str] = Field(
        default_factory=lambda: ["file://{home}/imports/{tenant}/"],
        description=(
            "URI prefixes that push-by-URI may read, `{tenant}` standing for the caller's tenant "
            "(e.g. `s3://uploads-bucket/{tenant}/`); JSON list in the environment."
        ),
    )
    triton_url_prefixes: list[str] = Field(
        default_factory=lambda: ["http://127.0.0.1:8100-8102", "http://localhost:8100-8102"],
        description=(
            "The Triton servers sluice may call: a tenant may register models only from these, and "
            "every call is checked again. Entries are `scheme://host:port`, `scheme://host:low-high` "
            "or `scheme://host:*` (any port), compared on the parsed URL, never as a string prefix; "
            "JSON list in the environment. The default admits the ports of `sluice triton up` (HTTP "
            "8100, gRPC 8101, SageMaker 8102) and no other loopback service; the local endpoints' "
            "servers are admitted by the `sagemaker` runtime only while they run. The server calls "
            "them, so keep this to servers you run."
        ),
    )
    region: str | None = Field(
        default=None, description="AWS region for DynamoDB/S3; defaults to the SDK's own lookup."
    )
    orchestrator: str = Field(
        default="",
        description="Who runs batch jobs: `local` (a thread pool in this process) or "
        "`stepfunctions://<state machine ARN>`; empty: local, and none on AWS.",
    )
    batch_bucket: str = Field(
        default="",
        description="The batch bucket (`inbox/`, `outbox/`, `work/`); empty: the folder `batch/` under home.",
    )
    batch_inbox: Path | None = Field(
        default=None,
        description="The folder `sluice serve` watches for batch inputs "
        "(`<folder>/<deployment>/<file>`); empty: `inbox/` under home.",
    )
    batch_inbox_poll_s: float = Field(
        default=2.0, gt=0, description="How often `sluice serve` looks in the local inbox."
    )
    batch_schedule_poll_s: float = Field(
        default=5.0, gt=0, description="How often `sluice serve` looks for batch schedules that are due."
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
    batch_stop_grace_s: float = Field(
        default=30.0,
        ge=0,
        description="How long `sluice serve`, once told to stop, waits for a running local batch job to finish "
        "the chunks it is scoring; the job is then recorded FAILED (the service stopped) either way.",
    )
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
    stream_max_wait_ms: float = Field(
        default=50.0, ge=0, description="How long `sluice stream` holds a partial micro-batch for more lines."
    )
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
    tenant_role_arn: str | None = Field(
        default=None,
        description=(
            "IAM role whose registry access is confined to the tenant named by a session tag "
            "(see sluice.registry.dynamodb.tenant_scope); set by the CDK app on the API function."
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
    ort_intra_op_threads: int = Field(
        default=1, ge=0, description="ONNX Runtime intra-op threads per session (0: ORT decides)."
    )
    ort_inter_op_threads: int = Field(
        default=1, ge=0, description="ONNX Runtime inter-op threads per session (0: ORT decides)."
    )
    ort_tuned_sessions: bool = Field(
        default=True,
        description=(
            "Load a version with the session options `sluice optimize` tuned for it (threads and execution mode for "
            "this machine's vCPUs) instead of the two settings above."
        ),
    )
    ort_vcpus: int | None = Field(
        default=None,
        ge=1,
        description=(
            "The vCPUs a tuned version is loaded for. Default: from the Lambda function's memory (1 vCPU per 1769 MB, "
            "6 at most), or the machine's CPU count off Lambda."
        ),
    )
    model_cache_bytes: int = Field(
        default=1024 * MiB,
        gt=0,
        description="Upper bound on the artifact bytes of ONNX sessions kept loaded (LRU).",
    )
    inline_infer_elements: int = Field(
        default=4096,
        ge=0,
        description="Inputs up to this many elements run on the event loop; larger ones on a thread.",
    )
    max_request_bytes: int = Field(
        default=6 * MiB - 64 * 1024,
        gt=0,
        description="Largest request body served synchronously (Lambda's 6 MB limit, less envelope).",
    )
    max_response_bytes: int = Field(
        default=6 * MiB - 64 * 1024,
        gt=0,
        description="Largest answer sent in line (Lambda's 6 MB response limit, less envelope): a prediction "
        "from an upload whose answer is larger is kept as a result (303 to it), and a result whose answer is "
        "larger is answered with the answer itself (a 303 to a presigned S3 GET on AWS, its bytes locally).",
    )
    upload_max_bytes: int = Field(
        default=1_000_000_000,
        gt=0,
        description="Largest upload (`POST /api/v1/uploads`): SageMaker asynchronous inference takes inputs of up to 1 GB.",
    )
    upload_inline_max_bytes: int = Field(
        default=64 * MiB,
        gt=0,
        description="Largest upload the API reads to score itself (a deployment that is not on an asynchronous "
        "SageMaker endpoint); a larger one is refused with 413: send a batch job.",
    )
    upload_form_ttl_s: int = Field(
        default=900,
        ge=60,
        le=7 * 24 * 3600,
        description="How long the form an upload answers (an S3 presigned POST on AWS) may be posted.",
    )
    upload_body_timeout_s: float = Field(
        default=20.0,
        gt=0,
        description="`sluice serve`: seconds an upload's form (`POST /api/v1/uploads/{id}/body`, posted without "
        "an API key) has to arrive, plus one more for every `SLUICE_UPLOAD_BODY_MIN_RATE` bytes received; a slower "
        "client (one trickling its body) is answered 408 and cut off, and nothing of its body is kept. On AWS, S3 "
        "takes the form.",
    )
    upload_body_min_rate: int = Field(
        default=16 * 1024,
        gt=0,
        description="`sluice serve`: the rate an upload's form must keep up, in bytes a second: each that many "
        "bytes received give it one more second beyond `SLUICE_UPLOAD_BODY_TIMEOUT_S`, so a client at least this "
        "fast is never cut off.",
    )
    upload_ttl_s: int = Field(
        default=3600,
        ge=60,
        description="How long an upload may be predicted from after it is made (as often as wanted); the "
        "store's lifecycle deletes it a day or more later (the CDK app's `storage.upload_expiry_days`).",
    )
    upload_signer_role_arn: str | None = Field(
        default=None,
        description="The role upload forms are signed with on AWS, assumed per tenant (session tag `tenant`): "
        "it may put objects under that tenant's uploads prefix only. Unset: signed with the function's own role.",
    )
    max_tensor_elements: int = Field(
        default=4_000_000, gt=0, description="Largest number of elements across one request's inputs."
    )
    request_timeout_s: float = Field(
        default=25.0, gt=0, description="Budget for one prediction, below API Gateway's 29 s."
    )
    header_timeout_s: float = Field(
        default=10.0,
        gt=0,
        description="`sluice serve`: seconds a client has to send a request's line and headers, counted "
        "from the connection's opening or the request's first byte; a slower client (slowloris) is "
        "answered 408 and cut off. On AWS, API Gateway ends slow clients itself.",
    )
    max_header_bytes: int = Field(
        default=16 * 1024,
        ge=1024,
        description="`sluice serve`: largest request line plus headers; past it the connection is answered 431 and closed.",
    )
    keepalive_timeout_s: float = Field(
        default=5.0, gt=0, description="`sluice serve`: seconds an idle connection stays open between requests."
    )
    grpc_port: int = Field(
        default=0,
        ge=0,
        le=65535,
        description="`sluice serve`: the port of the Open Inference Protocol over gRPC (`--grpc-port`); 0: off. "
        "Not on AWS: API Gateway cannot carry gRPC.",
    )
    grpc_max_concurrent_rpcs: int = Field(
        default=32,
        ge=0,
        description="`sluice serve --grpc-port`: calls the gRPC server runs at once, every key together (an "
        "open stream is one); past it a call is refused with RESOURCE_EXHAUSTED at once. Each call may hold a "
        "message of up to `max_request_bytes` and its decoding, so this bounds the gRPC process's memory. 0: no bound.",
    )
    rate_limit: str = Field(
        default="",
        description="`sluice serve`: requests one API key may make, in the `limits` package's notation: "
        "`10/second`, `600/minute`, or several joined by `;` (`600/minute;20/second`: 600 a minute "
        "with bursts of at most 20 in any second), counted in a moving window. Past it the request "
        "is answered 429 with Retry-After, after authentication and before its body is read. Empty: "
        "off. Needs the `serve` extra. Not for AWS: API Gateway usage plans throttle each tenant there "
        "(see `usage_key_prefix`).",
    )
    max_in_flight_per_key: int = Field(
        default_factory=lambda: 0 if in_lambda() else 64,
        ge=0,
        description="`sluice serve`: requests one API key may have in flight at once in one process: its HTTP "
        "requests and WebSocket messages in a worker, its gRPC calls in the gRPC process (an open stream is one). "
        "Past it a request is answered 429 with Retry-After (`too_many_in_flight`), after authentication and "
        "before its body is read; a WebSocket message gets that error message, a gRPC call RESOURCE_EXHAUSTED. "
        "Counted per process: with N workers a key may have up to N times as many. 0: off (the default in "
        "Lambda, where a container takes one request at a time and API Gateway throttles each tenant).",
    )
    rate_limit_storage: str = Field(
        default="memory://",
        description="Where `rate_limit` counts: `memory://` counts in each worker process (with N workers "
        "a key may get up to N times the limit); a `redis://host:port` URL shares the counts between "
        "workers and machines (needs the `redis` package).",
    )
    websocket_rate_limit: str = Field(
        default="100/second",
        description="Messages one WebSocket connection may send, in the `limits` notation of "
        "`rate_limit`; past it a message is answered with a `rate_limited` error message and the "
        "connection stays open. Empty: off. `sluice serve` counts a moving window in memory; the "
        "WebSocket Lambda counts fixed windows in the registry, shared by its containers.",
    )
    websocket_max_in_flight: int = Field(
        default=16,
        ge=1,
        le=1024,
        description="`sluice serve`: predictions of one WebSocket connection processed at once; past it "
        "the server reads that connection's next message only when an answer has gone out.",
    )
    websocket_max_message_bytes: int = Field(
        default=1 * MiB,
        ge=1024,
        description="Largest WebSocket message answered; a larger one gets a `payload_too_large` error "
        "message. On AWS, API Gateway takes messages of at most 128 KB.",
    )
    preload: list[str] = Field(
        default_factory=list,
        description=(
            "Deployments (`tenant/name`) a Lambda with SnapStart loads before its snapshot, so a "
            "restored container answers them without loading a model; JSON list in the environment."
        ),
    )
    preload_max_bytes: int = Field(
        default=256 * MiB,
        ge=0,
        description="Upper bound on the artifact bytes `preload` loads; versions beyond it load on first use.",
    )
    deployment_cache_ttl_s: float = Field(
        default=1.0, ge=0, description="How long a container trusts a deployment it has read."
    )
    prediction_cache_shared: bool = Field(
        default=False,
        description="Share the prediction cache of deployments that turn it on between containers and "
        "processes, through the registry (a SQLite table locally, DynamoDB items with a time to live on AWS). "
        "Off: each container keeps its own answers only.",
    )
    prediction_cache_max_entry_bytes: int = Field(
        default=1 << 20, ge=0, description="The largest answer (its outputs' bytes) the prediction cache keeps."
    )
    prediction_cache_max_bytes: int = Field(
        default=128 << 20,
        ge=0,
        description="The outputs' bytes the prediction cache keeps in one process, all deployments together "
        "(each deployment also at most its `max_entries` answers).",
    )
    auth_cache_ttl_s: float = Field(
        default_factory=lambda: 0.0 if in_lambda() else 30.0,
        ge=0,
        description="How long a process trusts an API key it has checked. With SQLite a revoke reaches "
        "every local process at once regardless (a marker file); with DynamoDB this is the bound on "
        "how long a revoked key may still work in a container (0 by default in Lambda: every lookup reads).",
    )
    usage_key_prefix: str = Field(
        default="",
        description="The authorizer's usage-plan key prefix: it returns `<prefix><tenant>` or "
        "`<prefix>_default` as the API Gateway usage identifier; empty: none.",
    )
    usage_tenants: str = Field(
        default="", description="Comma-separated tenants with a usage plan of their own (the authorizer)."
    )
    log_level: str = Field(default="INFO", description="Log level of the `sluice` logger.")
    metrics_namespace: str = Field(default="sluice", description="CloudWatch namespace for EMF metrics.")
    service_name: str = Field(default="sluice", description="Service name in logs, metrics and traces.")

    @model_validator(mode="after")
    def _refuse_embedded_defaults_on_aws(self) -> Settings:
        if self.orchestrator not in ("", "local") and not self.orchestrator.startswith("stepfunctions://arn:"):
            raise ValueError("SLUICE_ORCHESTRATOR must be local or stepfunctions://STATE_MACHINE_ARN")
        if self.rate_limit:
            _check_rate_limit(self.rate_limit, self.mode)
        if self.websocket_rate_limit and not _RATE.fullmatch(self.websocket_rate_limit):
            # Checked by shape: `limits` is imported only once a connection opens.
            raise ValueError(f"SLUICE_WEBSOCKET_RATE_LIMIT {self.websocket_rate_limit!r} is not a rate such as 100/second or 600/minute;20/second")
        if self.mode == "aws":
            if not self.registry.startswith("dynamodb://"):
                raise ValueError("SLUICE_REGISTRY must be dynamodb://TABLE when SLUICE_MODE=aws")
            if not self.store.startswith("s3://"):
                raise ValueError("SLUICE_STORE must be s3://BUCKET[/PREFIX] when SLUICE_MODE=aws")
        from sluice.domain.errors import SluiceError

        try:
            _ = self.triton_allowlist
        except SluiceError as exc:
            raise ValueError(f"SLUICE_TRITON_URL_PREFIXES: {exc.message}") from None
        return self

    @property
    def home_path(self) -> Path:
        return self.home.expanduser().resolve()

    @cached_property
    def triton_allowlist(self) -> tuple[Any, ...]:
        """`triton_url_prefixes`, parsed (see `sluice.domain.origins`)."""
        from sluice.domain.origins import parse_allowlist

        return parse_allowlist(self.triton_url_prefixes, field="triton_url_prefixes")

    def import_prefixes_for(self, tenant: str) -> list[str]:
        return [p.format(home=self.home_path, tenant=tenant) for p in self.import_prefixes]

    def import_prefixes_shown(self, tenant: str) -> list[str]:
        """The same, as a message to a client may say them: the server's folders are not
        named, the home stands as `$SLUICE_HOME`."""
        shown = []
        for prefix in self.import_prefixes:
            if prefix.startswith("file://") and not prefix.startswith("file://{home}"):
                shown.append("a folder of the server")
            else:
                shown.append(prefix.format(home="$SLUICE_HOME", tenant=tenant))
        return shown

    @property
    def registry_url(self) -> str:
        return self.registry or f"sqlite:///{self.home_path / 'registry.db'}"

    @property
    def store_url(self) -> str:
        return self.store or f"file://{self.home_path / 'artifacts'}"

    @property
    def endpoints_kind(self) -> Literal["sagemaker", "local"]:
        """Which endpoint control plane `endpoints` names, its default filled in."""
        if self.endpoints:
            return self.endpoints
        return "sagemaker" if self.mode == "aws" else "local"

    @property
    def batch_root_url(self) -> str:
        """Where batch inboxes, outboxes and work files live (see `sluice.batch.runner.BatchPaths`)."""
        if self.batch_bucket:
            return f"s3://{self.batch_bucket}/"
        if self.mode == "aws":
            raise ValueError("SLUICE_BATCH_BUCKET must be set for batch jobs when SLUICE_MODE=aws")
        return (self.home_path / "batch").as_uri() + "/"

    @property
    def batch_inbox_path(self) -> Path:
        return (self.batch_inbox or self.home_path / "inbox").expanduser()


# One or more `limits` rates: `100/second`, `600 per minute`, `10/5 seconds`, joined by `;` or `,`.
_ONE_RATE = r"\s*[1-9][0-9]*\s*(?:/|per)\s*(?:[1-9][0-9]*\s*)?(?:second|minute|hour|day|month|year)s?\s*"
_RATE = re.compile(rf"{_ONE_RATE}(?:[;,]{_ONE_RATE})*")


def _check_rate_limit(spec: str, mode: str) -> None:
    if mode == "aws":
        raise ValueError("SLUICE_RATE_LIMIT is for the local service: on AWS, API Gateway usage plans throttle each tenant")
    try:
        from limits import parse_many
    except ImportError:
        raise ValueError("SLUICE_RATE_LIMIT needs the `limits` package: install sluice[serve]") from None
    try:
        if all(item.amount > 0 for item in parse_many(spec)):
            return
    except ValueError:
        pass
    raise ValueError(f"SLUICE_RATE_LIMIT {spec!r} is not a rate such as 10/second or 600/minute;20/second")


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()
