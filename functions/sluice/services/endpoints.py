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

A request's options are checked against its mode before anything is made
(`sluice.services.endpoint_requests`).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from sluice.domain.errors import BadRequest, Conflict, NotFound, Unprocessable
from sluice.domain.policy import MAX_WEIGHT, Single, Split, parse_policy, policy_dict
from sluice.endpoints.control import (
    MAX_INSTANCES,
    MAX_VARIANTS,
    SCALE_TO_ZERO,
    Autoscaling,
    DeploySpec,
    DeployTarget,
    EndpointState,
    VariantChanges,
    check_capacity,
    check_instances,
)
from sluice.endpoints.image_uris import check_instance_type
from sluice.endpoints.names import endpoint_name, variant_name
from sluice.services.endpoint_binding import SINGLE_VARIANT, Binder
from sluice.services.endpoint_requests import (
    DEFAULT_TARGET_INVOCATIONS,
    DeployRequest,
    ScaleRequest,
    async_spec,
    check_mode,
    component_spec,
)
from sluice.services.models import require_found

if TYPE_CHECKING:
    from sluice.domain import Deployment, Principal
    from sluice.endpoints.control import EndpointControl
    from sluice.registry import Registry
    from sluice.services.deployments import DeploymentService
    from sluice.storage.results import ResultStore

log = logging.getLogger(__name__)

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
        check_mode(request, self.control.kind)
        scaling = request.autoscaling() if request.mode == "realtime" else None
        targets = self._targets(principal.tenant, dep)
        asynchronous = async_spec(self.results, principal.tenant, request, targets) if request.mode == "async" else None
        components = component_spec(request, targets, gpu=processor == "gpu") if request.mode == "components" else None
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
        for key in ("min_instances", "max_instances", "desired_instances"):
            value = getattr(request, key)
            if value is not None:
                check_instances(key, value)
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
            if not isinstance(weight, int | float) or isinstance(weight, bool) or not 0 <= weight <= MAX_WEIGHT:  # NaN and infinity too
                # The policy's split takes the same weights, with the same bound: refused here, before
                # the endpoint's weights are changed (a weight the policy then refused left the two apart).
                raise BadRequest(f"a weight is a number from 0 to {MAX_WEIGHT:.0f}", field=f"weights.{key}")
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

    def check_none(self, tenant: str, name: str) -> None:
        """Conflict while deployment `name` has an endpoint (in any state): deleting the
        deployment would leave it running and billed, and a deployment made again under the
        name would find it as its own."""
        endpoint = endpoint_name(tenant, name)
        state = self.control.weights(endpoint)  # one DescribeEndpoint: whether it is there, and its status
        if state is not None:
            raise Conflict(
                f"deployment '{name}' has an endpoint ({endpoint}, {state.status}): undeploy it first "
                f"(`sluice endpoints undeploy {name}`, or DELETE /api/v1/deployments/{name}/endpoint)",
                field="deployment",
            )

    # undeploy --------------------------------------------------------------------------------
    def undeploy(self, principal: Principal, name: str) -> dict[str, Any]:
        principal.require("admin")
        dep = self.registry.get_deployment(principal.tenant, name)
        endpoint = endpoint_name(principal.tenant, name)
        state = self.control.describe(endpoint)
        if state is not None and state.tenant not in ("", principal.tenant):
            state = None
        self.binder.check_alone(principal.tenant, name, endpoint)  # before anything is changed
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
