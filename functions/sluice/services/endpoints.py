"""A deployment on a SageMaker real-time endpoint: deploy, status, scale, weights, undeploy.

Deploying builds the `sagemaker` flavour Triton repository of each version the deployment
routes to (one version, or each variant of a split), uploads it as `model.tar.gz` to the
artifact store, and creates one SageMaker Model per version, an endpoint config with one
production variant per version (the split's weights as initial weights) and the endpoint.

Traffic moves to the endpoint when it is InService, not before: the first look at an
InService endpoint (the deploy call itself, or a later status read) registers the autoscaling
asked for at deploy time and **binds** the deployment, registering for each variant a
`sagemaker` version of the same model (the same ONNX artifact and signature; config
`endpoint_name`, `variant`, `max_batch_size`, `source_version`) and pointing the policy at
those versions, its split names, weights and routing key unchanged. sluice keeps choosing the
variant and sends it as `TargetVariant`, so the version a response names is the one that
answered. Undeploying points the policy back at the source versions first, then removes
autoscaling, the endpoint, its configs and models, and the bound versions.
"""

from __future__ import annotations

import logging
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sluice.domain import ModelVersion
from sluice.domain.errors import (
    BadRequest,
    Conflict,
    InvalidInput,
    NotFound,
    Unavailable,
    Unprocessable,
)
from sluice.domain.policy import Ensemble, Shadow, Single, Split, parse_policy, policy_dict, walk
from sluice.endpoints.image_uris import check_instance_type, triton_image_uri
from sluice.endpoints.sagemaker import (
    MAX_VARIANTS,
    SCALE_TO_ZERO,
    Autoscaling,
    EndpointSpec,
    EndpointState,
    SageMakerEndpoints,
    VariantSpec,
    check_capacity,
    config_name,
    digest,
    endpoint_name,
    model_name,
    variant_name,
)
from sluice.services.models import require_found

if TYPE_CHECKING:
    from sluice.domain import Deployment, Principal
    from sluice.domain.policy import Node
    from sluice.registry import Registry
    from sluice.services.deployments import DeploymentService
    from sluice.settings import Settings
    from sluice.storage import ArtifactStore

log = logging.getLogger(__name__)

SINGLE_VARIANT = "primary"  # the production variant of a one-version deployment
DEFAULT_TARGET_INVOCATIONS = 100.0
MAX_INSTANCES = 100


@dataclass(frozen=True, slots=True)
class DeployRequest:
    instance_type: str
    instance_count: int = 1
    min_instances: int | None = None  # any of these three turns autoscaling on
    max_instances: int | None = None
    target_invocations_per_instance: float | None = None
    triton_version: str | None = None  # default: settings.sagemaker_triton_version
    max_batch_size: int | None = None  # default: 64 when the model has a dynamic batch axis

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
        self,
        registry: Registry,
        store: ArtifactStore,
        deployments: DeploymentService,
        settings: Settings,
        *,
        endpoints: SageMakerEndpoints | None = None,
    ) -> None:
        self.registry = registry
        self.store = store
        self.deployments = deployments
        self.settings = settings
        self._endpoints = endpoints

    @property
    def endpoints(self) -> SageMakerEndpoints:
        if self._endpoints is None:
            self._endpoints = SageMakerEndpoints(region=self.settings.region)
        return self._endpoints

    # deploy ----------------------------------------------------------------------------------
    def deploy(self, principal: Principal, name: str, request: DeployRequest) -> dict[str, Any]:
        principal.require("admin")
        dep = self.registry.get_deployment(principal.tenant, name)
        processor = check_instance_type(request.instance_type)
        if not 1 <= request.instance_count <= MAX_INSTANCES:
            raise BadRequest(f"instance_count must be between 1 and {MAX_INSTANCES}", field="instance_count")
        scaling = request.autoscaling()
        targets = self._targets(principal.tenant, dep)
        role = self.settings.sagemaker_execution_role_arn
        if not role:
            raise Unavailable(
                "deploying endpoints needs SLUICE_SAGEMAKER_EXECUTION_ROLE_ARN, the IAM role SageMaker runs the model as",
                field="sagemaker_execution_role_arn",
            )
        endpoint = endpoint_name(principal.tenant, name)
        existing = self.endpoints.describe(endpoint)
        if existing is not None:
            raise Conflict(
                f"deployment '{name}' already has endpoint {endpoint} ({existing.status}); change it with "
                "PUT .../scale, or undeploy it first",
                field="endpoint",
            )
        image = self.settings.sagemaker_triton_image or triton_image_uri(
            self._region(),
            instance_type=request.instance_type,
            version=request.triton_version or self.settings.sagemaker_triton_version,
        )
        variants = self._package(principal.tenant, endpoint, targets, image, role, request, gpu=processor == "gpu")
        fingerprint = digest(
            request.instance_type, str(request.instance_count), *(f"{v.name}={v.model_name}@{v.weight:g}" for v in variants)
        )
        spec = EndpointSpec(
            name=endpoint,
            config_name=config_name(endpoint, fingerprint),
            tenant=principal.tenant,
            deployment=name,
            instance_type=request.instance_type,
            instance_count=request.instance_count,
            role_arn=role,
            variants=tuple(variants),
            autoscaling=scaling,
        )
        self.endpoints.create(spec)
        log.info("endpoint created", extra={"tenant": principal.tenant, "deployment": name, "endpoint": endpoint})
        return self._report(principal, dep)

    def _targets(self, tenant: str, dep: Deployment) -> list[tuple[str, float, ModelVersion]]:
        """(variant name, weight, version) for each version the deployment routes to."""
        node = parse_policy(dep.policy)
        if isinstance(node, Single):
            pairs = [(SINGLE_VARIANT, 1.0, node)]
        elif isinstance(node, Split) and all(isinstance(v.target, Single) for v in node.variants):
            pairs = [(v.name, v.weight, v.target) for v in node.variants]  # type: ignore[misc]
        else:
            raise Unprocessable(
                "a SageMaker endpoint serves one version or a split of versions; this deployment's policy is "
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
        for label, weight, single in pairs:
            version = require_found(self.registry.get_version, tenant, single.model, single.version, field="policy")
            if version.runtime == "triton" or version.artifact_uri.endswith((".tar.gz", ".tgz")):
                raise Unprocessable(
                    f"version {version.ref} has no ONNX artifact to build a Triton repository from", field="policy"
                )
            out.append((label, weight, version))
        return out

    def _package(
        self,
        tenant: str,
        endpoint: str,
        targets: list[tuple[str, float, ModelVersion]],
        image: str,
        role: str,
        request: DeployRequest,
        *,
        gpu: bool,
    ) -> list[VariantSpec]:
        """Build and upload each version's `model.tar.gz`; the variants that serve them."""
        from sluice.endpoints.repository import TritonOptions, build_repository, tarball_bytes

        options = TritonOptions(max_batch_size=request.max_batch_size, instance_kind="KIND_GPU" if gpu else "KIND_CPU")
        variants = []
        with tempfile.TemporaryDirectory(prefix="sluice-endpoint-") as tmp:
            for index, (label, weight, version) in enumerate(targets):
                root = Path(tmp) / str(index)
                try:
                    built = build_repository(root, version, self.store, flavour="sagemaker", options=options)
                except InvalidInput as exc:
                    if exc.field == "max_batch_size":
                        raise BadRequest(f"version {version.ref}: {exc.message}", field="max_batch_size") from None
                    raise Unprocessable(f"version {version.ref} cannot be served by Triton: {exc.message}", field="policy") from None
                ref = self.store.put(tenant, tarball_bytes(root), suffix=".tar.gz")
                if not ref.uri.startswith("s3://"):
                    raise Unavailable(
                        "SageMaker reads model.tar.gz from S3: deploying endpoints needs an s3:// artifact store (SLUICE_STORE)",
                        field="store",
                    )
                production = variant_name(label)
                variants.append(
                    VariantSpec(
                        name=production,
                        label=label,
                        model=version.model,
                        version=version.version,
                        max_batch_size=built.max_batch_size,
                        model_name=model_name(endpoint, production, digest(ref.sha256, image, role, built.name)),
                        image=image,
                        model_data_url=ref.uri,
                        triton_model=built.name,
                        weight=weight,
                    )
                )
        return variants

    def _region(self) -> str:
        region = self.endpoints.region
        if not region:
            raise Unavailable("no AWS region is configured for SageMaker; set SLUICE_REGION", field="region")
        return region

    # status ----------------------------------------------------------------------------------
    def status(self, principal: Principal, name: str) -> dict[str, Any]:
        principal.require("admin")
        return self._report(principal, self.registry.get_deployment(principal.tenant, name))

    def _state(self, principal: Principal, dep: Deployment) -> EndpointState:
        endpoint = endpoint_name(principal.tenant, dep.name)
        state = self.endpoints.describe(endpoint)
        if state is None or state.tenant not in ("", principal.tenant):
            raise NotFound(f"deployment '{dep.name}' has no SageMaker endpoint", field="endpoint")
        return state

    def _report(self, principal: Principal, dep: Deployment) -> dict[str, Any]:
        state = self._state(principal, dep)
        dep, state = self._converge(principal, dep, state)
        types = sorted({v.instance_type for v in state.variants if v.instance_type})
        return {
            "deployment": dep.name,
            "endpoint_name": state.name,
            "status": state.status,
            "failure_reason": state.failure_reason,
            "bound": self._bound(dep, state.name),
            "instance_type": types[0] if len(types) == 1 else types or None,
            "images": list(state.images),
            "variants": [v.to_dict() for v in state.variants],
            "pending_autoscaling": state.pending_autoscaling.to_dict() if state.pending_autoscaling else None,
            "created_at": state.created_at,
            "updated_at": state.updated_at,
            "policy": dep.policy,
            "revision": dep.revision,
        }

    def _converge(self, principal: Principal, dep: Deployment, state: EndpointState) -> tuple[Deployment, EndpointState]:
        """Once InService: register the autoscaling asked for at deploy, and bind."""
        if state.status != "InService":
            return dep, state
        if state.pending_autoscaling is not None:
            for variant in state.variants:
                self.endpoints.register_autoscaling(state.name, variant.name, state.pending_autoscaling)
            self.endpoints.forget_pending_autoscaling(state)
            state = self.endpoints.describe(state.name) or state
        return self._bind(principal, dep, state), state

    # binding ---------------------------------------------------------------------------------
    def _bound(self, dep: Deployment, endpoint: str) -> bool:
        singles = [n for n in walk(parse_policy(dep.policy)) if isinstance(n, Single)]
        return bool(singles) and all(_bound_to(self._version(dep.tenant, s), endpoint) for s in singles)

    def _version(self, tenant: str, single: Single) -> ModelVersion | None:
        try:
            return self.registry.get_version(tenant, single.model, single.version)
        except NotFound:
            return None

    def _bind(self, principal: Principal, dep: Deployment, state: EndpointState) -> Deployment:
        node = parse_policy(dep.policy)
        if isinstance(node, Single):
            slots: list[tuple[str, Single]] = [(SINGLE_VARIANT, node)]
        elif isinstance(node, Split) and all(isinstance(v.target, Single) for v in node.variants):
            slots = [(v.name, v.target) for v in node.variants]  # type: ignore[misc]
        else:
            return dep  # the policy has moved on from what was deployed: it stays as it is
        chosen: dict[str, Single] = {}
        for label, single in slots:
            variant = state.variant(label)
            current = self._version(dep.tenant, single)
            if variant is None or current is None:
                return dep
            if _bound_to(current, state.name):
                continue
            if (single.model, single.version) != (variant.model, variant.version):
                return dep
            bound = self._bound_version(principal, current, state.name, variant.name, variant.max_batch_size)
            chosen[label] = Single(model=bound.model, version=bound.version)
        if not chosen:
            return dep
        if isinstance(node, Single):
            policy: Node = chosen[SINGLE_VARIANT]
        else:
            assert isinstance(node, Split)
            policy = node.model_copy(update={"variants": tuple(v.model_copy(update={"target": chosen.get(v.name, v.target)}) for v in node.variants)})
        try:
            updated = self.deployments.update(principal, dep.name, policy_dict(policy), expected_revision=dep.revision)
        except Conflict:
            return self.registry.get_deployment(dep.tenant, dep.name)  # changed meanwhile; the next look binds
        log.info("deployment bound to its endpoint", extra={"tenant": dep.tenant, "deployment": dep.name, "endpoint": state.name})
        return updated

    def _bound_version(
        self, principal: Principal, source: ModelVersion, endpoint: str, variant: str, max_batch_size: int
    ) -> ModelVersion:
        config = {"endpoint_name": endpoint, "variant": variant, "max_batch_size": max_batch_size, "source_version": source.version}
        for existing in self.registry.list_versions(source.tenant, source.model):
            if existing.runtime == "sagemaker" and existing.config == config:
                return existing
        return self.registry.add_version(
            ModelVersion(
                tenant=source.tenant,
                model=source.model,
                version=0,
                runtime="sagemaker",
                artifact_uri=source.artifact_uri,
                sha256=source.sha256,
                size_bytes=source.size_bytes,
                signature=source.signature,
                config=config,
                created_by=principal.subject,
            )
        )

    def _unbind(self, principal: Principal, dep: Deployment, endpoint: str) -> tuple[Deployment, set[str]]:
        """Point every version bound to `endpoint` back at its source; the models touched."""
        touched: set[str] = set()

        def back(single: Single) -> Single:
            version = self._version(dep.tenant, single)
            if version is None or not _bound_to(version, endpoint):
                return single
            touched.add(single.model)
            return Single(model=single.model, version=int(version.config["source_version"]))

        node = parse_policy(dep.policy)
        restored = _map_singles(node, back)
        if restored == node:
            return dep, touched
        return self.deployments.update(principal, dep.name, policy_dict(restored), expected_revision=dep.revision), touched

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
        for production, scaling in plan.items():
            self.endpoints.register_autoscaling(state.name, production, scaling)
        changes = []
        for variant in state.variants:
            change: dict[str, Any] = {"VariantName": variant.name}
            if variant.name in weights:
                change["DesiredWeight"] = weights[variant.name]
            if request.desired_instances is not None and variant in chosen:
                change["DesiredInstanceCount"] = request.desired_instances
            if len(change) > 1:
                changes.append(change)
        if changes:
            self.endpoints.update_variants(state.name, changes)
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
        state = self.endpoints.describe(endpoint)
        if state is not None and state.tenant not in ("", principal.tenant):
            state = None
        dep, touched = self._unbind(principal, dep, endpoint)
        deleted = self.endpoints.delete(endpoint, state)
        touched |= {v.model for v in state.variants if v.model} if state else set()
        deleted["versions"] = self._delete_bound_versions(principal.tenant, endpoint, touched)
        if state is None and not any(deleted.values()):
            raise NotFound(f"deployment '{name}' has no SageMaker endpoint", field="endpoint")
        log.info("endpoint deleted", extra={"tenant": principal.tenant, "deployment": name, "endpoint": endpoint})
        return {"deployment": name, "endpoint_name": endpoint, "deleted": deleted, "policy": dep.policy, "revision": dep.revision}

    def _delete_bound_versions(self, tenant: str, endpoint: str, models: set[str]) -> list[str]:
        used = {
            (n.model, n.version)
            for d in self.registry.list_deployments(tenant)
            for n in walk(parse_policy(d.policy))
            if isinstance(n, Single)
        }
        deleted = []
        for model in sorted(models):
            try:
                versions = self.registry.list_versions(tenant, model)
            except NotFound:
                continue
            for version in versions:
                if _bound_to(version, endpoint) and (model, version.version) not in used:
                    self.registry.delete_version(tenant, model, version.version)
                    deleted.append(version.ref)
        return deleted


def _bound_to(version: ModelVersion | None, endpoint: str) -> bool:
    return (
        version is not None
        and version.runtime == "sagemaker"
        and version.config.get("endpoint_name") == endpoint
        and "source_version" in version.config
    )


def _map_singles(node: Node, change: Any) -> Node:
    """The same policy tree with each `single` node passed through `change`."""
    if isinstance(node, Single):
        return change(node)
    if isinstance(node, Split):
        return node.model_copy(update={"variants": tuple(v.model_copy(update={"target": _map_singles(v.target, change)}) for v in node.variants)})
    if isinstance(node, Shadow):
        return node.model_copy(update={
            "primary": _map_singles(node.primary, change),
            "mirrors": tuple(m.model_copy(update={"target": _map_singles(m.target, change)}) for m in node.mirrors),
        })
    if isinstance(node, Ensemble):
        return node.model_copy(update={"members": tuple(m.model_copy(update={"target": _map_singles(m.target, change)}) for m in node.members)})
    return node
