"""The endpoint control plane as a port: deploy a deployment's versions onto an endpoint,
describe it, change its weights and capacity, add a variant for one more version, settle what
waits for it to be in service, and undeploy it.

Two adapters implement it: `sluice.endpoints.sagemaker.SageMakerEndpoints` (SageMaker and
Application Auto Scaling) and `sluice.endpoints.local_endpoints.LocalEndpoints` (a local
Triton per variant, with the SageMaker port on). `sluice.wiring` picks one from settings;
`sluice.services.endpoints` only ever sees this interface.

An endpoint is built in one of three modes. `realtime`: a production variant per version,
scaling between 1 and N instances. `async`: one variant behind SageMaker's queue
(AsyncInferenceConfig: answers and errors under the tenant's results, optional SNS topics),
scaling on its backlog down to 0 instances. `components`: instances SageMaker manages
(ManagedInstanceScaling, down to 0) with each version an inference component of its own,
whose copies scale down to 0. Scaling to zero is SageMaker's only for the last two, so a
minimum of 0 on a real-time endpoint is refused with that explanation.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol, get_args

from sluice.domain.errors import BadRequest, InvalidInput, SluiceError, Unprocessable

if TYPE_CHECKING:
    from pathlib import Path

    from sluice.domain import ModelVersion
    from sluice.endpoints.repository import BuiltModel, Flavour
    from sluice.storage import ArtifactStore

MAX_VARIANTS = 10  # production variants per endpoint config
Mode = Literal["realtime", "async", "components"]
MODES: tuple[str, ...] = get_args(Mode)
SCALE_TO_ZERO = (
    "real-time endpoint variants keep at least 1 instance; SageMaker scales to zero only "
    "asynchronous endpoints and endpoints built from inference components: deploy with mode "
    "async or components (`sluice endpoints deploy --mode async|components`), undeploy, or "
    "score offline with a batch job"
)


# what is asked ------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Autoscaling:
    """Target tracking of invocations per instance, between min and max instances."""

    min_instances: int
    max_instances: int
    target_invocations_per_instance: float

    def __post_init__(self) -> None:
        check_capacity(self.min_instances, self.max_instances, self.target_invocations_per_instance)

    def to_tag(self) -> str:
        return f"{self.min_instances}:{self.max_instances}:{self.target_invocations_per_instance:g}"

    @classmethod
    def from_tag(cls, value: str) -> Autoscaling | None:
        try:
            low, high, target = value.split(":")
            return cls(int(low), int(high), float(target))
        except (ValueError, SluiceError):
            return None

    def to_dict(self) -> dict[str, Any]:
        return {
            "min_instances": self.min_instances,
            "max_instances": self.max_instances,
            "target_invocations_per_instance": self.target_invocations_per_instance,
        }


MAX_INSTANCES = 100  # instances of a variant: at creation, and the autoscaling range's either end


def check_instances(name: str, value: int, error: type[SluiceError] = BadRequest) -> None:
    """A count of instances (`name`: an end of the autoscaling range, the instances wanted now)
    within what one variant may have, as `instance_count` is: refused naming it otherwise."""
    if value > MAX_INSTANCES:
        raise error(f"{name} is at most {MAX_INSTANCES}, as instance_count is", field=name)


def check_capacity(low: int, high: int, target: float | None = None) -> None:
    """A real-time variant's autoscaling range (and target), as every deploy and scale gives it."""
    if low < 1:
        raise BadRequest(f"min_instances must be at least 1: {SCALE_TO_ZERO}", field="min_instances")
    check_instances("min_instances", low)
    check_instances("max_instances", high)
    if high < low:
        raise BadRequest(f"min_instances ({low}) is above max_instances ({high})", field="min_instances")
    if target is not None and not target > 0:
        raise BadRequest("target_invocations_per_instance must be above 0", field="target_invocations_per_instance")


@dataclass(frozen=True, slots=True)
class Capacity:
    """Autoscaling of an asynchronous endpoint's instances (on its backlog per instance) or of
    an inference component's copies (on invocations per copy), between `low` and `high`; at a
    `low` of 0 a step policy on an alarm starts it again (`sluice.endpoints.scaling`)."""

    low: int
    high: int
    target: float

    def to_tag(self) -> str:
        return f"{self.low}:{self.high}:{self.target:g}"

    @classmethod
    def from_tag(cls, value: str | None) -> Capacity | None:
        try:
            low, high, target = (value or "").split(":")
            return cls(int(low), int(high), float(target))
        except ValueError:
            return None


@dataclass(frozen=True, slots=True)
class AsyncSpec:
    """An asynchronous endpoint's AsyncInferenceConfig and scaling."""

    output_path: str  # S3OutputPath: under the tenant's results, where the runtime reads answers
    failure_path: str  # S3FailurePath
    max_concurrent_invocations: int  # per instance
    scaling: Capacity  # instances, on ApproximateBacklogSizePerInstance
    success_topic: str | None = None  # SNS topic ARNs; with create_topics, sluice makes both
    error_topic: str | None = None
    create_topics: bool = False


@dataclass(frozen=True, slots=True)
class ComponentSpec:
    """Instances SageMaker manages, and what each version's inference component needs."""

    min_instances: int  # ManagedInstanceScaling
    max_instances: int
    copies: dict[str, int]  # at creation, by production variant name (`DeployTarget.variant`)
    memory_mb: int  # what one copy needs
    cpus: float | None
    gpus: int | None
    scaling: Capacity  # copies, on SageMakerInferenceComponentInvocationsPerCopy
    fallback: str | None = None  # "in_process": the ONNX artifact answers while a copy starts

    def compute(self) -> dict[str, Any]:
        """ComputeResourceRequirements."""
        out: dict[str, Any] = {"MinMemoryRequiredInMb": self.memory_mb}
        if self.cpus is not None:
            out["NumberOfCpuCoresRequired"] = self.cpus
        if self.gpus:
            out["NumberOfAcceleratorDevicesRequired"] = self.gpus
        return out


@dataclass(frozen=True, slots=True)
class DeployTarget:
    variant: str  # the production variant
    label: str  # the split's variant name in the deployment's policy ("primary" for one version)
    weight: float
    version: ModelVersion  # an ONNX version: its Triton repository is built from it


@dataclass(frozen=True, slots=True)
class DeploySpec:
    """One endpoint for a deployment: a variant per version, checked by the service."""

    endpoint: str
    tenant: str
    deployment: str
    instance_type: str
    gpu: bool
    instance_count: int
    targets: tuple[DeployTarget, ...]
    autoscaling: Autoscaling | None = None
    max_batch_size: int | None = None  # None: 64 when the model has a dynamic batch axis
    triton_version: str | None = None  # None: the adapter's default
    mode: Mode = "realtime"
    asynchronous: AsyncSpec | None = None  # mode async
    components: ComponentSpec | None = None  # mode components


@dataclass(frozen=True, slots=True)
class VariantChanges:
    """What one scale call changes, by production variant: autoscaling first, then weights
    and instance counts together (SageMaker takes them in one update)."""

    autoscaling: dict[str, Autoscaling] = field(default_factory=dict)
    weights: dict[str, float] = field(default_factory=dict)
    instances: dict[str, int] = field(default_factory=dict)


# what is there -----------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ScalingState:
    """A variant's (or an inference component's) registered autoscaling, as the adapter
    reports it."""

    min_instances: int  # of instances, or of copies for a component
    max_instances: int
    target_invocations_per_instance: float | None  # the tracked target; None: no sluice tracking policy on it
    metric: str = "invocations_per_instance"  # backlog_per_instance (async), invocations_per_copy (components)
    from_zero: bool | None = None  # the scale-from-zero step policy is there (async, components)

    def to_dict(self) -> dict[str, Any]:
        unit = "copies" if self.metric == "invocations_per_copy" else "instances"
        out: dict[str, Any] = {
            f"min_{unit}": self.min_instances,
            f"max_{unit}": self.max_instances,
            f"target_{self.metric}": self.target_invocations_per_instance,
        }
        if self.from_zero is not None:
            out["scales_from_zero"] = self.from_zero
        return out


@dataclass(frozen=True, slots=True)
class VariantState:
    name: str
    label: str
    model: str
    version: int
    max_batch_size: int
    model_name: str
    instance_type: str
    desired_weight: float | None
    current_weight: float | None
    desired_instances: int | None
    current_instances: int | None
    autoscaling: ScalingState | None = None
    url: str | None = None  # where the variant answers InvokeEndpoint locally; None: AWS's own

    def to_dict(self) -> dict[str, Any]:
        out = {
            "name": self.label,
            "production_variant": self.name,
            "model": self.model,
            "version": self.version,
            "sagemaker_model": self.model_name,
            "instance_type": self.instance_type,
            "weight": self.desired_weight,
            "current_weight": self.current_weight,
            "desired_instances": self.desired_instances,
            "current_instances": self.current_instances,
            "autoscaling": self.autoscaling.to_dict() if self.autoscaling else None,
        }
        if self.url is not None:
            out["url"] = self.url
        return out


@dataclass(frozen=True, slots=True)
class ComponentState:
    """A version's inference component on an endpoint of components."""

    name: str  # the inference component
    variant: str  # sluice's variant name for it (the production variant name it would have)
    label: str  # the split's variant name in the deployment's policy
    model: str
    version: int
    max_batch_size: int
    model_name: str  # the SageMaker model
    status: str  # Creating, InService, Failed, ...; Pending: waits for the endpoint to be InService
    failure_reason: str | None = None
    desired_copies: int | None = None
    current_copies: int | None = None
    compute: dict[str, Any] = field(default_factory=dict)
    autoscaling: ScalingState | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.label,
            "inference_component": self.name,
            "model": self.model,
            "version": self.version,
            "sagemaker_model": self.model_name,
            "status": self.status,
            "failure_reason": self.failure_reason,
            "desired_copies": self.desired_copies,
            "current_copies": self.current_copies,
            "compute": self.compute,
            "autoscaling": self.autoscaling.to_dict() if self.autoscaling else None,
        }


@dataclass(frozen=True, slots=True)
class EndpointState:
    name: str
    arn: str
    status: str  # Creating, InService, Updating, Failed, Deleting, ...
    failure_reason: str | None
    config_name: str
    tenant: str
    deployment: str
    variants: tuple[VariantState, ...]
    pending_autoscaling: Autoscaling | None = None
    created_at: float | None = None
    updated_at: float | None = None
    images: tuple[str, ...] = field(default=())
    notes: tuple[str, ...] = ()  # what the adapter's numbers mean where it runs
    mode: Mode = "realtime"
    asynchronous: dict[str, Any] | None = None  # mode async: output and failure paths, topics, concurrency
    components: tuple[ComponentState, ...] = ()  # mode components: one per version
    pending_capacity: Capacity | None = None  # async or components: autoscaling that waits for InService
    fallback: str | None = None  # components: what answers while a component has no copy
    topics_made: tuple[str, ...] = ()  # async: the SNS topics sluice made for it (undeploy deletes them)

    def variant(self, name: str) -> VariantState | None:
        """By the policy's variant name or the production variant's."""
        return next((v for v in self.variants if name in (v.label, v.name)), None)

    def component(self, name: str) -> ComponentState | None:
        """By the policy's variant name or the component's."""
        return next((c for c in self.components if name in (c.label, c.name)), None)

    @property
    def serving(self) -> tuple[str, str | None]:
        """(status, failure reason) of the whole: an endpoint of components is in service
        once every component is."""
        if self.status != "InService" or self.mode != "components":
            return self.status, self.failure_reason
        failed = [c for c in self.components if c.status == "Failed"]
        if failed:
            return "Failed", "; ".join(f"inference component {c.name}: {c.failure_reason or 'failed'}" for c in failed)
        waiting = [c for c in self.components if c.status != "InService"]
        if waiting or not self.components:
            return "Creating", None
        return "InService", None


@dataclass(frozen=True, slots=True)
class EndpointWeights:
    """The least a rollout's look needs: the status, and each live variant's desired weight
    (None where the endpoint reports none)."""

    name: str
    status: str
    weights: dict[str, float | None]
    failure_reason: str | None = None


# the port ----------------------------------------------------------------------------------
class EndpointControl(Protocol):
    """Where a deployment's endpoint runs, and the calls that change it."""

    kind: Literal["sagemaker", "local"]

    def deploy(self, spec: DeploySpec) -> None:
        """Create the endpoint; what this call made is removed again when it fails."""
        ...

    def describe(self, endpoint: str) -> EndpointState | None:
        """The endpoint as it is now; None when there is none."""
        ...

    def settle(self, state: EndpointState) -> EndpointState:
        """Once in service: apply what waited for it (autoscaling asked for at deploy)."""
        ...

    def change(self, endpoint: str, changes: VariantChanges) -> None:
        """Autoscaling, weights and instance counts of the endpoint's variants."""
        ...

    def weights(self, endpoint: str) -> EndpointWeights | None:
        """Status and live variant weights, in one call; None when there is no endpoint."""
        ...

    def add_variant(self, state: EndpointState, target: DeployTarget, *, like: VariantState) -> VariantState:
        """Put one more variant on an InService endpoint, serving `target.version` at
        `target.weight`, on the instance type and count of `like`; the variant as added (its
        instances come up while the endpoint updates). What this call made is removed again
        when it fails."""
        ...

    def undeploy(self, endpoint: str, state: EndpointState | None) -> dict[str, Any]:
        """Remove the endpoint and all it used; what was removed, by kind."""
        ...


def build_variant_repository(
    root: Path, version: ModelVersion, store: ArtifactStore, *, flavour: Flavour, max_batch_size: int | None, gpu: bool
) -> BuiltModel:
    """A version's Triton repository, its errors in the words of a deploy request."""
    from sluice.endpoints.repository import TritonOptions, build_repository

    options = TritonOptions(max_batch_size=max_batch_size, instance_kind="KIND_GPU" if gpu else "KIND_CPU")
    try:
        return build_repository(root, version, store, flavour=flavour, options=options)
    except InvalidInput as exc:
        if exc.field == "max_batch_size":
            raise BadRequest(f"version {version.ref}: {exc.message}", field="max_batch_size") from None
        raise Unprocessable(f"version {version.ref} cannot be served by Triton: {exc.message}", field="policy") from None
