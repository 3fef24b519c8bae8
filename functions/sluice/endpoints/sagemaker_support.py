"""What `sluice.endpoints.sagemaker` sends and reads back: the specs of the calls, the tags
that carry sluice's own facts on an endpoint, and SageMaker's errors in sluice's words."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sluice.domain.errors import BackendError, SluiceError, Unavailable
from sluice.endpoints.control import AsyncSpec, Autoscaling, ComponentSpec, Mode

if TYPE_CHECKING:
    from collections.abc import Callable

log = logging.getLogger(__name__)


class Tag:
    """The keys of sluice's tags on an endpoint: the facts it reads back (`sagemaker_state`)."""

    TENANT = "sluice:tenant"
    DEPLOYMENT = "sluice:deployment"
    AUTOSCALING = "sluice:autoscaling"  # autoscaling that waits for InService (every mode)
    VARIANT = "sluice:variant:"  # per variant: "<model> <version> <max_batch_size> <label>"
    COMPONENT = "sluice:component:"  # per variant, mode components: "<SageMaker model> <copies>"
    COMPUTE = "sluice:compute"  # mode components: "<memory MB> <cpus or -> <gpus or ->"
    FALLBACK = "sluice:fallback"  # mode components: what answers while a component has no copy
    TOPICS = "sluice:topics"  # mode async: "created" when sluice made the SNS topics (undeploy deletes them)


COMPONENT_VARIANT = "AllTraffic"  # the one production variant of an endpoint of components
_THROTTLED = frozenset({"ThrottlingException", "Throttling", "TooManyRequestsException", "ServiceUnavailable", "InternalFailure", "InternalServerError"})
_MISSING = frozenset({"ValidationException", "ValidationError", "ResourceNotFound", "ObjectNotFoundException"})


@dataclass(frozen=True, slots=True)
class VariantSpec:
    name: str  # the production variant
    label: str  # the split's variant name in the deployment's policy ("primary" for one version)
    model: str  # the sluice model and version it serves
    version: int
    max_batch_size: int
    model_name: str  # the SageMaker Model
    image: str
    model_data_url: str
    triton_model: str  # SAGEMAKER_TRITON_DEFAULT_MODEL_NAME
    weight: float

    def tag(self) -> dict[str, str]:
        return {"Key": Tag.VARIANT + self.name, "Value": f"{self.model} {self.version} {self.max_batch_size} {self.label}"}


@dataclass(frozen=True, slots=True)
class EndpointSpec:
    name: str
    config_name: str
    tenant: str
    deployment: str
    instance_type: str
    instance_count: int
    role_arn: str
    variants: tuple[VariantSpec, ...]
    autoscaling: Autoscaling | None = None
    mode: Mode = "realtime"
    asynchronous: AsyncSpec | None = None
    components: ComponentSpec | None = None

    def tags(self) -> list[dict[str, str]]:
        return [{"Key": Tag.TENANT, "Value": self.tenant}, {"Key": Tag.DEPLOYMENT, "Value": self.deployment}]


# errors ------------------------------------------------------------------------------------
def error_code(exc: Exception) -> tuple[str, str]:
    error = (getattr(exc, "response", None) or {}).get("Error", {})
    return str(error.get("Code", "")), str(error.get("Message", ""))


def is_missing(exc: Exception) -> bool:
    code, message = error_code(exc)
    text = message.lower()
    return code in _MISSING and ("could not find" in text or "not found" in text or "does not exist" in text)


def already_exists(exc: Exception) -> bool:
    code, message = error_code(exc)
    return code in ("ValidationException", "ValidationError", "ResourceInUse") and "already exist" in message.lower()


def aws_error(exc: Exception, what: str) -> SluiceError:
    """A SageMaker or Application Auto Scaling failure in sluice's words; the raw text goes
    to the log only."""
    from botocore.exceptions import BotoCoreError, ClientError

    if isinstance(exc, SluiceError):
        return exc
    if isinstance(exc, ClientError):
        code, message = error_code(exc)
        log.warning("sagemaker: %s failed", what, extra={"code": code, "error": message[:500]})
        if code == "ResourceLimitExceeded" or code == "LimitExceededException":
            return Unavailable(f"the account's SageMaker quota does not allow this ({what}); ask AWS for more or use fewer or smaller instances")
        if code in _THROTTLED:
            return Unavailable(f"SageMaker is busy ({what}); retry shortly")
        if code.startswith("AccessDenied"):
            return BackendError(f"sluice's role may not {what} (AccessDenied)")
        return BackendError(f"SageMaker refused to {what} ({code or 'unknown error'})")
    if isinstance(exc, BotoCoreError):
        log.warning("sagemaker: %s failed", what, extra={"error_type": type(exc).__name__})
        return Unavailable(f"SageMaker is not reachable ({what})")
    log.warning("sagemaker: %s failed", what, extra={"error_type": type(exc).__name__, "error": str(exc)[:500]})
    return BackendError(f"SageMaker failed to {what} ({type(exc).__name__})")


def create_once(call: Callable[..., Any], **params: Any) -> bool:
    """One create call (a client's bound method); False when what it names already exists:
    the same name is the same content, left by an earlier try or made by another look."""
    from botocore.exceptions import ClientError

    try:
        call(**params)
    except ClientError as exc:
        if already_exists(exc):
            return False
        raise
    return True


def described(call: Callable[..., dict[str, Any]], what: str, **params: Any) -> dict[str, Any] | None:
    """One describe call (`call`, a client's bound method, so callers still name the API they
    use): None when what it names is absent, any other failure in sluice's words."""
    from botocore.exceptions import ClientError

    try:
        return call(**params)
    except ClientError as exc:
        if is_missing(exc):
            return None
        raise aws_error(exc, what) from None
    except Exception as exc:
        raise aws_error(exc, what) from None


# what comes back ---------------------------------------------------------------------------
def compute_tag(components: ComponentSpec) -> str:
    cpus = "-" if components.cpus is None else f"{components.cpus:g}"
    gpus = "-" if not components.gpus else str(components.gpus)
    return f"{components.memory_mb} {cpus} {gpus}"


def compute_from_tag(value: str | None) -> dict[str, Any]:
    """ComputeResourceRequirements from a `sluice:compute` tag; {} when there is none."""
    try:
        memory, cpus, gpus = (value or "").split(" ")
        out: dict[str, Any] = {"MinMemoryRequiredInMb": int(memory)}
        if cpus != "-":
            out["NumberOfCpuCoresRequired"] = float(cpus)
        if gpus != "-":
            out["NumberOfAcceleratorDevicesRequired"] = int(gpus)
        return out
    except ValueError:
        return {}


def variant_tag(value: str | None, variant: str) -> tuple[str, int, int, str]:
    """(model, version, max_batch_size, policy variant) from a `sluice:variant:<name>` tag."""
    try:
        model, version, max_batch, label = (value or "").split(" ")
        return model, int(version), int(max_batch), label
    except ValueError:
        return "", 0, 0, variant


def number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) else None


def integer(value: Any) -> int | None:
    return int(value) if isinstance(value, int | float) else None


def timestamp(value: Any) -> float | None:
    stamp = getattr(value, "timestamp", None)
    return round(stamp(), 3) if callable(stamp) else None


def tags_of(sagemaker: Any, arn: str) -> dict[str, str]:
    """A SageMaker resource's tags by key, every page of them."""
    tags: dict[str, str] = {}
    token = None
    while True:
        page = sagemaker.list_tags(ResourceArn=arn, **({"NextToken": token} if token else {}))
        tags.update((t["Key"], t["Value"]) for t in page.get("Tags", []))
        token = page.get("NextToken")
        if not token:
            return tags
