"""What a deploy or scale request of a deployment's endpoint may ask, checked before anything
is made: the mode's options (an option of another mode, a minimum of 0 instances on a
real-time endpoint, or an output path outside the tenant's results is a 422 naming the
field), and the specs they make for the endpoint control port (`sluice.endpoints.control`).
`sluice.services.endpoints` acts on them."""

from __future__ import annotations

import re
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING

from sluice.domain.errors import BadRequest, Unavailable, Unprocessable
from sluice.endpoints.control import (
    MODES,
    SCALE_TO_ZERO,
    AsyncSpec,
    Autoscaling,
    Capacity,
    ComponentSpec,
    check_instances,
)

if TYPE_CHECKING:
    from sluice.endpoints.control import DeployTarget
    from sluice.storage.results import ResultStore

DEFAULT_TARGET_INVOCATIONS = 100.0
# The CDK app's defaults (infra/config.py: AsyncInference, InferenceComponents), kept alike.
DEFAULT_BACKLOG_PER_INSTANCE = 5.0
DEFAULT_MAX_CONCURRENT_INVOCATIONS = 4
DEFAULT_INVOCATIONS_PER_COPY = 50.0
DEFAULT_MEMORY_MB = 4096
SNS_TOPIC_ARN = re.compile(r"^arn:aws[a-z\-]*:sns:[a-z0-9\-]+:[0-9]{12}:[a-zA-Z0-9_.-]{1,256}\Z")
ASYNC_OPTIONS = ("output_path", "success_topic", "error_topic", "create_topics", "max_concurrent_invocations", "backlog_per_instance")
COMPONENT_OPTIONS = ("copies", "min_copies", "max_copies", "invocations_per_copy", "cpus", "memory_mb", "gpus", "fallback")


@dataclass(frozen=True, slots=True)
class DeployRequest:
    instance_type: str
    instance_count: int = 1
    min_instances: int | None = None  # any of these three turns autoscaling on
    max_instances: int | None = None
    target_invocations_per_instance: float | None = None
    triton_version: str | None = None  # default: settings.endpoint_control.sagemaker_triton_version
    max_batch_size: int | None = None  # default: 64 when the model has a dynamic batch axis
    mode: str = "realtime"  # realtime, async or components
    # mode async
    output_path: str | None = None  # default: <the tenant's results>sagemaker
    success_topic: str | None = None  # SNS topic ARNs, or create_topics for two of sluice's
    error_topic: str | None = None
    create_topics: bool = False
    max_concurrent_invocations: int | None = None  # per instance (default 4)
    backlog_per_instance: float | None = None  # autoscaling target (default 5)
    # mode components
    copies: int | dict[str, int] | None = None  # at creation: for every version, or by variant name (default 1)
    min_copies: int | None = None  # default 0: scale to zero
    max_copies: int | None = None  # default: the most copies asked for, at least 1
    invocations_per_copy: float | None = None  # autoscaling target (default 50)
    cpus: float | None = None  # what one copy needs
    memory_mb: int | None = None  # default 4096
    gpus: int | None = None  # default 1 on a GPU instance
    fallback: str | None = None  # in_process: the version's ONNX artifact answers while a copy starts

    def given(self, names: tuple[str, ...]) -> list[str]:
        """The options among `names` this request sets."""
        defaults = {f.name: f.default for f in fields(self)}
        return [n for n in names if getattr(self, n) != defaults[n]]

    def autoscaling(self) -> Autoscaling | None:
        if self.min_instances is None and self.max_instances is None and self.target_invocations_per_instance is None:
            return None
        high = max(self.instance_count, self.min_instances or 1) if self.max_instances is None else self.max_instances
        low = min(self.instance_count, high) if self.min_instances is None else self.min_instances
        scaling = Autoscaling(low, high, self.target_invocations_per_instance or DEFAULT_TARGET_INVOCATIONS)
        if not low <= self.instance_count <= high:
            raise BadRequest(
                f"instance_count ({self.instance_count}) must lie between min_instances ({low}) and max_instances ({high})",
                field="instance_count",
            )
        return scaling


@dataclass(frozen=True, slots=True)
class ScaleRequest:
    min_instances: int | None = None
    max_instances: int | None = None
    desired_instances: int | None = None
    target_invocations_per_instance: float | None = None
    variant: str | None = None  # capacity changes apply to this variant; default: every variant
    weights: dict[str, float] | None = None  # by the policy's variant name

    @property
    def scaling(self) -> bool:
        return any(v is not None for v in (self.min_instances, self.max_instances, self.target_invocations_per_instance))


def check_mode(request: DeployRequest, runs_on: str) -> None:
    """The mode exists where the endpoint runs (`runs_on`: sagemaker or local), and no option of
    another mode is given."""
    mode = request.mode
    if mode not in MODES:
        raise Unprocessable(f"mode is one of {list(MODES)}, not {mode!r}", field="mode")
    if mode != "realtime" and runs_on == "local":
        raise Unprocessable(
            f"the local endpoint twin runs real-time endpoints only (its versions already send requests above "
            f"6 MB through its asynchronous queue); deploy with mode {mode} on SageMaker (SLUICE_ENDPOINTS=sagemaker)",
            field="mode",
        )
    foreign = {"realtime": ASYNC_OPTIONS + COMPONENT_OPTIONS, "async": COMPONENT_OPTIONS, "components": ASYNC_OPTIONS}[mode]
    if mode != "realtime":
        foreign += ("target_invocations_per_instance",)
    for option in request.given(foreign):
        wanted = "async" if option in ASYNC_OPTIONS else "components" if option in COMPONENT_OPTIONS else "realtime"
        raise Unprocessable(f"{option} belongs to mode {wanted}; this deploy's mode is {mode}", field=option)
    if mode == "realtime" and request.min_instances == 0:
        raise Unprocessable(f"min_instances 0: {SCALE_TO_ZERO}", field="min_instances")


def instances(request: DeployRequest) -> tuple[int, int]:
    """(min, max) instances of an asynchronous endpoint or of the managed instances of an
    endpoint of components: 0 and the instance count unless given."""
    low = 0 if request.min_instances is None else request.min_instances
    high = max(request.instance_count, low, 1) if request.max_instances is None else request.max_instances
    check_instances("min_instances", low, Unprocessable)
    check_instances("max_instances", high, Unprocessable)
    if low > high:
        raise Unprocessable(f"min_instances ({low}) is above max_instances ({high})", field="min_instances")
    if not low <= request.instance_count <= high:
        raise Unprocessable(
            f"instance_count ({request.instance_count}) must lie between min_instances ({low}) and max_instances ({high})",
            field="instance_count",
        )
    return low, high


def async_spec(results: ResultStore | None, tenant: str, request: DeployRequest, targets: list[DeployTarget]) -> AsyncSpec:
    """An asynchronous endpoint's options checked: it answers under the tenant's `results`."""
    if len(targets) != 1:
        raise Unprocessable(
            "an asynchronous endpoint serves one version: SageMaker, not sluice, would pick among a split's "
            "variants, so a result could not say which version answered",
            field="mode",
        )
    area = results.area(tenant) if results is not None else ""
    if not area.startswith("s3://"):
        raise Unavailable("an asynchronous endpoint writes its answers to S3: it needs an s3:// artifact store (SLUICE_STORE)", field="store")
    output = area + "sagemaker" if request.output_path is None else request.output_path.rstrip("/")
    assert results is not None
    failures = output + "-errors"  # SageMaker's failure path beside it, as docs/gpu-models.md names it
    if not (output.startswith("s3://") and len(output) <= 500 and all(results.owns(tenant, path + "/answer.out") for path in (output, failures))):
        # Both: the area itself as output_path made the failures `…/tenants/acme-errors`, outside
        # it (and inside a tenant named acme-errors's), and every request then a 502 once queued
        raise Unprocessable(
            f"output_path must lie under the tenant's results, {area} (the only place sluice reads answers from), "
            "and so must its failures beside it (output_path + '-errors')",
            field="output_path",
        )
    for key in ("success_topic", "error_topic"):
        value = getattr(request, key)
        if value is not None and not SNS_TOPIC_ARN.match(value):
            raise Unprocessable(f"{key} must be an SNS topic ARN (arn:aws:sns:<region>:<account>:<name>)", field=key)
        if value is not None and value.rpartition(":")[2].startswith("sluice-"):
            # sluice's own topics (the operator's alarms, every tenant's created topics), which
            # the endpoints' role may publish to: never named by a tenant
            raise Unprocessable(f"{key}: a topic named sluice-… is sluice's own; give a topic of your own, or create_topics", field=key)
    if request.create_topics and (request.success_topic or request.error_topic):
        raise Unprocessable("give success_topic and error_topic, or create_topics for two new ones, not both", field="create_topics")
    concurrency = request.max_concurrent_invocations or DEFAULT_MAX_CONCURRENT_INVOCATIONS
    if not 1 <= concurrency <= 1000:
        raise Unprocessable("max_concurrent_invocations is between 1 and 1000", field="max_concurrent_invocations")
    backlog = DEFAULT_BACKLOG_PER_INSTANCE if request.backlog_per_instance is None else request.backlog_per_instance
    if not backlog > 0:
        raise Unprocessable("backlog_per_instance must be above 0", field="backlog_per_instance")
    low, high = instances(request)
    return AsyncSpec(
        output_path=output,
        failure_path=failures,
        max_concurrent_invocations=concurrency,
        scaling=Capacity(low, high, backlog),
        success_topic=request.success_topic,
        error_topic=request.error_topic,
        create_topics=request.create_topics,
    )


def component_spec(request: DeployRequest, targets: list[DeployTarget], *, gpu: bool) -> ComponentSpec:
    """An endpoint of components' options checked: its instances, and each copy's needs."""
    low, high = instances(request)
    copies = _copies(request.copies, targets)
    least = 0 if request.min_copies is None else request.min_copies
    most = max(max(copies.values()), 1) if request.max_copies is None else request.max_copies
    if least < 0 or most < 1 or least > most:
        raise Unprocessable(f"need 0 <= min_copies ({least}) <= max_copies ({most}), and max_copies at least 1", field="min_copies")
    for variant, count in copies.items():
        if not least <= count <= most:
            raise Unprocessable(
                f"copies of '{variant}' ({count}) must lie between min_copies ({least}) and max_copies ({most})", field="copies"
            )
    target = DEFAULT_INVOCATIONS_PER_COPY if request.invocations_per_copy is None else request.invocations_per_copy
    if not target > 0:
        raise Unprocessable("invocations_per_copy must be above 0", field="invocations_per_copy")
    memory = DEFAULT_MEMORY_MB if request.memory_mb is None else request.memory_mb
    if memory < 128:
        raise Unprocessable("memory_mb is at least 128 (what one copy needs)", field="memory_mb")
    if request.cpus is not None and request.cpus < 0.25:
        raise Unprocessable("cpus is at least 0.25 (cores one copy needs)", field="cpus")
    gpus = request.gpus if request.gpus is not None else (1 if gpu else None)
    if gpus is not None and gpus < (1 if gpu else 0):
        raise Unprocessable("gpus is at least 1 on a GPU instance (accelerators one copy needs)", field="gpus")
    if gpus and not gpu:
        raise Unprocessable(f"gpus: {request.instance_type} has no GPU", field="gpus")
    if request.fallback not in (None, "in_process"):
        raise Unprocessable("fallback is in_process (the version's ONNX artifact answers while a copy starts)", field="fallback")
    return ComponentSpec(
        min_instances=low,
        max_instances=high,
        copies=copies,
        memory_mb=memory,
        cpus=request.cpus,
        gpus=gpus or None,
        scaling=Capacity(least, most, target),
        fallback=request.fallback,
    )


def _copies(given: int | dict[str, int] | None, targets: list[DeployTarget]) -> dict[str, int]:
    """Copies at creation by production variant: one number for every version, or by the
    policy's variant names (the rest 1)."""
    if given is None or isinstance(given, int):
        count = 1 if given is None else given
        if isinstance(count, bool) or count < 0:
            raise Unprocessable("copies is a whole number of 0 or more", field="copies")
        return {t.variant: count for t in targets}
    out = {t.variant: 1 for t in targets}
    for key, count in given.items():
        target = next((t for t in targets if key in (t.label, t.variant)), None)
        if target is None:
            raise Unprocessable(f"no variant '{key}'; the deployment routes to {[t.label for t in targets]}", field=f"copies.{key}")
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise Unprocessable("copies is a whole number of 0 or more", field=f"copies.{key}")
        out[target.variant] = count
    return out
