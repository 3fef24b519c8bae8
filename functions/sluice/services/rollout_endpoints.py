"""The endpoint side of a progressive rollout, for a deployment bound to its SageMaker endpoint
(or the endpoint's local twin): which production variants the stable policy and the candidate
are, the candidate's variant added when the endpoint has none, and the variant weights put on
the endpoint at each move (`sluice.domain.rollouts.endpoint_weights` says which).

sluice routes its own requests by the deployment's split and names the variant
(`TargetVariant`), so these weights do not steer them: they steer everything else that calls
the endpoint, and are what SageMaker's console and its per-variant metrics show.

Weights move only while the endpoint is InService; in any other state (`Updating` after a
weight change, an autoscaling activity or a variant being added) the move waits and the
controller tries again on its next look. SageMaker's calls are the adapter's
(`sluice.endpoints.control`); nothing here imports an AWS SDK.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from sluice.domain.errors import Conflict, SluiceError, Unprocessable
from sluice.domain.policy import Single, Split, parse_policy
from sluice.domain.rollouts import EndpointRollout
from sluice.endpoints.names import endpoint_name, variant_name
from sluice.services.endpoint_binding import Binder, bound_to

if TYPE_CHECKING:
    from collections.abc import Callable

    from sluice.domain import Deployment, ModelVersion, Principal
    from sluice.endpoints.control import EndpointControl, EndpointState, EndpointWeights
    from sluice.registry import Registry
    from sluice.services.deployments import DeploymentService

log = logging.getLogger(__name__)

IN_SERVICE = "InService"
GONE = "gone"  # the endpoint no longer exists: nothing to move, nothing to wait for
_SAME = 1e-9


class RolloutEndpoints:
    """What a rollout does to its deployment's endpoint; the control plane is built on first
    use (a look at a rollout without an endpoint never builds it)."""

    def __init__(
        self, registry: Registry, deployments: DeploymentService, control: Callable[[], EndpointControl]
    ) -> None:
        self.registry = registry
        self.binder = Binder(registry, deployments)
        self._make_control = control
        self._control: EndpointControl | None = None

    @property
    def control(self) -> EndpointControl:
        if self._control is None:
            self._control = self._make_control()
        return self._control

    # start -------------------------------------------------------------------------------------
    def plan(self, principal: Principal, dep: Deployment, version: ModelVersion) -> EndpointRollout | None:
        """The endpoint side of a rollout of `dep` to `version`; None when `dep` is not bound
        to its endpoint. The candidate is the variant bound to `version`, or the variant that
        serves it, or else a variant added for it now (at weight 0; the rollout's first step
        waits until the endpoint is InService with it)."""
        endpoint = endpoint_name(dep.tenant, dep.name)
        if not self.binder.bound(dep, endpoint):
            return None
        state = self.control.describe(endpoint)
        if state is None or state.tenant not in ("", dep.tenant):
            raise Conflict(
                f"deployment '{dep.name}' routes to endpoint {endpoint}, which is gone; "
                f"`sluice endpoints undeploy {dep.name}` points it back at its versions",
                field="endpoint",
            )
        if state.mode in ("async", "components"):
            # An asynchronous endpoint serves one variant (a split could not say which version
            # answered); components are routed by name, not by variant weights.
            raise Conflict(
                f"endpoint {endpoint} is an {'asynchronous' if state.mode == 'async' else 'inference-component'} "
                "endpoint: a rollout moves real-time variants' weights only; undeploy it to roll out in process",
                field="endpoint",
            )
        stable = self._stable_shares(dep, endpoint)  # after the mode's check: an inference component's version names no variant
        before = {v.name: float(v.desired_weight or 0.0) for v in state.variants}
        plan: dict[str, Any] = {"name": endpoint, "stable": stable, "before": before}
        if bound_to(version, endpoint):
            variant = state.variant(str(version.config["variant"]))
            if variant is None:
                raise Conflict(
                    f"version {version.ref} is bound to variant '{version.config['variant']}', which endpoint "
                    f"{endpoint} no longer has",
                    field="to",
                )
            return EndpointRollout(candidate=variant.name, candidate_version=version.version, **plan)
        if version.runtime != "onnx" or version.artifact_uri.endswith((".tar.gz", ".tgz")):
            raise Unprocessable(
                f"version {version.ref} ({version.runtime}) has no ONNX artifact to put on endpoint {endpoint}; "
                "roll out an ONNX version, or a version bound to this endpoint",
                field="to",
            )
        serving = next((v for v in state.variants if (v.model, v.version) == (version.model, version.version)), None)
        if serving is not None:
            bound = self.binder.bound_version(principal, version, endpoint, serving)
            return EndpointRollout(candidate=serving.name, candidate_version=bound.version, **plan)
        return self._add(principal, state, version, stable, plan)

    def _add(
        self, principal: Principal, state: EndpointState, version: ModelVersion, stable: dict[str, float], plan: dict[str, Any]
    ) -> EndpointRollout:
        from sluice.endpoints.control import MAX_VARIANTS, DeployTarget

        if state.status != IN_SERVICE:
            raise Conflict(
                f"endpoint {state.name} is {state.status}: a variant for {version.ref} can be added once it is "
                "InService; start the rollout then",
                field="endpoint",
            )
        if len(state.variants) >= MAX_VARIANTS:
            raise Conflict(
                f"endpoint {state.name} has {len(state.variants)} variants, SageMaker's most, and none serves "
                f"{version.ref}; undeploy it and deploy the deployment again",
                field="endpoint",
            )
        like = max(state.variants, key=lambda v: stable.get(v.name, -1.0))  # the stable's largest share
        base = variant_name(f"{version.model}-v{version.version}")[:50].rstrip("-")
        name, n = base, 2
        while state.variant(name) is not None:
            name, n = f"{base}-{n}", n + 1
        added = self.control.add_variant(state, DeployTarget(name, name, 0.0, version), like=like)
        bound = self.binder.bound_version(principal, version, state.name, added)
        live = self.look(state.name)
        ready = live is not None and live.status == IN_SERVICE and added.name in live.weights
        log.info(
            "rollout added a variant to the endpoint",
            extra={"tenant": state.tenant, "deployment": state.deployment, "endpoint": state.name, "variant": name},
        )
        return EndpointRollout(
            candidate=added.name, candidate_version=bound.version, added=True, ready=ready, **plan
        )

    def _stable_shares(self, dep: Deployment, endpoint: str) -> dict[str, float]:
        """Each production variant the stable policy routes to, with its share of the stable
        traffic."""
        node = parse_policy(dep.policy)
        if isinstance(node, Single):
            parts: list[tuple[float, Single]] = [(1.0, node)]
        elif isinstance(node, Split) and all(isinstance(v.target, Single) for v in node.variants):
            parts = [(v.weight, v.target) for v in node.variants]  # type: ignore[misc]
        else:
            raise Unprocessable(
                f"deployment '{dep.name}' routes to endpoint {endpoint} through a {node.kind} policy; a rollout "
                "on an endpoint starts from one version or a split of versions",
                field="deployment",
            )
        total = sum(weight for weight, _ in parts)
        if total <= 0:
            raise Unprocessable(f"deployment '{dep.name}' gives its variants no weight", field="deployment")
        shares: dict[str, float] = {}
        for weight, single in parts:
            variant = str(self.registry.get_version(dep.tenant, single.model, single.version).config["variant"])
            shares[variant] = shares.get(variant, 0.0) + weight / total
        return shares

    # moves -------------------------------------------------------------------------------------
    def look(self, endpoint: str) -> EndpointWeights | None:
        return self.control.weights(endpoint)

    def apply(self, endpoint: str, target: dict[str, float]) -> tuple[bool, str]:
        """Put `target` on the endpoint if it is InService: (moved, the status it was found in,
        or `gone`). Weights it has already are not sent again (a change makes it Updating)."""
        from sluice.endpoints.control import VariantChanges

        try:
            live = self.look(endpoint)
        except SluiceError as exc:
            log.warning("rollout: endpoint not readable", extra={"endpoint": endpoint, "error": exc.message})
            return False, "unreadable"
        if live is None:
            return False, GONE
        if live.status != IN_SERVICE:
            return False, live.status
        changes = {
            v: w for v, w in target.items() if v in live.weights and abs((live.weights[v] or 0.0) - w) > _SAME
        }
        if changes:
            try:
                self.control.change(endpoint, VariantChanges(weights=changes))
            except SluiceError as exc:
                log.warning("rollout: weights refused", extra={"endpoint": endpoint, "error": exc.message})
                return False, "refused"
        return True, live.status
