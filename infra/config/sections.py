"""The sections of the config that shape the functions, the storage, the API and batch."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, ValidationInfo, field_validator

from infra.config.base import TENANT, Section
from infra.config.follows import RegistryFields
from infra.config.managed import ManagedInstancesConfig


class FunctionsConfig(Section):
    architecture: Literal["x86_64", "arm64"] = Field(
        "x86_64", description="CPU architecture of every function and of the wheels in its layers."
    )
    python: Literal["3.12", "3.13", "3.14"] = Field(
        "3.13",
        description="Lambda Python runtime; layers are built for this version. 3.13 (the "
        "default) and 3.12 have Apache DataSketches' wheels, so the functions profile their "
        "traffic and the hourly check reports drift; on 3.14 they do not until DataSketches "
        "publishes a wheel for it (the synthesis warns). Each value synthesizes: below the "
        "newest, cdk-nag's latest-runtime rules are acknowledged.",
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
        256,
        ge=0,
        description="Bound on the artifact MiB `preload` loads (SLUICE_PRELOAD_MAX_BYTES).",
    )

    @field_validator("preload")
    @classmethod
    def _tenant_slash_name(cls, value: list[str]) -> list[str]:
        for entry in value:
            tenant, slash, name = entry.partition("/")
            if not (slash and tenant and name) or "/" in name:
                raise ValueError(f"preload entries are tenant/deployment, not {entry!r}")
        return value


class StorageConfig(Section):
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
        30,
        ge=1,
        description="Delete captured requests under capture/ in the batch bucket after this.",
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
                raise ValueError(
                    f"{origin!r} is not an origin such as https://app.example.com (no path, no wildcard)"
                )
        return origins


class PlanLimits(Section):
    rate_limit: float = Field(gt=0, description="Steady-state requests per second.")
    burst_limit: int = Field(gt=0, description="Requests allowed in a burst.")
    quota: int | None = Field(None, gt=0, description="Requests per quota period; none: unlimited.")
    quota_period: Literal["DAY", "WEEK", "MONTH"] = "DAY"


class TenantPlan(PlanLimits):
    tenant: str = Field(pattern=TENANT)


class ApiConfig(RegistryFields):
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
    managed_instances: ManagedInstancesConfig | None = Field(
        None,
        description="Run the API function on Lambda Managed Instances (docs/deploy-aws.md); none: "
        "Lambda on demand.",
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


class WebSocketConfig(Section):
    """Predictions over a WebSocket (API Gateway WebSocket API -> the websocket function)."""

    enabled: bool = Field(False, description="Create the WebSocket API (`wss://…/<stage>`).")
    stage_name: str = Field("v1", pattern=r"^[a-zA-Z0-9_]{1,64}$")
    rate_limit: float = Field(
        100,
        gt=0,
        description="Messages per second for the whole stage (each message is an invocation).",
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
        29,
        ge=1,
        le=29,
        description="One message's budget (API Gateway's integration limit is 29 s).",
    )
    reserved_concurrency: int | None = Field(
        50,
        ge=1,
        description="Reserved concurrency of the websocket function (null: the shared pool).",
    )


class BatchConfig(Section):
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


class AlarmsConfig(Section):
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
    precomputed_fallback_percent: float = Field(
        50.0,
        gt=0,
        le=100,
        description="Share of precomputed nodes' rows answered live (a table that was not "
        "published, expired, or misses many entities), for three periods of 5 minutes.",
    )
    lookup_error_percent: float = Field(
        5.0,
        gt=0,
        le=100,
        description="Share of graphs' lookup steps whose store failed (throttled, refused, "
        "unreachable), where `graphs.lookups` lists any store.",
    )
    monitor_deployments: tuple[str, ...] = Field(
        (),
        description="Deployments (`tenant/name`) with an alarm on model monitoring's `MonitorAlerts`: "
        "columns whose verdict was not ok in the hourly window the scheduled check closed.",
    )
    monitor_alerts: int = Field(
        1, ge=1, description="Columns alerting in a monitored deployment's window that raise its alarm."
    )

    @field_validator("monitor_deployments")
    @classmethod
    def _tenant_slash_deployment(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for entry in value:
            tenant, slash, name = entry.partition("/")
            if not (slash and re.fullmatch(TENANT, tenant) and re.fullmatch(TENANT, name)):
                raise ValueError(f"monitor_deployments entries are tenant/deployment, not {entry!r}")
        return value

    @property
    def wants_topic(self) -> bool:
        return self.topic or bool(self.emails)


LAMBDA_ARN = (
    r"^arn:aws(-cn|-us-gov)?:lambda:[a-z]{2}(-[a-z]+)+-\d:\d{12}:function:[A-Za-z0-9_-]{1,64}"
    r"(:(\$LATEST|[A-Za-z0-9_-]{1,128}))?$"
)


class TenantFunctions(Section):
    tenant: str = Field(pattern=TENANT)
    arns: tuple[str, ...] = Field(
        min_length=1,
        description="Lambda function ARNs this tenant's `function` steps may call, each compared "
        "whole (a qualified ARN, `…:function:name:alias`, is granted alone).",
    )

    @field_validator("arns")
    @classmethod
    def _lambda_arns(cls, arns: tuple[str, ...]) -> tuple[str, ...]:
        for arn in arns:
            if not re.fullmatch(LAMBDA_ARN, arn):
                raise ValueError(f"{arn!r} is not a Lambda function ARN")
        if len(set(arns)) != len(arns):
            raise ValueError("an ARN is listed twice")
        return arns


DYNAMODB_TABLE = r"^[A-Za-z0-9_.-]{3,255}$"
FEATURE_GROUP = r"^[A-Za-z0-9]([-_]*[A-Za-z0-9]){0,63}$"


class TenantLookups(Section):
    tenant: str = Field(pattern=TENANT)
    tables: tuple[str, ...] = Field((), description="DynamoDB tables this tenant's `lookup` steps may read.")
    feature_groups: tuple[str, ...] = Field((), description="SageMaker feature groups this tenant's `lookup` steps may read.")

    @field_validator("tables", "feature_groups")
    @classmethod
    def _names(cls, names: tuple[str, ...], info: ValidationInfo) -> tuple[str, ...]:
        pattern = DYNAMODB_TABLE if info.field_name == "tables" else FEATURE_GROUP
        for name in names:
            if not re.fullmatch(pattern, name):
                raise ValueError(f"{name!r} is not a {'DynamoDB table' if info.field_name == 'tables' else 'feature group'} name")
        if len(set(names)) != len(names):
            raise ValueError("a name is listed twice")
        return names


class GraphsConfig(Section):
    """Inference graphs (docs/graphs.md)."""

    functions: tuple[TenantFunctions, ...] = Field(
        (),
        description="The tenants' own Lambda functions that `function` steps may call: the "
        "functions that predict (API, WebSocket, shadow, batch scoring, streams) get one "
        "`lambda:InvokeFunction` statement per ARN and the allowlist as SLUICE_FUNCTION_ARNS; "
        "none: no statement, no variable.",
    )

    lookups: tuple[TenantLookups, ...] = Field(
        (),
        description="The online stores each tenant's `lookup` steps may read: the functions that "
        "predict get `dynamodb:BatchGetItem` on those tables and `sagemaker:BatchGetRecord` and "
        "`sagemaker:GetRecord` on those feature groups, one statement each, and the list as "
        "SLUICE_LOOKUP_SOURCES; none: no statement, no variable.",
    )

    @field_validator("functions", "lookups")
    @classmethod
    def _one_entry_per_tenant(cls, entries: tuple[TenantFunctions | TenantLookups, ...]) -> tuple[TenantFunctions | TenantLookups, ...]:
        names = [e.tenant for e in entries]
        if len(names) != len(set(names)):
            raise ValueError("each tenant has one entry (list all its ARNs there)")
        return entries

    @property
    def allowlist(self) -> dict[str, list[str]]:
        """`{tenant: [ARN, …]}`, as SLUICE_FUNCTION_ARNS holds it."""
        return {e.tenant: list(e.arns) for e in self.functions}

    @property
    def lookup_sources(self) -> dict[str, list[str]]:
        """`{tenant: ["dynamodb:TABLE", "sagemaker:GROUP", …]}`, as SLUICE_LOOKUP_SOURCES holds it."""
        return {e.tenant: [*(f"dynamodb:{t}" for t in e.tables), *(f"sagemaker:{g}" for g in e.feature_groups)] for e in self.lookups}
