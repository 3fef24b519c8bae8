"""A rollout adds a variant for its candidate (`SageMakerEndpoints.add_variant`): the
candidate's model, a new endpoint config that is the current one plus that variant at weight
0, and `UpdateEndpoint` with `RetainAllVariantProperties`, so the variants already there keep
the weights and instance counts they have now (set since by
`UpdateEndpointWeightsAndCapacities` or autoscaling) rather than the config's initial ones,
and only the new variant takes its values from the config. The old config stays until
undeploy removes it with the others."""

from __future__ import annotations

from contextlib import suppress
from typing import TYPE_CHECKING

from sluice.domain.errors import Unavailable
from sluice.endpoints.control import DeploySpec, VariantState
from sluice.endpoints.names import config_name, digest
from sluice.endpoints.sagemaker_requests import extended_config_request, model_request
from sluice.endpoints.sagemaker_support import EndpointSpec, aws_error, create_once

if TYPE_CHECKING:
    from sluice.endpoints.control import DeployTarget, EndpointState
    from sluice.endpoints.sagemaker import SageMakerEndpoints


def add_variant(endpoints: SageMakerEndpoints, state: EndpointState, target: DeployTarget, *, like: VariantState) -> VariantState:
    """The candidate's model (the image and role of `like`'s), the current config plus a
    variant for it, and UpdateEndpoint retaining every variant property already there."""
    from sluice.endpoints.image_uris import check_instance_type

    try:
        current = endpoints.sagemaker.describe_endpoint_config(EndpointConfigName=state.config_name)
        container = endpoints.sagemaker.describe_model(ModelName=like.model_name)
    except Exception as exc:
        raise aws_error(exc, "read the endpoint's config") from None
    image = (container.get("PrimaryContainer") or {}).get("Image") or ""
    role = container.get("ExecutionRoleArn") or endpoints.role_arn
    if not image or not role:
        raise Unavailable(f"variant {like.name}'s model names no image or role to run a candidate as", field="endpoint")
    count = like.desired_instances or 1
    deploy = DeploySpec(
        endpoint=state.name,
        tenant=state.tenant,
        deployment=state.deployment,
        instance_type=like.instance_type,
        gpu=check_instance_type(like.instance_type) == "gpu",
        instance_count=count,
        targets=(target,),
    )
    [variant] = endpoints.package(deploy, image, role)
    spec = EndpointSpec(
        name=state.name,
        config_name=config_name(state.name, digest(state.config_name, variant.name, variant.model_name)),
        tenant=state.tenant,
        deployment=state.deployment,
        instance_type=like.instance_type,
        instance_count=count,
        role_arn=role,
        variants=(variant,),
    )
    made_model = made_config = False
    try:
        made_model = create_once(endpoints.sagemaker.create_model, **model_request(spec, variant))
        made_config = create_once(
            endpoints.sagemaker.create_endpoint_config, **extended_config_request(spec, current, state, endpoints.sagemaker.meta.service_model)
        )
        endpoints.sagemaker.add_tags(ResourceArn=state.arn, Tags=[variant.tag()])
        endpoints.sagemaker.update_endpoint(EndpointName=state.name, EndpointConfigName=spec.config_name, RetainAllVariantProperties=True)
    except Exception as exc:
        error = aws_error(exc, "add a variant to the endpoint")
        with suppress(Exception):
            endpoints.sagemaker.delete_tags(ResourceArn=state.arn, TagKeys=[variant.tag()["Key"]])
        if made_config:
            with suppress(Exception):
                endpoints.sagemaker.delete_endpoint_config(EndpointConfigName=spec.config_name)
        if made_model:
            with suppress(Exception):
                endpoints.sagemaker.delete_model(ModelName=variant.model_name)
        raise error from None
    return VariantState(
        name=variant.name,
        label=variant.label,
        model=variant.model,
        version=variant.version,
        max_batch_size=variant.max_batch_size,
        model_name=variant.model_name,
        instance_type=like.instance_type,
        desired_weight=variant.weight,
        current_weight=None,
        desired_instances=count,
        current_instances=None,
    )
