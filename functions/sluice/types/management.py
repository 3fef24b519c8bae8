"""Sluice's management API: models, versions, deployments and keys (admin scope). Apart from
the prediction schema so the hot path does not build these models at cold start."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, StrictFloat, StrictInt, field_validator, model_serializer

from sluice.domain.objects import (
    MAX_BATCH_DELAY_US,
    MAX_BATCH_INSTANCES,
    MAX_BATCH_SIZE,
    MAX_CACHE_ENTRIES,
    MAX_CACHE_TTL_S,
    MAX_PREFERRED_SIZES,
)
from sluice.domain.policy import Node
from sluice.domain.values import RevisionNumber, VersionNumber
from sluice.types.base import WireModel
from sluice.types.v2 import MetadataTensor


class TensorSpecOut(WireModel):
    name: str
    datatype: str
    shape: list[int]
    role: str | None = None
    feature_names: list[str] | None = None


class SignatureOut(WireModel):
    inputs: list[TensorSpecOut]
    outputs: list[TensorSpecOut]


class ModelCreate(WireModel):
    name: str
    description: str = ""


class ModelOut(WireModel):
    name: str
    description: str
    created_at: float
    created_by: str
    latest_version: int | None = None


class VersionPushByUri(WireModel):
    artifact_uri: str = Field(description="s3:// (or file:// locally) URI of an ONNX file to copy in.")
    runtime: str = Field("onnx", description="`onnx` (in process) or `sagemaker` (served by the endpoint in `config`).")
    config: dict[str, Any] | None = Field(None, description="For `sagemaker`: endpoint_name, optional variant, target_model, max_batch_size.")
    feature_names: list[str] | None = None
    description: str = ""


class VersionFromTriton(WireModel):
    triton_url: str = Field(
        description="A Triton server's address, e.g. http://triton.internal:8000 (gRPC: http://triton.internal:8001"
        " for an insecure channel, https:// for TLS)."
    )
    protocol: Literal["http", "grpc"] = Field("http", description="How sluice calls the server: its HTTP/REST or its gRPC protocol.")
    model_name: str | None = Field(None, description="The model's name on that server (default: this model's name).")
    model_version: str | None = Field(None, description="A version on that server (default: its latest).")
    feature_names: list[str] | None = None
    description: str = ""


class SessionTuningOut(WireModel):
    vcpus: int = Field(description="The machine size this applies to (Lambda: 1 vCPU per 1769 MB, 6 at 10240 MB).")
    memory_mb: int
    intra_op_threads: int
    inter_op_threads: int
    execution_mode: str
    p50_ms: float | None = None
    measured_on_cores: int | None = None


class VersionOut(WireModel):
    model: str
    version: int
    runtime: str
    artifact_uri: str
    sha256: str
    size_bytes: int
    signature: SignatureOut
    created_at: float
    created_by: str
    derived_from: str | None = Field(None, description="The version this one was made from (`model:version`), if optimized.")
    optimization: dict[str, Any] | None = Field(None, description="How it was made from `derived_from`, and how it measured.")
    session_options: list[SessionTuningOut] = Field(default_factory=list, description="ONNX Runtime settings tuned per machine size.")
    source: dict[str, Any] | None = Field(
        None,
        description="Where it was pushed from: an MLflow model (tracking URI without credentials, name, version, run, alias) "
        "or a SageMaker model package (ARN, group, version, approval status). See docs/registries.md.",
    )


class CacheSpec(WireModel):
    """A deployment's prediction cache (opt-in): see docs/cache.md."""

    ttl_s: StrictFloat = Field(gt=0, le=MAX_CACHE_TTL_S, allow_inf_nan=False, description="Seconds an answer is kept.")
    max_entries: StrictInt = Field(ge=1, le=MAX_CACHE_ENTRIES, description="Answers kept per container, least recently used go first.")


class CaptureSpec(WireModel):
    """A deployment's data capture (opt-in): see docs/capture.md."""

    sample_percent: StrictFloat = Field(gt=0, le=100, allow_inf_nan=False, description="Share of answered requests kept.")
    include: list[Literal["inputs", "outputs"]] = Field(
        default_factory=lambda: ["inputs", "outputs"], description="What goes with each record besides its metadata."
    )
    redact: list[str] = Field(default_factory=list, max_length=256, description="Input features (or input tensors) never written.")


class BatchingSpec(WireModel):
    """A deployment's adaptive batching (opt-in): see docs/configuration.md#adaptive-batching."""

    max_batch_size: StrictInt = Field(ge=2, le=MAX_BATCH_SIZE, description="Most rows in one joined runtime call.")
    max_delay_us: StrictInt = Field(
        ge=0,
        le=MAX_BATCH_DELAY_US,
        description="Longest a batch opened while the model is idle waits for others to join it, in microseconds "
        "(0: only those already arrived); requests that queued while it was busy go at once.",
    )
    preferred_batch_sizes: list[StrictInt] | None = Field(
        None,
        max_length=MAX_PREFERRED_SIZES,
        description="Rows at which a batch leaves at once rather than waiting out max_delay_us (Triton's preferred sizes); "
        "each from 1 to max_batch_size. Left out: none.",
    )
    instances: StrictInt | None = Field(
        None, ge=1, le=MAX_BATCH_INSTANCES, description="Calls of one model version under way at once, per process. Left out: 1."
    )

    # Shown as set: the two optional fields at their defaults are left out. Unannotated, so
    # the schema stays the fields' (a return type would become the serialized schema).
    @model_serializer(mode="wrap")
    def _defaults_left_out(self, handler: Any):  # type: ignore[no-untyped-def]
        data = handler(self)
        if isinstance(data, dict):
            if not data.get("preferred_batch_sizes"):
                data.pop("preferred_batch_sizes", None)
            if data.get("instances") in (None, 1):
                data.pop("instances", None)
        return data


class DeploymentCreate(WireModel):
    name: str
    model: str | None = Field(None, description="Shorthand: route everything to this model…")
    version: VersionNumber | None = Field(None, description="…at this version (default: its latest).")
    policy: Node | None = Field(None, description="A full routing policy instead of model/version.")
    cache: CacheSpec | None = Field(None, description="Cache answers (deterministic routes only); left out: no cache.")
    capture: CaptureSpec | None = Field(None, description="Capture a sample of requests and answers; left out: none.")
    batching: BatchingSpec | None = Field(None, description="Join concurrent requests into one runtime call; left out: no batching.")
    description: str = ""


class DeploymentUpdate(WireModel):
    model: str | None = None
    version: VersionNumber | None = None
    policy: Node | None = None
    cache: CacheSpec | None = Field(
        None, description="Left out: the cache stays as it is; null: off. With neither model nor policy, the policy stays."
    )
    capture: CaptureSpec | None = Field(None, description="Left out: capture stays as it is; null: off.")
    batching: BatchingSpec | None = Field(
        None, description="Left out: batching stays as it is; null: off. With neither model nor policy, the policy stays."
    )
    revision: RevisionNumber | None = Field(None, description="Fail with 409 unless the deployment is at this revision.")


class DeploymentOut(WireModel):
    name: str
    policy: Node
    revision: int
    cache: CacheSpec | None = None
    capture: CaptureSpec | None = None
    batching: BatchingSpec | None = None
    description: str
    created_at: float
    updated_at: float
    updated_by: str


class DeploymentDetail(DeploymentOut):
    """One deployment (`GET /api/v1/deployments/{name}`), with what its policy takes and answers."""

    inputs: list[MetadataTensor] | None = Field(
        None, description="The inputs a caller sends: the first step's (a leading transform's declared inputs), as the v2 model metadata shows them."
    )
    outputs: list[MetadataTensor] | None = Field(None, description="What the answer holds: a sequence's last step's outputs and those it exposes.")


class DeploymentChangeOut(WireModel):
    revision: int
    at: float
    by: str
    old_policy: Node | None
    new_policy: Node | None
    note: dict[str, Any] | None = Field(None, description="Why, when a rollout made the change: its decision and the numbers behind it.")


class Feedback(WireModel):
    request_id: str = Field(max_length=128)
    reward: StrictFloat = Field(ge=0, le=1, description="How good the answer was, 0 to 1.")


class Promote(WireModel):
    mirror: str


class KeyCreate(WireModel):
    scopes: list[str] = Field(default_factory=lambda: ["predict"])
    name: str = ""


class KeyOut(WireModel):
    key_id: str
    tenant: str
    scopes: list[str]
    name: str
    created_at: float
    revoked_at: float | None = None
    key: str | None = Field(None, description="The key itself; shown once, at creation.")

    @field_validator("scopes", mode="before")
    @classmethod
    def _sorted(cls, value: Any) -> Any:
        return sorted(value) if isinstance(value, set | frozenset) else value


class SessionOut(WireModel):
    tenant: str
    key_id: str = Field(description="The key's public id (never the key).")
    scopes: list[str]


class OptimizeCreate(WireModel):
    data_uri: str = Field(
        description="Rows the model takes (.parquet, .csv, .jsonl), at a URI this tenant may import from "
        "(as push by URI): calibration rows first, then evaluation rows."
    )
    min_agreement: StrictFloat = Field(0.99, ge=0, le=1, description="Label (or top-1) agreement a candidate must keep.")
    max_abs_diff: StrictFloat | None = Field(None, ge=0, description="Largest absolute difference allowed on any output value.")
    candidates: list[Literal["graph", "int8-dynamic", "int8-static", "fp16"]] = Field(
        default_factory=lambda: ["graph", "int8-dynamic", "int8-static", "fp16"]
    )
    calibration_rows: int = Field(200, ge=1, le=10_000)
    evaluation_rows: int = Field(1000, ge=1, le=100_000)
    seconds: StrictFloat = Field(1.0, gt=0, le=30, description="Time spent measuring each latency.")
    tune: bool = Field(True, description="Sweep session options per Lambda size and record them on the version.")
    to_register: list[str] = Field(default_factory=list, alias="register", description="Candidates to push as new versions ('recommended' for the verdict's).")
    shadow: str | None = Field(None, description="A deployment to mirror the best registered candidate from.")


class OptimizeJobOut(WireModel):
    id: str
    model: str
    version: int | str
    status: Literal["RUNNING", "SUCCEEDED", "FAILED"]
    created_by: str = Field("", description="The key (or authorizer principal) that started it.")
    created_at: float
    heartbeat_at: float | None = Field(None, description="The last sign of life of the worker running it.")
    finished_at: float | None = None
    error: str | None = None
    report: dict[str, Any] | None = Field(
        None,
        description="The candidates' table, the verdict, the tuning, what was registered. A report over 256 KiB "
        "of JSON loses its largest parts, named in `omitted`.",
    )
