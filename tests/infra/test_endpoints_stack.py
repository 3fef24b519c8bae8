"""GPU endpoints from the config file: Triton models, variants, autoscaling, a tight role."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.infra.synth import Synthesized, properties

pytestmark = pytest.mark.usefixtures("cdk_runtime")  # constructs of its own: on the CDK's worker (tests/conftest.py)


def test_no_endpoints_configured_means_no_resources(default_app: Synthesized) -> None:
    assert default_app.json("endpoints").get("Resources", {}) == {}


def test_each_variant_is_a_triton_model_served_by_one_endpoint(full_app: Synthesized) -> None:
    from aws_cdk.assertions import Match

    template = full_app.template("endpoints")
    models = [
        m
        for m in properties(template, "AWS::SageMaker::Model")
        if m["ExecutionRoleArn"]["Fn::GetAtt"][0].startswith("Endpointresnet")
    ]
    assert len(models) == 2
    for model in models:
        container = model["PrimaryContainer"]
        assert container["Environment"]["SAGEMAKER_TRITON_DEFAULT_MODEL_NAME"] == "resnet"
        parts = container["Image"]["Fn::Join"][1]
        assert parts[0] == {
            "Fn::FindInMap": ["TritonImageAccounts2509", {"Ref": "AWS::Region"}, "account"]
        }
        assert parts[-1] == "/sagemaker-tritonserver:25.09-py3"
        assert container["ModelDataUrl"]["Fn::Join"][1][-1].endswith("/model.tar.gz")
    assert template.to_json()["Mappings"]["TritonImageAccounts2509"]["us-east-1"] == {
        "account": "763104351884"
    }
    template.has_resource_properties(
        "AWS::SageMaker::EndpointConfig",
        {
            "ProductionVariants": [
                Match.object_like(
                    {
                        "VariantName": "primary",
                        "InstanceType": "ml.g5.xlarge",
                        "InitialInstanceCount": 1,
                        "InitialVariantWeight": 0.9,
                    }
                ),
                Match.object_like(
                    {
                        "VariantName": "canary",
                        "InstanceType": "ml.g6.xlarge",
                        "InitialInstanceCount": 1,
                        "InitialVariantWeight": 0.1,
                    }
                ),
            ]
        },
    )
    template.has_resource_properties("AWS::SageMaker::Endpoint", {"EndpointName": "sluice-resnet"})


def test_models_wait_for_the_role_and_its_policy(full_app: Synthesized) -> None:
    template = full_app.template("endpoints")
    for model_id, model in template.find_resources("AWS::SageMaker::Model").items():
        endpoint = model_id.split("Model")[0]  # Endpointresnet…, Endpointsegmenter…
        (policy_id,) = [
            p for p in template.find_resources("AWS::IAM::Policy") if p.startswith(endpoint)
        ]
        assert policy_id in model["DependsOn"]


def test_variants_scale_on_invocations_per_instance(full_app: Synthesized) -> None:
    from aws_cdk.assertions import Match

    template = full_app.template("endpoints")
    template.has_resource_properties(
        "AWS::ApplicationAutoScaling::ScalableTarget",
        {
            "ResourceId": "endpoint/sluice-resnet/variant/primary",
            "MinCapacity": 1,
            "MaxCapacity": 3,
            "ScalableDimension": "sagemaker:variant:DesiredInstanceCount",
            "ServiceNamespace": "sagemaker",
        },
    )
    template.has_resource_properties(
        "AWS::ApplicationAutoScaling::ScalingPolicy",
        {
            "PolicyType": "TargetTrackingScaling",
            "TargetTrackingScalingPolicyConfiguration": Match.object_like(
                {
                    "PredefinedMetricSpecification": {
                        "PredefinedMetricType": "SageMakerVariantInvocationsPerInstance"
                    },
                    "TargetValue": 250,
                }
            ),
        },
    )
    for target_id, target in template.find_resources(
        "AWS::ApplicationAutoScaling::ScalableTarget"
    ).items():
        endpoint = target_id.split("Scaling")[0]
        assert any(
            # the endpoint, or the inference component that waits for it
            d.startswith(endpoint) and ("Endpoint" in d[len(endpoint) :] or "Component" in d[len(endpoint) :])
            for d in target["DependsOn"]
        )


def test_execution_role_reads_only_the_model_archives_and_pulls_only_triton(
    full_app: Synthesized,
) -> None:
    template = full_app.template("endpoints")
    (policy,) = [
        p["Properties"]
        for i, p in template.find_resources("AWS::IAM::Policy").items()
        if i.startswith("Endpointresnet")
    ]
    statements = {
        tuple(sorted(s["Action"])) if isinstance(s["Action"], list) else (s["Action"],): s
        for s in policy["PolicyDocument"]["Statement"]
    }
    reads = statements[("s3:GetObject",)]["Resource"]
    assert [r["Fn::Join"][1][-1] for r in reads] == [
        "/triton/resnet/1/model.tar.gz",
        "/triton/resnet/2/model.tar.gz",
    ]
    pull = statements[
        ("ecr:BatchCheckLayerAvailability", "ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer")
    ]
    assert pull["Resource"]["Fn::Join"][1][-1] == ":repository/sagemaker-tritonserver"


@pytest.mark.parametrize(
    ("instance_type", "expected"),
    [
        ("ml.g5.xlarge", "gpu"),
        ("ml.p4d.24xlarge", "gpu"),
        ("ml.c6i.2xlarge", "cpu"),
        ("ml.m5.large", "cpu"),
    ],
)
def test_processor_follows_the_sdk_rule(instance_type: str, expected: str) -> None:
    from infra.constructs.triton_image import processor

    assert processor(instance_type) == expected


def test_image_in_a_known_region_is_a_literal_uri() -> None:
    from aws_cdk import App, Environment, Stack
    from infra.constructs.triton_image import image_tag, triton_image

    stack = Stack(App(), "Images", env=Environment(account="111111111111", region="eu-west-1"))
    uri, repository = triton_image(stack, version="25.09", instance_type="ml.g5.xlarge")
    assert uri == "763104351884.dkr.ecr.eu-west-1.amazonaws.com/sagemaker-tritonserver:25.09-py3"
    assert image_tag(version="25.09", instance_type="ml.c6i.xlarge") == "25.09-py3-cpu"
    assert repository.endswith(":ecr:eu-west-1:763104351884:repository/sagemaker-tritonserver")


def test_unknown_versions_and_regions_are_refused_at_synth() -> None:
    from aws_cdk import App, Environment, Stack
    from infra.constructs.triton_image import load_registry, triton_image

    stack = Stack(App(), "Images", env=Environment(account="111111111111", region="eu-west-1"))
    with pytest.raises(ValueError, match="unknown SageMaker Triton version"):
        triton_image(stack, version="19.01", instance_type="ml.g5.xlarge")
    nowhere = Stack(
        App(), "Nowhere", env=Environment(account="111111111111", region="xx-nowhere-1")
    )
    with pytest.raises(ValueError, match="not offered in xx-nowhere-1"):
        triton_image(nowhere, version="25.09", instance_type="ml.g5.xlarge")
    assert "25.09" in load_registry()["versions"]


# asynchronous endpoints ---------------------------------------------------------------------
def _segmenter(template: Any, kind: str) -> list[tuple[str, dict[str, Any]]]:
    return [
        (i, r)
        for i, r in template.find_resources(kind).items()
        if i.startswith("Endpointsegmenter")
    ]


def test_an_async_endpoint_writes_under_the_tenants_results_and_tells_two_topics(
    full_app: Synthesized,
) -> None:
    template = full_app.template("endpoints")
    ((_, config),) = _segmenter(template, "AWS::SageMaker::EndpointConfig")
    found = config["Properties"]["AsyncInferenceConfig"]
    assert found["ClientConfig"] == {"MaxConcurrentInvocationsPerInstance": 2}
    output = found["OutputConfig"]
    for key, folder in (("S3OutputPath", "sagemaker"), ("S3FailurePath", "sagemaker-errors")):
        assert output[key]["Fn::Join"][1][-1] == f"/artifacts/results/tenants/acme/{folder}"
    topics = _segmenter(template, "AWS::SNS::Topic")
    assert len(topics) == 2
    for _, topic in topics:
        assert topic["Properties"]["KmsMasterKeyId"]  # encrypted
    notify = output["NotificationConfig"]
    assert {notify["SuccessTopic"]["Ref"], notify["ErrorTopic"]["Ref"]} == {i for i, _ in topics}
    ((_, policy),) = _segmenter(template, "AWS::IAM::Policy")
    statements = policy["Properties"]["PolicyDocument"]["Statement"]
    (objects,) = [s for s in statements if s["Action"] == ["s3:GetObject", "s3:PutObject"]]
    assert objects["Resource"]["Fn::Join"][1][-1] == "/artifacts/results/tenants/acme/*"
    # the tenant's uploaded bodies are InputLocations as they lie: read, never written
    reads = [r for s in statements if s["Action"] == "s3:GetObject" for r in (s["Resource"] if isinstance(s["Resource"], list) else [s["Resource"]])]
    assert [r["Fn::Join"][1][-1] for r in reads if "uploads" in json.dumps(r)] == ["/artifacts/uploads/tenants/acme/*"]
    (publish,) = [s for s in statements if s["Action"] == "sns:Publish"]
    assert len(publish["Resource"]) == 2


def test_an_async_endpoint_scales_on_its_backlog_down_to_zero_and_back(
    full_app: Synthesized,
) -> None:
    template = full_app.template("endpoints")
    ((target_id, target),) = _segmenter(template, "AWS::ApplicationAutoScaling::ScalableTarget")
    assert (target["Properties"]["MinCapacity"], target["Properties"]["MaxCapacity"]) == (0, 2)
    policies = {
        r["Properties"]["PolicyType"]: r["Properties"]
        for _, r in _segmenter(template, "AWS::ApplicationAutoScaling::ScalingPolicy")
    }
    tracking = policies["TargetTrackingScaling"]["TargetTrackingScalingPolicyConfiguration"]
    assert tracking["CustomizedMetricSpecification"] == {
        "Dimensions": [{"Name": "EndpointName", "Value": "sluice-segmenter"}],
        "MetricName": "ApproximateBacklogSizePerInstance",
        "Namespace": "AWS/SageMaker",
        "Statistic": "Average",
    }
    assert tracking["TargetValue"] == 5
    step = policies["StepScaling"]["StepScalingPolicyConfiguration"]
    assert step["AdjustmentType"] == "ChangeInCapacity"
    assert step["StepAdjustments"] == [{"MetricIntervalLowerBound": 0, "ScalingAdjustment": 1}]
    ((_, alarm),) = _segmenter(template, "AWS::CloudWatch::Alarm")
    props = alarm["Properties"]
    assert (props["MetricName"], props["Threshold"], props["ComparisonOperator"]) == (
        "HasBacklogWithoutCapacity",
        1,
        "GreaterThanOrEqualToThreshold",
    )
    assert props["AlarmActions"] == [
        {
            "Ref": next(
                i
                for i, r in _segmenter(template, "AWS::ApplicationAutoScaling::ScalingPolicy")
                if r["Properties"]["PolicyType"] == "StepScaling"
            )
        }
    ]
    assert target_id


def test_zero_instances_need_an_async_endpoint_and_async_one_variant() -> None:
    from infra.config import EndpointConfig
    from pydantic import ValidationError

    variant = {
        "model_data_key": "a/model.tar.gz",
        "model_name": "a",
        "instance_type": "ml.g5.xlarge",
    }
    with pytest.raises(ValidationError, match="min_instances 0 needs an asynchronous endpoint"):
        EndpointConfig.model_validate({"name": "a", "variants": [{**variant, "min_instances": 0}]})
    with pytest.raises(ValidationError, match="exactly one variant"):
        EndpointConfig.model_validate(
            {
                "name": "a",
                "variants": [variant, {**variant, "name": "b"}],
                "asynchronous": {"tenant": "acme"},
            }
        )


# inference components ---------------------------------------------------------------------
def _ranker(template: Any, kind: str) -> list[tuple[str, dict[str, Any]]]:
    return [(i, r) for i, r in template.find_resources(kind).items() if i.startswith("Endpointranker")]


def test_an_endpoint_of_inference_components_scales_copies_and_instances_to_zero(
    full_app: Synthesized,
) -> None:
    template = full_app.template("endpoints")
    ((_, config),) = _ranker(template, "AWS::SageMaker::EndpointConfig")
    (variant,) = config["Properties"]["ProductionVariants"]
    assert "ModelName" not in variant  # the model comes in as a component
    assert variant["ManagedInstanceScaling"] == {"Status": "ENABLED", "MinInstanceCount": 0, "MaxInstanceCount": 2}
    assert variant["RoutingConfig"] == {"RoutingStrategy": "LEAST_OUTSTANDING_REQUESTS"}
    assert config["Properties"]["ExecutionRoleArn"]["Fn::GetAtt"][0].startswith("EndpointrankerExecutionRole")
    ((_, component),) = _ranker(template, "AWS::SageMaker::InferenceComponent")
    props = component["Properties"]
    assert props["InferenceComponentName"] == "sluice-ranker-primary"
    assert props["EndpointName"] == "sluice-ranker" and props["VariantName"] == "primary"
    assert props["Specification"]["ComputeResourceRequirements"] == {
        "MinMemoryRequiredInMb": 8192,
        "NumberOfAcceleratorDevicesRequired": 1,
    }
    assert props["RuntimeConfig"] == {"CopyCount": 1}
    assert any(d.startswith("EndpointrankerEndpoint") for d in component["DependsOn"])
    ((_, target),) = _ranker(template, "AWS::ApplicationAutoScaling::ScalableTarget")
    assert target["Properties"]["ResourceId"] == "inference-component/sluice-ranker-primary"
    assert target["Properties"]["ScalableDimension"] == "sagemaker:inference-component:DesiredCopyCount"
    assert (target["Properties"]["MinCapacity"], target["Properties"]["MaxCapacity"]) == (0, 4)
    policies = {r["Properties"]["PolicyType"]: r for i, r in _ranker(template, "AWS::ApplicationAutoScaling::ScalingPolicy")}
    tracking = policies["TargetTrackingScaling"]["Properties"]["TargetTrackingScalingPolicyConfiguration"]
    assert tracking["PredefinedMetricSpecification"] == {
        "PredefinedMetricType": "SageMakerInferenceComponentInvocationsPerCopy"
    }
    ((_, alarm),) = _ranker(template, "AWS::CloudWatch::Alarm")
    assert alarm["Properties"]["MetricName"] == "NoCapacityInvocationFailures"
    assert alarm["Properties"]["Dimensions"] == [{"Name": "InferenceComponentName", "Value": "sluice-ranker-primary"}]
    step = policies["StepScaling"]["Properties"]["StepScalingPolicyConfiguration"]
    assert step["StepAdjustments"] == [{"MetricIntervalLowerBound": 0, "ScalingAdjustment": 1}]


def test_inference_components_take_one_variant_and_no_async() -> None:
    from infra.config import EndpointConfig
    from pydantic import ValidationError

    variant = {"model_data_key": "a/model.tar.gz", "model_name": "a", "instance_type": "ml.g5.xlarge"}
    with pytest.raises(ValidationError, match="not both"):
        EndpointConfig.model_validate(
            {"name": "a", "variants": [variant], "asynchronous": {"tenant": "acme"}, "inference_components": {}}
        )
    with pytest.raises(ValidationError, match="copies"):
        EndpointConfig.model_validate(
            {"name": "a", "variants": [variant], "inference_components": {"copies": 5, "max_copies": 2}}
        )


@pytest.mark.parametrize(
    ("prefix", "kind", "owner"),
    [("Endpointsegmenter", "BACKLOG", "sluice-segmenter"), ("Endpointranker", "COPIES", "sluice-ranker-primary")],
)
def test_the_config_declares_the_scaling_the_cli_sends(
    full_app: Synthesized, prefix: str, kind: str, owner: str
) -> None:
    """The construct and `sluice endpoints deploy` build their policies and alarms from one
    module, `sluice.endpoints.scaling`: the synthesized ones equal its requests."""
    from sluice.endpoints import scaling

    scalable = getattr(scaling, kind)
    template = full_app.template("endpoints")

    def mine(kind_: str) -> list[dict[str, Any]]:
        return [r["Properties"] for i, r in template.find_resources(kind_).items() if i.startswith(prefix)]

    (alarm,) = mine("AWS::CloudWatch::Alarm")
    expected = scalable.from_zero.alarm_request(owner, "arn", "")
    for key in ("MetricName", "Namespace", "Statistic", "Dimensions", "Period", "EvaluationPeriods",
                "DatapointsToAlarm", "Threshold", "ComparisonOperator", "TreatMissingData"):  # fmt: skip
        assert alarm[key] == expected[key], key
    policies = {p["PolicyType"]: p for p in mine("AWS::ApplicationAutoScaling::ScalingPolicy")}
    step = policies["StepScaling"]["StepScalingPolicyConfiguration"]
    assert step == scalable.from_zero.step_configuration()
    tracking = policies["TargetTrackingScaling"]["TargetTrackingScalingPolicyConfiguration"]
    sent = scalable.tracking.configuration(tracking["TargetValue"], owner)
    assert tracking == sent
    (target,) = mine("AWS::ApplicationAutoScaling::ScalableTarget")
    assert target["ScalableDimension"] == scalable.dimension


def test_each_endpoint_s_log_group_is_made_with_the_retention_of_every_other(full_app: Synthesized) -> None:
    """SageMaker creates `/aws/sagemaker/Endpoints/<name>` as the endpoint starts, keeping its
    logs forever; made by the stack first, it keeps them `log_retention_days`."""
    template = full_app.template("endpoints")
    endpoints = {e["Properties"]["EndpointName"] for e in template.find_resources("AWS::SageMaker::Endpoint").values()}
    groups = {
        g["Properties"]["LogGroupName"]: g["Properties"].get("RetentionInDays")
        for g in template.find_resources("AWS::Logs::LogGroup").values()
    }
    assert endpoints and {f"/aws/sagemaker/Endpoints/{name}" for name in endpoints} <= set(groups)
    assert {groups[f"/aws/sagemaker/Endpoints/{name}"] for name in endpoints} == {30}
