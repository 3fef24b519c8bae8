"""The domain at the bottom: what sluice stores and computes, importing nothing else of sluice.

Registry, batch, services and every entry point import it; it imports none of them.
"""

from sluice.domain.errors import (
    BackendError,
    BadRequest,
    Conflict,
    DeadlineExceeded,
    Forbidden,
    InvalidInput,
    NotFound,
    PayloadTooLarge,
    SluiceError,
    Unauthenticated,
    Unavailable,
    Unprocessable,
)
from sluice.domain.jobs import BatchJob, ChunkResult
from sluice.domain.objects import (
    RUNTIME_KINDS,
    SCOPES,
    ApiKey,
    BatchingSettings,
    CacheSettings,
    Deployment,
    DeploymentChange,
    Model,
    ModelVersion,
    Principal,
    SessionTuning,
    check_batching,
    check_cache,
    check_name,
    now,
)
from sluice.domain.results import InferenceResult
from sluice.domain.signature import Signature, TensorSpec

__all__ = [
    "RUNTIME_KINDS",
    "SCOPES",
    "ApiKey",
    "BackendError",
    "BadRequest",
    "BatchJob",
    "BatchingSettings",
    "CacheSettings",
    "ChunkResult",
    "Conflict",
    "DeadlineExceeded",
    "Deployment",
    "DeploymentChange",
    "Forbidden",
    "InferenceResult",
    "InvalidInput",
    "Model",
    "ModelVersion",
    "NotFound",
    "PayloadTooLarge",
    "Principal",
    "SessionTuning",
    "Signature",
    "SluiceError",
    "TensorSpec",
    "Unauthenticated",
    "Unavailable",
    "Unprocessable",
    "check_batching",
    "check_cache",
    "check_name",
    "now",
]
