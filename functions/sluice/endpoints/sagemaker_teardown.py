"""Undeploying a SageMaker endpoint: everything sluice made for it, in the order AWS allows,
each thing skipped when it is already gone."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sluice.endpoints.sagemaker_support import aws_error, error_code, is_missing
from sluice.endpoints.scaling import (
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
        if mode != "realtime":
            deleted["alarms"] = endpoints.scaling.remove_alarms(name)
        for component in components:
            if _quietly(endpoints.sagemaker.delete_inference_component, InferenceComponentName=component):
                deleted["inference_components"].append(component)
        if state is not None and state.status != "Deleting":
            _quietly(endpoints.sagemaker.delete_endpoint, EndpointName=name)
            deleted["endpoint"] = name
        configs = {state.config_name} if state else set()
        configs |= set(_owned(endpoints.sagemaker, name, "list_endpoint_configs", "EndpointConfigs", "EndpointConfigName"))
        for config in sorted(configs):
            if _quietly(endpoints.sagemaker.delete_endpoint_config, EndpointConfigName=config):
                deleted["endpoint_configs"].append(config)
        models = {v.model_name for v in state.variants if v.model_name} if state else set()
        models |= {c.model_name for c in state.components if c.model_name} if state else set()
        models |= set(_owned(endpoints.sagemaker, name, "list_models", "Models", "ModelName"))
        for model in sorted(models):
            if _quietly(endpoints.sagemaker.delete_model, ModelName=model):
                deleted["models"].append(model)
        for arn in state.topics_made if state else ():
            endpoints.sns.delete_topic(TopicArn=arn)  # idempotent: a missing topic is no error
            deleted["topics"].append(arn)
    except Exception as exc:
        raise aws_error(exc, "delete the endpoint") from None
    return deleted


def _owned(sagemaker: Any, endpoint: str, operation: str, key: str, field_name: str) -> Iterator[str]:
    """Names under this endpoint's prefix (the digest in the prefix makes it its own)."""
    prefix = endpoint + "-"
    token = None
    while True:
        page = getattr(sagemaker, operation)(NameContains=endpoint, **({"NextToken": token} if token else {}))
        for item in page.get(key, []):
            if item[field_name].startswith(prefix):
                yield item[field_name]
        token = page.get("NextToken")
        if not token:
            return


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
