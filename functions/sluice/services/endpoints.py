"""A deployment's endpoint: deploy, status, scale, weights, undeploy, through the endpoint
control port (`sluice.endpoints.control`): SageMaker on AWS, a local Triton per variant on a
laptop. The service checks what is asked and says what is there; the adapter it is given
does the rest, and `sluice.wiring` chooses it.

Deploying builds a Triton repository of each version the deployment routes to (one version,
or each variant of a split) and puts them on the endpoint in one of three modes
(`sluice.endpoints.control`): `realtime`, a production variant per version (the split's
weights as initial weights); `async`, one version behind SageMaker's queue, answering under
the tenant's results and scaling to zero on its backlog; `components`, each version an
inference component on instances SageMaker manages, its copies scaling to zero. Traffic moves
to the endpoint when it is in service, not before (`sluice.services.endpoint_binding`):
sluice keeps choosing the variant and names it (`TargetVariant`, or the component), so the
version a response names is the one that answered. Undeploying points the policy back at the
source versions first, then removes the endpoint and all it used, and the bound versions.

A request's options are checked against its mode before anything is made: an option of
another mode, a minimum of 0 instances on a real-time endpoint, or an output path outside
the tenant's results is a 422 naming the field.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

from sluice.domain.errors import BadRequest, Conflict, NotFound, Unavailable, Unprocessable
from sluice.domain.policy import Single, Split, parse_policy, policy_dict
from sluice.endpoints.control import (
    MAX_VARIANTS,
    MODES,
    SCALE_TO_ZERO,
    AsyncSpec,
    Autoscaling,
    Capacity,
    ComponentSpec,
    DeploySpec,
    DeployTarget,
    EndpointState,
    VariantChanges,
    check_capacity,
)
from sluice.endpoints.image_uris import check_instance_type
from sluice.endpoints.names import endpoint_name, variant_name
from sluice.services.endpoint_binding import SINGLE_VARIANT, Binder
from sluice.services.models import require_found

if TYPE_CHECKING:
    from sluice.domain import Deployment, Principal
    from sluice.endpoints.control import EndpointControl
    from sluice.registry import Registry
    from sluice.services.deployments import DeploymentService
    from sluice.storage.results import ResultStore

log = logging.getLogger(__name__)

DEFAULT_TARGET_INVOCATIONS = 100.0
MAX_INSTANCES = 100
# The CDK app's defaults (infra/config.py: AsyncInference, InferenceComponents), kept alike.
DEFAULT_BACKLOG_PER_INSTANCE = 5.0
DEFAULT_MAX_CONCURRENT_INVOCATIONS = 4
DEFAULT_INVOCATIONS_PER_COPY = 50.0
DEFAULT_MEMORY_MB = 4096
SNS_TOPIC_ARN = re.compile(r"^arn:aws[a-z\-]*:sns:[a-z0-9\-]+:[0-9]{12}:[a-zA-Z0-9_.-]{1,256}$")
ASYNC_OPTIONS = ("output_path", "success_topic", "error_topic", "create_topics", "max_concurrent_invocations", "backlog_per_instance")
COMPONENT_OPTIONS = ("copies", "min_copies", "max_copies", "invocations_per_copy", "cpus", "memory_mb", "gpus", "fallback")


@dataclass(frozen=True, slots=True)
class DeployRequest:
    instance_type: str
    instance_count: int = 1
    min_instances: int | None = None  # any of these three turns autoscaling on
    max_instances: int | None = None
    target_invocations_per_instance: float | None = None
    triton_version: str | None = None  # default: settings.sagemaker_triton_version
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


class EndpointService:
    def __init__(
        self, registry: Registry, deployments: DeploymentService, control: EndpointControl, results: ResultStore | None = None
    ) -> None:
        self.registry = registry
        self.deployments = deployments
        self.control = control
        self.results = results  # where an asynchronous endpoint writes (the tenant's results)
        self.binder = Binder(registry, deployments)

    # deploy ----------------------------------------------------------------------------------
    def deploy(self, principal: Principal, name: str, request: DeployRequest) -> dict[str, Any]:
        principal.require("admin")
        dep = self.registry.get_deployment(principal.tenant, name)
        processor = check_instance_type(request.instance_type)
        if not 1 <= request.instance_count <= MAX_INSTANCES:
            raise BadRequest(f"instance_count must be between 1 and {MAX_INSTANCES}", field="instance_count")
        self._check_mode(request)
        scaling = request.autoscaling() if request.mode == "realtime" else None
        targets = self._targets(principal.tenant, dep)
        asynchronous = self._async_spec(principal.tenant, request, targets) if request.mode == "async" else None
        components = self._component_spec(request, targets, gpu=processor == "gpu") if request.mode == "components" else None
        endpoint = endpoint_name(principal.tenant, name)
        existing = self.control.describe(endpoint)
        if existing is not None:
            raise Conflict(
                f"deployment '{name}' already has endpoint {endpoint} ({existing.status}); change it with "
                "PUT .../scale, or undeploy it first",
                field="endpoint",
            )
        self.control.deploy(
            DeploySpec(
                endpoint=endpoint,
                tenant=principal.tenant,
                deployment=name,
                instance_type=request.instance_type,
                gpu=processor == "gpu",
                instance_count=request.instance_count,
                targets=tuple(targets),
                autoscaling=scaling,
                max_batch_size=request.max_batch_size,
                triton_version=request.triton_version,
                mode=request.mode,  # type: ignore[arg-type]  # checked: one of MODES
                asynchronous=asynchronous,
                components=components,
            )
        )
        log.info("endpoint created", extra={"tenant": principal.tenant, "deployment": name, "endpoint": endpoint, "mode": request.mode})
        return self._report(principal, dep)

    # the mode's options ------------------------------------------------------------------------
    def _check_mode(self, request: DeployRequest) -> None:
        """The mode exists here, and no option of another mode is given."""
        mode = request.mode
        if mode not in MODES:
            raise Unprocessable(f"mode is one of {list(MODES)}, not {mode!r}", field="mode")
        if mode != "realtime" and self.control.kind == "local":
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

    @staticmethod
    def _instances(request: DeployRequest) -> tuple[int, int]:
        """(min, max) instances of an asynchronous endpoint or of the managed instances of an
        endpoint of components: 0 and the instance count unless given."""
        low = 0 if request.min_instances is None else request.min_instances
        high = max(request.instance_count, low, 1) if request.max_instances is None else request.max_instances
        if high > MAX_INSTANCES:
            raise Unprocessable(f"max_instances is at most {MAX_INSTANCES}", field="max_instances")
        if low > high:
            raise Unprocessable(f"min_instances ({low}) is above max_instances ({high})", field="min_instances")
        if not low <= request.instance_count <= high:
            raise Unprocessable(
                f"instance_count ({request.instance_count}) must lie between min_instances ({low}) and max_instances ({high})",
                field="instance_count",
            )
        return low, high

    def _async_spec(self, tenant: str, request: DeployRequest, targets: list[DeployTarget]) -> AsyncSpec:
        if len(targets) != 1:
            raise Unprocessable(
                "an asynchronous endpoint serves one version: SageMaker, not sluice, would pick among a split's "
                "variants, so a result could not say which version answered",
                field="mode",
            )
        area = self.results.area(tenant) if self.results is not None else ""
        if not area.startswith("s3://"):
            raise Unavailable("an asynchronous endpoint writes its answers to S3: it needs an s3:// artifact store (SLUICE_STORE)", field="store")
        output = area + "sagemaker" if request.output_path is None else request.output_path.rstrip("/")
        assert self.results is not None
        if not (output.startswith("s3://") and len(output) <= 500 and self.results.owns(tenant, output + "/answer.out")):
            raise Unprocessable(
                f"output_path must lie under the tenant's results, {area} (the only place sluice reads answers from)",
                field="output_path",
            )
        for key in ("success_topic", "error_topic"):
            value = getattr(request, key)
            if value is not None and not SNS_TOPIC_ARN.match(value):
                raise Unprocessable(f"{key} must be an SNS topic ARN (arn:aws:sns:<region>:<account>:<name>)", field=key)
        if request.create_topics and (request.success_topic or request.error_topic):
            raise Unprocessable("give success_topic and error_topic, or create_topics for two new ones, not both", field="create_topics")
        concurrency = request.max_concurrent_invocations or DEFAULT_MAX_CONCURRENT_INVOCATIONS
        if not 1 <= concurrency <= 1000:
            raise Unprocessable("max_concurrent_invocations is between 1 and 1000", field="max_concurrent_invocations")
        backlog = DEFAULT_BACKLOG_PER_INSTANCE if request.backlog_per_instance is None else request.backlog_per_instance
        if not backlog > 0:
            raise Unprocessable("backlog_per_instance must be above 0", field="backlog_per_instance")
        low, high = self._instances(request)
        return AsyncSpec(
            output_path=output,
            failure_path=output + "-errors",
            max_concurrent_invocations=concurrency,
            scaling=Capacity(low, high, backlog),
            success_topic=request.success_topic,
            error_topic=request.error_topic,
            create_topics=request.create_topics,
        )

    def _component_spec(self, request: DeployRequest, targets: list[DeployTarget], *, gpu: bool) -> ComponentSpec:
        low, high = self._instances(request)
        copies = self._copies(request.copies, targets)
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

    @staticmethod
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

    def _targets(self, tenant: str, dep: Deployment) -> list[DeployTarget]:
        """A variant for each version the deployment routes to."""
        node = parse_policy(dep.policy)
        if isinstance(node, Single):
            pairs = [(SINGLE_VARIANT, 1.0, node)]
        elif isinstance(node, Split) and all(isinstance(v.target, Single) for v in node.variants):
            pairs = [(v.name, v.weight, v.target) for v in node.variants]  # type: ignore[misc]
        else:
            raise Unprocessable(
                "an endpoint serves one version or a split of versions; this deployment's policy is "
                f"a {dep.policy.get('kind', 'single')} with nested targets",
                field="policy",
            )
        if len(pairs) > MAX_VARIANTS:
            raise Unprocessable(f"an endpoint holds at most {MAX_VARIANTS} variants", field="policy")
        names = [variant_name(label) for label, _, _ in pairs]
        if len(set(names)) != len(names):
            raise Unprocessable(
                "two variant names become the same production variant name (SageMaker allows letters, digits and '-')",
                field="policy",
            )
        out = []
        for production, (label, weight, single) in zip(names, pairs, strict=True):
            version = require_found(self.registry.get_version, tenant, single.model, single.version, field="policy")
            if version.runtime == "triton" or version.artifact_uri.endswith((".tar.gz", ".tgz")):
                raise Unprocessable(
                    f"version {version.ref} has no ONNX artifact to build a Triton repository from", field="policy"
                )
            out.append(DeployTarget(production, label, weight, version))
        return out

    # status ----------------------------------------------------------------------------------
    def status(self, principal: Principal, name: str) -> dict[str, Any]:
        principal.require("admin")
        return self._report(principal, self.registry.get_deployment(principal.tenant, name))

    def _state(self, principal: Principal, dep: Deployment) -> EndpointState:
        endpoint = endpoint_name(principal.tenant, dep.name)
        state = self.control.describe(endpoint)
        if state is None or state.tenant not in ("", principal.tenant):
            raise NotFound(f"deployment '{dep.name}' has no endpoint", field="endpoint")
        return state

    def _report(self, principal: Principal, dep: Deployment) -> dict[str, Any]:
        state = self._state(principal, dep)
        dep, state = self._converge(principal, dep, state)
        types = sorted({v.instance_type for v in state.variants if v.instance_type})
        status, reason = state.serving
        counts = [v.current_instances for v in state.variants if v.current_instances is not None]
        report = {
            "deployment": dep.name,
            "endpoint_name": state.name,
            "runs_on": self.control.kind,
            "mode": state.mode,
            "status": status,  # an endpoint of components is InService once each component is
            "endpoint_status": state.status,
            "failure_reason": reason,
            "bound": self.binder.bound(dep, state.name),
            "instance_type": types[0] if len(types) == 1 else types or None,
            "instance_count": sum(counts) if counts else None,
            "images": list(state.images),
            "variants": [v.to_dict() for v in state.variants],
            "pending_autoscaling": _pending(state),
            "notes": list(state.notes),
            "created_at": state.created_at,
            "updated_at": state.updated_at,
            "policy": dep.policy,
            "revision": dep.revision,
        }
        if state.mode == "async":
            report["asynchronous"] = state.asynchronous
        if state.mode == "components":
            report["components"] = [c.to_dict() for c in state.components]
            report["fallback"] = state.fallback
        return report

    def _converge(self, principal: Principal, dep: Deployment, state: EndpointState) -> tuple[Deployment, EndpointState]:
        """Once InService: apply what waited for it (autoscaling; the inference components),
        and bind once all of it serves."""
        if state.status != "InService":
            return dep, state
        state = self.control.settle(state)
        if state.serving[0] != "InService":
            return dep, state
        return self.binder.bind(principal, dep, state), state

    # scale and weights -----------------------------------------------------------------------
    def scale(self, principal: Principal, name: str, request: ScaleRequest) -> dict[str, Any]:
        principal.require("admin")
        dep = self.registry.get_deployment(principal.tenant, name)
        if not request.scaling and request.desired_instances is None and not request.weights:
            raise BadRequest(
                "give min_instances, max_instances, desired_instances, target_invocations_per_instance or weights",
                field="body",
            )
        for key in ("min_instances", "desired_instances"):
            value = getattr(request, key)
            if value is not None and value < 1:
                raise BadRequest(f"{key} must be at least 1: {SCALE_TO_ZERO}", field=key)
        if request.min_instances is not None and request.max_instances is not None:
            check_capacity(request.min_instances, request.max_instances)
        state = self._state(principal, dep)
        dep, state = self._converge(principal, dep, state)
        if state.mode != "realtime":
            raise Unprocessable(
                f"endpoint {state.name} is {'asynchronous' if state.mode == 'async' else 'built from inference components'}: "
                "its capacity scales itself (down to zero); to change its range or weights, undeploy and deploy it again",
                field="mode",
            )
        if state.status != "InService":
            raise Conflict(f"endpoint {state.name} is {state.status}; scale it once it is InService", field="endpoint")
        if request.variant is not None:
            one = state.variant(request.variant)
            if one is None:
                raise BadRequest(f"no variant '{request.variant}'; the endpoint has {[v.label for v in state.variants]}", field="variant")
            chosen = [one]
        else:
            chosen = list(state.variants)
        weights = self._weights(state, request.weights or {})
        plan: dict[str, Autoscaling] = {}
        if request.scaling:
            for variant in chosen:
                current = variant.autoscaling
                low = request.min_instances if request.min_instances is not None else (current.min_instances if current else None)
                high = request.max_instances if request.max_instances is not None else (current.max_instances if current else None)
                if low is None or high is None:
                    missing = "max_instances" if low is not None else "min_instances"
                    raise BadRequest(
                        f"variant '{variant.label}' has no autoscaling yet: give both min_instances and max_instances", field=missing
                    )
                target = request.target_invocations_per_instance or (
                    current.target_invocations_per_instance if current and current.target_invocations_per_instance else DEFAULT_TARGET_INVOCATIONS
                )
                plan[variant.name] = Autoscaling(low, high, target)
        if request.desired_instances is not None:
            for variant in chosen:
                bounds = plan.get(variant.name) or variant.autoscaling
                if bounds is not None and not bounds.min_instances <= request.desired_instances <= bounds.max_instances:
                    raise BadRequest(
                        f"desired_instances ({request.desired_instances}) is outside variant '{variant.label}''s "
                        f"autoscaling range {bounds.min_instances}-{bounds.max_instances}",
                        field="desired_instances",
                    )
        instances = {v.name: request.desired_instances for v in chosen} if request.desired_instances is not None else {}
        self.control.change(state.name, VariantChanges(autoscaling=plan, weights=weights, instances=instances))
        if weights:
            dep = self._policy_weights(principal, dep, state, weights)
        log.info("endpoint scaled", extra={"tenant": principal.tenant, "deployment": name, "endpoint": state.name})
        return self._report(principal, dep)

    def set_weights(self, principal: Principal, name: str, weights: dict[str, float]) -> dict[str, Any]:
        if not weights:
            raise BadRequest("give a weight for at least one variant", field="weights")
        return self.scale(principal, name, ScaleRequest(weights=weights))

    def _weights(self, state: EndpointState, given: dict[str, float]) -> dict[str, float]:
        """Weights by production variant; unknown names, negative weights or all-zero refused."""
        out: dict[str, float] = {}
        for key, weight in given.items():
            variant = state.variant(key)
            if variant is None:
                raise BadRequest(f"no variant '{key}'; the endpoint has {[v.label for v in state.variants]}", field=f"weights.{key}")
            if not isinstance(weight, int | float) or isinstance(weight, bool) or weight < 0:
                raise BadRequest("a weight is a number of 0 or more", field=f"weights.{key}")
            out[variant.name] = float(weight)
        if out:
            total = sum(out.get(v.name, v.desired_weight or 0.0) for v in state.variants)
            if total <= 0:
                raise BadRequest("variant weights must add up to more than 0", field="weights")
        return out

    def _policy_weights(self, principal: Principal, dep: Deployment, state: EndpointState, weights: dict[str, float]) -> Deployment:
        """The split in the policy takes the same weights: sluice picks the variant."""
        node = parse_policy(dep.policy)
        if not isinstance(node, Split):
            return dep
        labels = {v.label: weights[v.name] for v in state.variants if v.name in weights}
        variants = tuple(v.model_copy(update={"weight": labels.get(v.name, v.weight)}) for v in node.variants)
        if variants == node.variants:
            return dep
        return self.deployments.update(principal, dep.name, policy_dict(node.model_copy(update={"variants": variants})), expected_revision=dep.revision)

    # undeploy --------------------------------------------------------------------------------
    def undeploy(self, principal: Principal, name: str) -> dict[str, Any]:
        principal.require("admin")
        dep = self.registry.get_deployment(principal.tenant, name)
        endpoint = endpoint_name(principal.tenant, name)
        state = self.control.describe(endpoint)
        if state is not None and state.tenant not in ("", principal.tenant):
            state = None
        dep, touched = self.binder.unbind(principal, dep, endpoint)
        deleted = self.control.undeploy(endpoint, state)
        touched |= {v.model for v in state.variants if v.model} if state else set()
        deleted["versions"] = self.binder.delete_bound_versions(principal.tenant, endpoint, touched)
        if state is None and not any(deleted.values()):
            raise NotFound(f"deployment '{name}' has no endpoint", field="endpoint")
        log.info("endpoint deleted", extra={"tenant": principal.tenant, "deployment": name, "endpoint": endpoint})
        return {"deployment": name, "endpoint_name": endpoint, "deleted": deleted, "policy": dep.policy, "revision": dep.revision}


def _pending(state: EndpointState) -> dict[str, Any] | None:
    """The autoscaling that waits for InService, in the endpoint's mode's words."""
    if state.pending_autoscaling is not None:
        return state.pending_autoscaling.to_dict()
    capacity = state.pending_capacity
    if capacity is None:
        return None
    if state.mode == "components":
        return {"min_copies": capacity.low, "max_copies": capacity.high, "target_invocations_per_copy": capacity.target}
    return {"min_instances": capacity.low, "max_instances": capacity.high, "target_backlog_per_instance": capacity.target}
