"""Binding a deployment to its endpoint, and back.

Traffic moves to an endpoint when it is in service, not before: the first look at it binds
the deployment, registering for each variant a `sagemaker` version of the same model (the
same ONNX artifact and signature; config `endpoint_name`, `max_batch_size`, `source_version`,
and what the `sagemaker` runtime reads to reach it: `variant` for a real-time or asynchronous
endpoint, `"invocation": "async"` for an asynchronous one, `inference_component` (and
`fallback`) on an endpoint of components, and `endpoint_url` and `async_endpoint_name` where
the endpoint answers locally) and pointing the policy at those versions, its split names,
weights and routing key unchanged. These are the same keys a version served by an endpoint
from the CDK app is registered with. Unbinding points the policy back at the source versions;
the bound versions are deleted once no deployment routes to them.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from sluice.domain import ModelVersion
from sluice.domain.errors import Conflict, NotFound
from sluice.domain.policy import Single, Split, parse_policy, policy_dict, walk
from sluice.registry.guards import decided_again

if TYPE_CHECKING:
    from sluice.domain import Deployment, Principal
    from sluice.domain.policy import Node
    from sluice.endpoints.control import EndpointState, VariantState
    from sluice.registry import Registry
    from sluice.services.deployments import DeploymentService

log = logging.getLogger(__name__)

SINGLE_VARIANT = "primary"  # the production variant of a one-version deployment


class Binder:
    def __init__(self, registry: Registry, deployments: DeploymentService) -> None:
        self.registry = registry
        self.deployments = deployments

    def bound(self, dep: Deployment, endpoint: str) -> bool:
        singles = [n for n in walk(parse_policy(dep.policy)) if isinstance(n, Single)]
        return bool(singles) and all(bound_to(self._version(dep.tenant, s), endpoint) for s in singles)

    def _version(self, tenant: str, single: Single) -> ModelVersion | None:
        try:
            return self.registry.get_version(tenant, single.model, single.version)
        except NotFound:
            return None

    def bind(self, principal: Principal, dep: Deployment, state: EndpointState) -> Deployment:
        node = parse_policy(dep.policy)
        if isinstance(node, Single):
            slots: list[tuple[str, Single]] = [(SINGLE_VARIANT, node)]
        elif isinstance(node, Split) and all(isinstance(v.target, Single) for v in node.variants):
            slots = [(v.name, v.target) for v in node.variants]  # type: ignore[misc]
        else:
            return dep  # the policy has moved on from what was deployed: it stays as it is
        chosen: dict[str, Single] = {}
        for label, single in slots:
            current = self._version(dep.tenant, single)
            served = state.component(label) if state.mode == "components" else state.variant(label)
            if served is None or current is None:
                return dep
            if bound_to(current, state.name):
                continue
            if (single.model, single.version) != (served.model, served.version):
                return dep
            bound = self._bound_version(principal, current, runtime_config(state, label, current.version))
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

    def bound_version(self, principal: Principal, source: ModelVersion, endpoint: str, variant: VariantState) -> ModelVersion:
        """The `sagemaker` version of `source` that real-time `variant` of `endpoint` serves: the
        one registered before, or a new one."""
        return self._bound_version(principal, source, variant_config(endpoint, variant, source.version))

    def _bound_version(self, principal: Principal, source: ModelVersion, config: dict[str, Any]) -> ModelVersion:
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

    def unbind(self, principal: Principal, dep: Deployment, endpoint: str) -> tuple[Deployment, set[str]]:
        """Point every version bound to `endpoint` back at its source; the models touched."""
        touched: set[str] = set()

        def back(single: Single) -> Single:
            version = self._version(dep.tenant, single)
            if version is None or not bound_to(version, endpoint):
                return single
            touched.add(single.model)
            return Single(model=single.model, version=int(version.config["source_version"]))

        node = parse_policy(dep.policy)
        restored = map_singles(node, back)
        if restored == node:
            return dep, touched
        return self.deployments.update(principal, dep.name, policy_dict(restored), expected_revision=dep.revision), touched

    def check_alone(self, tenant: str, name: str, endpoint: str) -> None:
        """Conflict where a deployment other than `name` routes to a version bound to `endpoint`
        (a policy naming `mlp:3` after `name`'s deploy bound it): undeploying `name` would delete
        the endpoint that deployment's requests go to."""
        for other in self.registry.list_deployments(tenant):
            if other.name == name:
                continue
            for node in walk(parse_policy(other.policy)):
                if not isinstance(node, Single):
                    continue
                version = self._version(tenant, node)
                # Its own version, or the one its binding stands for (an endpoint deployed from a
                # policy that routed here: undeploying it would point it back at this endpoint's).
                source = version.config.get("source_version") if version is not None and version.runtime == "sagemaker" else None
                stands_on = self._version(tenant, Single(model=node.model, version=source)) if type(source) is int else None
                if bound_to(version, endpoint) or bound_to(stands_on, endpoint):
                    raise Conflict(
                        f"deployment '{other.name}' routes to {node.model}:{node.version}, which "
                        f"{'stands on a version ' if not bound_to(version, endpoint) else ''}endpoint {endpoint} serves: "
                        f"point it at another version before undeploying '{name}'",
                        field="endpoint",
                    )

    def delete_bound_versions(self, tenant: str, endpoint: str, models: set[str]) -> list[str]:
        """The versions bound to `endpoint` that no deployment names, deleted (as a version's
        delete is: refused where a deployment naming it was written meanwhile, then decided
        again on what is stored now, `sluice.registry.guards`)."""
        deleted: list[str] = []  # across the tries: a version deleted by one is not listed by the next
        return decided_again(lambda: self._delete_bound(tenant, endpoint, models, deleted))

    def _delete_bound(self, tenant: str, endpoint: str, models: set[str], deleted: list[str]) -> list[str]:
        catalog = self.registry.catalog_read(tenant)  # before the check
        used = {
            (n.model, n.version)
            for d in self.registry.list_deployments(tenant)
            for n in walk(parse_policy(d.policy))
            if isinstance(n, Single)
        }
        for model in sorted(models):
            try:
                versions = self.registry.list_versions(tenant, model)
            except NotFound:
                continue
            sources = {v.config.get("source_version") for v in versions if v.runtime == "sagemaker"}  # what another binding restores
            for version in versions:
                if bound_to(version, endpoint) and (model, version.version) not in used and version.version not in sources:
                    self.registry.delete_version(tenant, model, version.version, catalog=catalog)
                    deleted.append(version.ref)
        return deleted


def runtime_config(state: EndpointState, label: str, source_version: int) -> dict[str, Any]:
    """The config of the `sagemaker` version that serves the policy's variant `label` from
    the endpoint: what `sluice.runtimes.sagemaker_target.EndpointTarget.of` reads."""
    config: dict[str, Any] = {"endpoint_name": state.name}
    if state.mode == "components":
        component = state.component(label)
        assert component is not None
        config |= {"inference_component": component.name, "max_batch_size": component.max_batch_size}
        if state.fallback:
            config["fallback"] = state.fallback
        config["source_version"] = source_version
        return config
    variant = state.variant(label)
    assert variant is not None
    return variant_config(state.name, variant, source_version, asynchronous=state.mode == "async")


def variant_config(endpoint: str, variant: VariantState, source_version: int, *, asynchronous: bool = False) -> dict[str, Any]:
    """The config of the `sagemaker` version that `variant` of `endpoint` serves."""
    config: dict[str, Any] = {"endpoint_name": endpoint, "variant": variant.name, "max_batch_size": variant.max_batch_size}
    if asynchronous:
        config["invocation"] = "async"  # every request through S3 and InvokeEndpointAsync
    if variant.url:
        config["endpoint_url"] = variant.url
        # The local container answers both paths: requests above SageMaker's
        # synchronous limit go through the twin's asynchronous queue.
        config["async_endpoint_name"] = endpoint
    config["source_version"] = source_version
    return config


def bound_to(version: ModelVersion | None, endpoint: str) -> bool:
    return (
        version is not None
        and version.runtime == "sagemaker"
        and version.config.get("endpoint_name") == endpoint
        and "source_version" in version.config
    )


def map_singles(node: Node, change: Any) -> Node:
    """The same policy tree with each `single` node passed through `change`."""
    if node.kind == "single":
        return change(node)
    update: dict[str, Any] = {}
    for branch in ("variants", "mirrors", "members"):
        parts = getattr(node, branch, None)
        if parts is not None:
            update[branch] = tuple(p.model_copy(update={"target": map_singles(p.target, change)}) for p in parts)
    if node.kind == "shadow":
        update["primary"] = map_singles(node.primary, change)  # type: ignore[union-attr]
    return node.model_copy(update=update) if update else node
