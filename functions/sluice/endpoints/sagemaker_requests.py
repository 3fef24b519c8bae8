"""What sluice asks SageMaker to make, as each call's parameters: the Model of a variant's
version, the endpoint config in the endpoint's mode (or the current one again plus a variant),
an inference component, the tags that carry sluice's facts on the endpoint, and the policy of
the SNS topics sluice makes. Pure: `sluice.endpoints.sagemaker` makes the calls."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from sluice.endpoints.repository_check import DEFAULT_MODEL_ENV
from sluice.endpoints.sagemaker_support import (
    COMPONENT_VARIANT,
    Tag,
    compute_tag,
)
from sluice.endpoints.scaling import ROUTING_STRATEGY

if TYPE_CHECKING:
    from sluice.endpoints.control import EndpointState
    from sluice.endpoints.sagemaker_support import EndpointSpec, VariantSpec


def endpoint_tags(spec: EndpointSpec) -> list[dict[str, str]]:
    """sluice's facts on the endpoint: who it is for, what each variant serves, and what
    waits for InService (autoscaling; for components, the components themselves)."""
    tags = spec.tags() + [v.tag() for v in spec.variants]
    pending = spec.autoscaling.to_tag() if spec.autoscaling is not None else None
    if spec.asynchronous is not None:
        pending = spec.asynchronous.scaling.to_tag()
        if spec.asynchronous.create_topics:
            tags.append({"Key": Tag.TOPICS, "Value": "created"})
    if spec.components is not None:
        pending = spec.components.scaling.to_tag()
        tags.append({"Key": Tag.COMPUTE, "Value": compute_tag(spec.components)})
        for v in spec.variants:
            tags.append({"Key": Tag.COMPONENT + v.name, "Value": f"{v.model_name} {spec.components.copies[v.name]}"})
        if spec.components.fallback:
            tags.append({"Key": Tag.FALLBACK, "Value": spec.components.fallback})
    if pending is not None:
        tags.append({"Key": Tag.AUTOSCALING, "Value": pending})
    return tags


def model_request(spec: EndpointSpec, variant: VariantSpec) -> dict[str, Any]:
    """CreateModel's parameters for the version a variant serves."""
    return {
        "ModelName": variant.model_name,
        "ExecutionRoleArn": spec.role_arn,
        "PrimaryContainer": {
            "Image": variant.image,
            "Mode": "SingleModel",
            "ModelDataUrl": variant.model_data_url,
            "Environment": {DEFAULT_MODEL_ENV: variant.triton_model},
        },
        # The container needs no internet (model.tar.gz and the image are fetched for it).
        "EnableNetworkIsolation": True,
        "Tags": [*spec.tags(), {"Key": "sluice:model", "Value": f"{variant.model}:{variant.version}"}],
    }


def config_request(spec: EndpointSpec, topics: tuple[str, str] | None = None) -> dict[str, Any]:
    """CreateEndpointConfig's parameters in the endpoint's mode; `topics`: the SNS topics
    sluice made for an asynchronous endpoint (success, error)."""
    request: dict[str, Any] = {"EndpointConfigName": spec.config_name, "Tags": spec.tags()}
    if spec.components is not None:
        # The instances are SageMaker's to manage; the models come in as components, which
        # run as the role the config names.
        request["ProductionVariants"] = [
            {
                "VariantName": COMPONENT_VARIANT,
                "InstanceType": spec.instance_type,
                "InitialInstanceCount": spec.instance_count,
                "ManagedInstanceScaling": {
                    "Status": "ENABLED",
                    "MinInstanceCount": spec.components.min_instances,
                    "MaxInstanceCount": spec.components.max_instances,
                },
                "RoutingConfig": {"RoutingStrategy": ROUTING_STRATEGY},
            }
        ]
        request["ExecutionRoleArn"] = spec.role_arn
        return request
    request["ProductionVariants"] = [
        {
            "VariantName": v.name,
            "ModelName": v.model_name,
            "InstanceType": spec.instance_type,
            "InitialInstanceCount": spec.instance_count,
            "InitialVariantWeight": v.weight,
        }
        for v in spec.variants
    ]
    asynchronous = spec.asynchronous
    if asynchronous is not None:
        output: dict[str, Any] = {"S3OutputPath": asynchronous.output_path, "S3FailurePath": asynchronous.failure_path}
        success, error = topics or (asynchronous.success_topic, asynchronous.error_topic)
        notify = {k: v for k, v in (("SuccessTopic", success), ("ErrorTopic", error)) if v}
        if notify:
            output["NotificationConfig"] = notify
        request["AsyncInferenceConfig"] = {
            "ClientConfig": {"MaxConcurrentInvocationsPerInstance": asynchronous.max_concurrent_invocations},
            "OutputConfig": output,
        }
    return request


def extended_config_request(
    spec: EndpointSpec, current: dict[str, Any], state: EndpointState, service_model: Any
) -> dict[str, Any]:
    """`current` (DescribeEndpointConfig's answer) again under a new name, each variant at its
    live weight and count, plus the variant of `spec`. Only what CreateEndpointConfig takes is
    copied (botocore's `service_model` says which), so settings sluice does not make itself
    survive."""
    takes = set(service_model.operation_model("CreateEndpointConfig").input_shape.members) - {
        "EndpointConfigName", "ProductionVariants", "Tags"
    }
    variant_takes = set(service_model.shape_for("ProductionVariant").members)
    variants = []
    for planned in current.get("ProductionVariants", []):
        copied = {k: v for k, v in planned.items() if k in variant_takes and v not in (None, {}, [])}
        live = state.variant(planned["VariantName"])
        if live is not None and live.desired_weight is not None:
            copied["InitialVariantWeight"] = live.desired_weight
        if live is not None and live.desired_instances is not None and "InitialInstanceCount" in copied:
            copied["InitialInstanceCount"] = live.desired_instances
        variants.append(copied)
    [new] = spec.variants
    variants.append(
        {
            "VariantName": new.name,
            "ModelName": new.model_name,
            "InstanceType": spec.instance_type,
            "InitialInstanceCount": spec.instance_count,
            "InitialVariantWeight": new.weight,
        }
    )
    return {
        "EndpointConfigName": spec.config_name,
        "ProductionVariants": variants,
        "Tags": spec.tags(),
        **{k: v for k, v in current.items() if k in takes and v not in (None, {}, [])},
    }


def component_request(state: EndpointState, name: str) -> dict[str, Any]:
    """CreateInferenceComponent's parameters for one of the endpoint's planned components."""
    component = state.component(name)
    assert component is not None
    return {
        "InferenceComponentName": component.name,
        "EndpointName": state.name,
        "VariantName": COMPONENT_VARIANT,
        "Specification": {"ModelName": component.model_name, "ComputeResourceRequirements": dict(component.compute)},
        "RuntimeConfig": {"CopyCount": component.desired_copies or 0},
        "Tags": [
            {"Key": Tag.TENANT, "Value": state.tenant},
            {"Key": Tag.DEPLOYMENT, "Value": state.deployment},
            {"Key": "sluice:model", "Value": f"{component.model}:{component.version}"},
        ],
    }


def tls_only(topic_arn: str) -> str:
    """The policy of a topic sluice makes: no publisher without TLS."""
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Sid": "PublishOverTlsOnly",
                    "Effect": "Deny",
                    "Principal": "*",
                    "Action": "sns:Publish",
                    "Resource": topic_arn,
                    "Condition": {"Bool": {"aws:SecureTransport": "false"}},
                }
            ],
        }
    )
