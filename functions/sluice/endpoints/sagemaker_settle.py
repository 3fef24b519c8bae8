"""What waits for a SageMaker endpoint to be InService, done on the first look that finds it
so (`SageMakerEndpoints.settle`): Application Auto Scaling accepts a variant only then, and
SageMaker creates inference components only on an InService endpoint, whose copies are
registered for autoscaling once each is InService. The tag that said what waited is removed
once nothing does."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sluice.endpoints.sagemaker_requests import component_request
from sluice.endpoints.sagemaker_support import aws_error, create_once
from sluice.endpoints.scaling import BACKLOG, COPIES, component_resource, variant_resource

if TYPE_CHECKING:
    from sluice.endpoints.control import EndpointState
    from sluice.endpoints.sagemaker import SageMakerEndpoints


def settle(endpoints: SageMakerEndpoints, state: EndpointState) -> EndpointState:
    """Autoscaling asked for at deploy and, on an endpoint of components, the components
    themselves; the endpoint as it is then."""
    if state.status != "InService":
        return state
    if state.mode == "components":
        return _settle_components(endpoints, state)
    if state.mode == "async" and state.pending_capacity is not None:
        capacity = state.pending_capacity
        try:
            for variant in state.variants:
                endpoints.scaling.register(
                    BACKLOG,
                    variant_resource(state.name, variant.name),
                    state.name,
                    low=capacity.low,
                    high=capacity.high,
                    target=capacity.target,
                    description=f"Requests wait at {state.name} and no instance runs",
                )
        except Exception as exc:
            raise aws_error(exc, "register autoscaling") from None
        endpoints.forget_pending_autoscaling(state)
        return endpoints.describe(state.name) or state
    if state.pending_autoscaling is None:
        return state
    for variant in state.variants:
        endpoints.register_autoscaling(state.name, variant.name, state.pending_autoscaling)
    endpoints.forget_pending_autoscaling(state)
    return endpoints.describe(state.name) or state


def _settle_components(endpoints: SageMakerEndpoints, state: EndpointState) -> EndpointState:
    """Create the components not made yet; register each InService component's copies for
    autoscaling; once all are, nothing waits any more."""
    capacity = state.pending_capacity
    if capacity is None:
        return state
    changed = False
    try:
        for component in state.components:
            if component.status == "Pending":
                # one made by another look meanwhile is left as it is
                create_once(endpoints.sagemaker.create_inference_component, **component_request(state, component.name))
                changed = True
            elif component.status == "InService" and component.autoscaling is None:
                endpoints.scaling.register(
                    COPIES,
                    component_resource(component.name),
                    component.name,
                    low=capacity.low,
                    high=capacity.high,
                    target=capacity.target,
                    description=f"A request found no copy of {component.name}",
                )
                changed = True
    except Exception as exc:
        raise aws_error(exc, "create the inference components and their autoscaling") from None
    if changed:
        state = endpoints.describe(state.name) or state
    if state.components and all(c.status == "InService" and c.autoscaling is not None for c in state.components):
        endpoints.forget_pending_autoscaling(state)
        state = endpoints.describe(state.name) or state
    return state
