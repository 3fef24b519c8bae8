"""Undeploying a SageMaker endpoint: everything sluice made for it, in the order AWS allows,
each thing skipped when it is already gone.

Only what is this endpoint's own is deleted. Another tenant's endpoint name can begin with
this one's (`sluice-acme-x-<digest>` is a prefix of tenant `acme-x`'s deployment
`<digest>-y`), so a name that merely starts with the endpoint's proves nothing: a config or
model is ours when its name has exactly the shape sluice gives this endpoint's configs and
models and its `sluice:tenant` and `sluice:deployment` tags name this endpoint.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sluice.endpoints.names import endpoint_name, shaped_for
from sluice.endpoints.sagemaker_support import Tag, aws_error, error_code, is_missing, tags_of
from sluice.endpoints.scaling import (
    BACKLOG,
    COPIES,
    COPY_DIMENSION,
    VARIANT_DIMENSION,
    component_resource,
    variant_resource,
)

if TYPE_CHECKING:
    from collections.abc import Iterator

    from sluice.endpoints.control import EndpointState
    from sluice.endpoints.sagemaker import SageMakerEndpoints


def undeploy(endpoints: SageMakerEndpoints, name: str, state: EndpointState | None) -> dict[str, Any]:
    """Autoscaling (policies, then targets, then the scale-from-zero alarms), the inference
    components, the endpoint, its configs, its models and the topics sluice made for it:
    in that order, each skipped when already gone. `endpoints`' clients are built where they
    are first used, as any failure in sluice's words."""
    deleted: dict[str, Any] = {
        "scaling_policies": [],
        "scalable_targets": [],
        "alarms": [],
        "inference_components": [],
        "endpoint": None,
        "endpoint_configs": [],
        "models": [],
        "topics": [],
    }
    mode = state.mode if state else "realtime"
    try:
        variants = [variant_resource(name, v.name) for v in state.variants] if state and mode != "components" else []
        components = [c.name for c in state.components if c.status != "Pending"] if state else []
        for dimension, resources in ((VARIANT_DIMENSION, variants), (COPY_DIMENSION, [component_resource(c) for c in components])):
            policies, targets = endpoints.scaling.remove(dimension, resources)
            deleted["scaling_policies"] += policies
            deleted["scalable_targets"] += targets
        if state is not None and mode != "realtime":
            deleted["alarms"] = endpoints.scaling.remove_alarms(_alarms(name, state))
        for component in components:
            if _quietly(endpoints.sagemaker.delete_inference_component, InferenceComponentName=component):
                deleted["inference_components"].append(component)
        if state is not None and state.status != "Deleting":
            _quietly(endpoints.sagemaker.delete_endpoint, EndpointName=name)
            deleted["endpoint"] = name
        configs = {state.config_name} if state else set()
        configs |= set(_owned(endpoints.sagemaker, name, "list_endpoint_configs", "EndpointConfigs", "EndpointConfig", configs))
        for config in sorted(configs):
            if _quietly(endpoints.sagemaker.delete_endpoint_config, EndpointConfigName=config):
                deleted["endpoint_configs"].append(config)
        models = {v.model_name for v in state.variants if v.model_name} if state else set()
        models |= {c.model_name for c in state.components if c.model_name} if state else set()
        models |= set(_owned(endpoints.sagemaker, name, "list_models", "Models", "Model", models))
        for model in sorted(models):
            if _quietly(endpoints.sagemaker.delete_model, ModelName=model):
                deleted["models"].append(model)
        for arn in state.topics_made if state else ():
            endpoints.sns.delete_topic(TopicArn=arn)  # idempotent: a missing topic is no error
            deleted["topics"].append(arn)
    except Exception as exc:
        raise aws_error(exc, "delete the endpoint") from None
    return deleted


def _alarms(endpoint: str, state: EndpointState) -> list[str]:
    """The exact names of the scale-from-zero alarms sluice made for the endpoint (async) or
    for its components: never every alarm under the endpoint's name, which may be another
    tenant's or an operator's."""
    if state.mode == "async" and BACKLOG.from_zero is not None:
        return [BACKLOG.from_zero.alarm_name(endpoint)]
    if state.mode == "components" and COPIES.from_zero is not None:
        return [COPIES.from_zero.alarm_name(c.name) for c in state.components]
    return []


def _owned(sagemaker: Any, endpoint: str, operation: str, key: str, kind: str, known: set[str]) -> Iterator[str]:
    """The endpoint's configs (`kind` "EndpointConfig") or models ("Model") that its own
    description no longer names (left by an earlier deploy or a half-finished one): of the
    names SageMaker lists, those shaped as sluice names this endpoint's and tagged as made
    for this tenant's deployment. `known`: names already taken from the description."""
    token = None
    while True:
        page = getattr(sagemaker, operation)(NameContains=endpoint, **({"NextToken": token} if token else {}))
        for item in page.get(key, []):
            name = item[f"{kind}Name"]
            if name in known or not shaped_for(endpoint, name, model=kind == "Model"):
                continue
            if _made_for(sagemaker, item.get(f"{kind}Arn", ""), endpoint):
                yield name
        token = page.get("NextToken")
        if not token:
            return


def _made_for(sagemaker: Any, arn: str, endpoint: str) -> bool:
    """Whether the resource's tenant and deployment tags are those the endpoint is named for
    (sluice tags every model and config it creates with both)."""
    from botocore.exceptions import ClientError

    if not arn:
        return False
    try:
        tags = tags_of(sagemaker, arn)
    except ClientError as exc:
        if is_missing(exc):  # deleted meanwhile: nothing to delete
            return False
        raise
    tenant, deployment = tags.get(Tag.TENANT), tags.get(Tag.DEPLOYMENT)
    return tenant is not None and deployment is not None and endpoint_name(tenant, deployment) == endpoint


def _quietly(call: Any, **params: Any) -> bool:
    """Make a delete call; False when the thing was already gone."""
    from botocore.exceptions import ClientError

    try:
        call(**params)
    except ClientError as exc:
        code, message = error_code(exc)
        if is_missing(exc) or code == "MissingModel" or "could not find" in message.lower():
            return False
        raise
    return True
