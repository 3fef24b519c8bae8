"""`sluice endpoints deploy --mode components`: each version of a split an inference component
on instances SageMaker manages, copies scaling to zero. moto models neither inference
components nor their scalable dimension, so SageMaker, Application Auto Scaling and CloudWatch
are botocore Stubbers here: every request is checked against the service's real input shape
(and the parameters this test expects), every answer against the real output shape. The
artifact store (S3) is moto.

One endpoint's life, look by look: deploy (models, the endpoint config of managed instances,
the endpoint; status Creating), the endpoint InService (the components are created), the
components InService (their copies registered for autoscaling with the NoCapacity step
policy and alarm; the deployment bound to the components), a prediction naming its component
(and answered in process while the component has no copy), and undeploy in order."""

from __future__ import annotations

import datetime as dt
import io
import json
from types import SimpleNamespace
from typing import Any

import boto3
import pytest
from botocore.response import StreamingBody
from botocore.stub import ANY, Stubber

from sluice.domain import Principal
from sluice.endpoints.names import component_name, endpoint_name
from sluice.runtimes.sagemaker import SageMakerRuntime
from sluice.runtimes.sagemaker_target import EndpointTarget
from sluice.wiring import Container
from tests.integration.aws.conftest import ENDPOINTS_ROLE as ROLE
from tests.integration.aws.conftest import REGION, EndpointsWorld, Recorded, on_sagemaker
from tests.integration.conftest import auth

ACCOUNT = "123456789012"
IMAGE = "763104351884.dkr.ecr.eu-west-1.amazonaws.com/sagemaker-tritonserver:25.09-py3"
ACME = Principal("acme", frozenset({"admin", "predict"}), "test-acme")
SPLIT = {
    "kind": "split",
    "variants": [
        {"name": "blue", "weight": 1.0, "target": {"model": "mlp", "version": 1}},
        {"name": "green", "weight": 0.0, "target": {"model": "mlp", "version": 2}},
    ],
}
ENDPOINT = endpoint_name("acme", "ranker")
BLUE, GREEN = component_name(ENDPOINT, "blue"), component_name(ENDPOINT, "green")
NOW = dt.datetime(2026, 11, 27, tzinfo=dt.UTC)
ARN = f"arn:aws:sagemaker:{REGION}:{ACCOUNT}"
CONFIG = f"{ENDPOINT}-cfg"
COMPUTE = {"MinMemoryRequiredInMb": 8192, "NumberOfCpuCoresRequired": 2.0, "NumberOfAcceleratorDevicesRequired": 1}
NO_CAPACITY = (
    "Inference Component has no capacity to process this request. ApplicationAutoScaling may be in-progress "
    "(if configured) or try to increase the capacity by invoking UpdateInferenceComponentRuntimeConfig API."
)
ROW = {"inputs": [{"name": "x", "shape": [1, 8], "datatype": "FP32", "data": [0.5] * 8}]}


class Account(SimpleNamespace):
    """The three stubbed clients, what was sent to them, and the answers of one look."""

    sagemaker: Stubber
    autoscaling: Stubber
    cloudwatch: Stubber
    sent: dict[str, list[dict[str, Any]]]
    calls: list[str]
    tags: list[dict[str, str]]  # the endpoint's, as CreateEndpoint sent them

    def models(self) -> dict[str, str]:
        """The SageMaker model of each component's variant, from the endpoint's tags."""
        return {t["Key"].rsplit(":", 1)[1]: t["Value"].split(" ")[0] for t in self.tags if t["Key"].startswith("sluice:component:")}

    def look(self, status: str, components: dict[str, str] | None = None, *, registered: bool = False, tags: list[dict[str, str]] | None = None) -> None:
        """Queue the answers to one DescribeEndpoint … DescribeModel read: the endpoint in
        `status`, these components (name: status) live, their copies `registered` or not."""
        sm, live = self.sagemaker, components or {}
        sm.add_response("describe_endpoint", {
            "EndpointName": ENDPOINT, "EndpointArn": f"{ARN}:endpoint/{ENDPOINT}", "EndpointConfigName": CONFIG,
            "EndpointStatus": status, "CreationTime": NOW, "LastModifiedTime": NOW,
            "ProductionVariants": [{"VariantName": "AllTraffic", "CurrentInstanceCount": 1, "DesiredInstanceCount": 1}],
        }, {"EndpointName": ENDPOINT})  # fmt: skip
        sm.add_response("list_tags", {"Tags": self.tags if tags is None else tags}, {"ResourceArn": f"{ARN}:endpoint/{ENDPOINT}"})
        sm.add_response("describe_endpoint_config", {
            "EndpointConfigName": CONFIG, "EndpointConfigArn": f"{ARN}:endpoint-config/{CONFIG}", "CreationTime": NOW,
            "ProductionVariants": [{
                "VariantName": "AllTraffic", "InstanceType": "ml.g5.xlarge", "InitialInstanceCount": 1,
                "ManagedInstanceScaling": {"Status": "ENABLED", "MinInstanceCount": 0, "MaxInstanceCount": 2},
                "RoutingConfig": {"RoutingStrategy": "LEAST_OUTSTANDING_REQUESTS"},
            }],
            "ExecutionRoleArn": ROLE,
        }, {"EndpointConfigName": CONFIG})  # fmt: skip
        sm.add_response("list_inference_components", {"InferenceComponents": [
            {"InferenceComponentName": n, "InferenceComponentArn": f"{ARN}:inference-component/{n}", "EndpointName": ENDPOINT,
             "EndpointArn": f"{ARN}:endpoint/{ENDPOINT}", "VariantName": "AllTraffic", "InferenceComponentStatus": s,
             "CreationTime": NOW, "LastModifiedTime": NOW}
            for n, s in live.items()
        ]}, {"EndpointNameEquals": ENDPOINT})  # fmt: skip
        if live:
            self._scaling(list(live), registered)
        copies = {BLUE: 2, GREEN: 1}
        for name, state in live.items():
            sm.add_response("describe_inference_component", {
                "InferenceComponentName": name, "InferenceComponentArn": f"{ARN}:inference-component/{name}",
                "EndpointName": ENDPOINT, "EndpointArn": f"{ARN}:endpoint/{ENDPOINT}", "VariantName": "AllTraffic",
                "InferenceComponentStatus": state, "CreationTime": NOW, "LastModifiedTime": NOW,
                "Specification": {"ComputeResourceRequirements": COMPUTE},
                "RuntimeConfig": {"DesiredCopyCount": copies[name], "CurrentCopyCount": copies[name] if state == "InService" else 0},
            }, {"InferenceComponentName": name})  # fmt: skip
        for model in (self.models() or {"blue": ANY, "green": ANY}).values():
            sm.add_response("describe_model", {
                "ModelName": "m", "ModelArn": f"{ARN}:model/m", "CreationTime": NOW, "PrimaryContainer": {"Image": IMAGE},
            }, {"ModelName": model})  # fmt: skip

    def _scaling(self, live: list[str], registered: bool) -> None:
        resources = [f"inference-component/{n}" for n in live]
        dimension = "sagemaker:inference-component:DesiredCopyCount"
        found = [
            {"ServiceNamespace": "sagemaker", "ResourceId": r, "ScalableDimension": dimension, "MinCapacity": 0,
             "MaxCapacity": 4, "RoleARN": ROLE, "CreationTime": NOW}
            for r in resources
        ] if registered else []  # fmt: skip
        self.autoscaling.add_response(
            "describe_scalable_targets", {"ScalableTargets": found},
            {"ServiceNamespace": "sagemaker", "ResourceIds": resources, "ScalableDimension": dimension},
        )  # fmt: skip
        for target in found:
            self.autoscaling.add_response("describe_scaling_policies", {"ScalingPolicies": policies(target["ResourceId"])}, {
                "ServiceNamespace": "sagemaker", "ResourceId": target["ResourceId"], "ScalableDimension": dimension,
            })  # fmt: skip

    def done(self) -> None:
        for stub in (self.sagemaker, self.autoscaling, self.cloudwatch):
            stub.assert_no_pending_responses()


def policies(resource: str) -> list[dict[str, Any]]:
    common = {"ServiceNamespace": "sagemaker", "ResourceId": resource, "ScalableDimension": "sagemaker:inference-component:DesiredCopyCount", "CreationTime": NOW}
    return [
        {**common, "PolicyARN": f"arn:aws:autoscaling:tracking/{resource}", "PolicyName": "sluice-invocations-per-copy", "PolicyType": "TargetTrackingScaling",
         "TargetTrackingScalingPolicyConfiguration": {"TargetValue": 20.0, "PredefinedMetricSpecification": {"PredefinedMetricType": "SageMakerInferenceComponentInvocationsPerCopy"}}},
        {**common, "PolicyARN": f"arn:aws:autoscaling:step/{resource}", "PolicyName": "sluice-no-capacity", "PolicyType": "StepScaling"},
    ]  # fmt: skip


class World(EndpointsWorld):
    key: str
    account: Account


@pytest.fixture
def world(mlp_service: Container) -> World:
    container = mlp_service
    clients = {name: boto3.client(name, region_name=REGION) for name in ("sagemaker", "application-autoscaling", "cloudwatch")}
    recorded = Recorded()
    account = Account(sent=recorded.sent, calls=recorded.calls, tags=[])
    for name, client in clients.items():
        recorded.watch(client)
        stub = Stubber(client)
        stub.activate()
        setattr(account, {"application-autoscaling": "autoscaling"}.get(name, name), stub)
    clients["sagemaker"].meta.events.register(
        "before-parameter-build.sagemaker.CreateEndpoint", lambda params, **_: account.tags.extend(params["Tags"])
    )
    client = on_sagemaker(
        container, sagemaker=clients["sagemaker"], autoscaling=clients["application-autoscaling"],
        cloudwatch=clients["cloudwatch"], sns=object(),
    )  # fmt: skip
    container.deployments.create(ACME, "ranker", SPLIT)
    _, key = container.keys.create("acme", ["admin", "predict"])
    return World(container=container, client=client, key=key, account=account)


BODY = {
    "instance_type": "ml.g5.xlarge", "mode": "components", "min_instances": 0, "max_instances": 2,
    "copies": {"blue": 2}, "max_copies": 4, "invocations_per_copy": 20, "cpus": 2, "memory_mb": 8192, "fallback": "in_process",
}  # fmt: skip


def _deploy(world: World) -> dict[str, Any]:
    """Phase one: deploy; the endpoint is Creating."""
    account = world.account
    account.sagemaker.add_client_error("describe_endpoint", "ValidationException", f'Could not find endpoint "{ARN}:endpoint/{ENDPOINT}".', 400)
    for _ in range(2):
        account.sagemaker.add_response("create_model", {"ModelArn": f"{ARN}:model/m"})
    account.sagemaker.add_response("create_endpoint_config", {"EndpointConfigArn": f"{ARN}:endpoint-config/{CONFIG}"})
    account.sagemaker.add_response("create_endpoint", {"EndpointArn": f"{ARN}:endpoint/{ENDPOINT}"})
    account.look("Creating")
    r = world.client.post("/api/v1/deployments/ranker/endpoint", json=BODY, headers=auth(world.key))
    assert r.status_code == 202, r.text
    account.done()
    return r.json()


def _in_service(world: World) -> dict[str, Any]:
    """Phases two and three: the endpoint, then its components, are InService."""
    account, headers = world.account, auth(world.key)
    account.look("InService")  # the components are created now
    for _ in range(2):
        account.sagemaker.add_response("create_inference_component", {"InferenceComponentArn": f"{ARN}:inference-component/c"})
    account.look("InService", {BLUE: "Creating", GREEN: "Creating"})
    report = world.client.get("/api/v1/deployments/ranker/endpoint", headers=headers).json()
    assert (report["status"], report["endpoint_status"], report["bound"]) == ("Creating", "InService", False)
    account.done()

    account.look("InService", {BLUE: "InService", GREEN: "InService"})  # their copies are registered now
    for name in (BLUE, GREEN):
        account.autoscaling.add_response("register_scalable_target", {})
        account.autoscaling.add_response("put_scaling_policy", {"PolicyARN": f"arn:aws:autoscaling:tracking/{name}"})
        account.autoscaling.add_response("put_scaling_policy", {"PolicyARN": f"arn:aws:autoscaling:step/{name}"})
        account.cloudwatch.add_response("put_metric_alarm", {})
    account.look("InService", {BLUE: "InService", GREEN: "InService"}, registered=True)
    account.sagemaker.add_response("delete_tags", {}, {"ResourceArn": f"{ARN}:endpoint/{ENDPOINT}", "TagKeys": ["sluice:autoscaling"]})
    settled = [t for t in account.tags if t["Key"] != "sluice:autoscaling"]
    account.look("InService", {BLUE: "InService", GREEN: "InService"}, registered=True, tags=settled)
    report = world.client.get("/api/v1/deployments/ranker/endpoint", headers=headers).json()
    account.done()
    account.tags[:] = settled
    return report


def test_deploy_sends_managed_instances_then_components_then_their_autoscaling(world: World) -> None:
    report = _deploy(world)
    sent = world.account.sent
    assert (report["mode"], report["status"], report["bound"]) == ("components", "Creating", False)
    assert [(c["name"], c["inference_component"], c["status"], c["desired_copies"]) for c in report["components"]] == [
        ("blue", BLUE, "Pending", 2), ("green", GREEN, "Pending", 1),
    ]  # fmt: skip
    assert report["pending_autoscaling"] == {"min_copies": 0, "max_copies": 4, "target_invocations_per_copy": 20.0}
    models = [m["ModelName"] for m in sent["CreateModel"]]
    assert all(m.startswith(ENDPOINT) for m in models) and len(set(models)) == 2
    assert [m["PrimaryContainer"]["Environment"] for m in sent["CreateModel"]] == [{"SAGEMAKER_TRITON_DEFAULT_MODEL_NAME": "mlp"}] * 2
    [config] = sent["CreateEndpointConfig"]
    assert config["ProductionVariants"] == [{
        "VariantName": "AllTraffic", "InstanceType": "ml.g5.xlarge", "InitialInstanceCount": 1,
        "ManagedInstanceScaling": {"Status": "ENABLED", "MinInstanceCount": 0, "MaxInstanceCount": 2},
        "RoutingConfig": {"RoutingStrategy": "LEAST_OUTSTANDING_REQUESTS"},
    }]  # fmt: skip
    assert config["ExecutionRoleArn"] == ROLE and "AsyncInferenceConfig" not in config
    tags = {t["Key"]: t["Value"] for t in sent["CreateEndpoint"][0]["Tags"]}
    assert tags["sluice:component:blue"] == f"{models[0]} 2" and tags["sluice:component:green"] == f"{models[1]} 1"
    assert (tags["sluice:compute"], tags["sluice:fallback"], tags["sluice:autoscaling"]) == ("8192 2 1", "in_process", "0:4:20")
    assert "CreateInferenceComponent" not in sent  # SageMaker takes components on an InService endpoint only

    report = _in_service(world)
    assert sent["CreateInferenceComponent"] == [
        {
            "InferenceComponentName": name, "EndpointName": ENDPOINT, "VariantName": "AllTraffic",
            "Specification": {"ModelName": model, "ComputeResourceRequirements": COMPUTE},
            "RuntimeConfig": {"CopyCount": copies},
            "Tags": [{"Key": "sluice:tenant", "Value": "acme"}, {"Key": "sluice:deployment", "Value": "ranker"},
                     {"Key": "sluice:model", "Value": f"mlp:{version}"}],
        }
        for name, model, copies, version in ((BLUE, models[0], 2, 1), (GREEN, models[1], 1, 2))
    ]  # fmt: skip
    dimension = "sagemaker:inference-component:DesiredCopyCount"
    assert sent["RegisterScalableTarget"] == [
        {"ServiceNamespace": "sagemaker", "ResourceId": f"inference-component/{n}", "ScalableDimension": dimension, "MinCapacity": 0, "MaxCapacity": 4}
        for n in (BLUE, GREEN)
    ]
    tracking, step = sent["PutScalingPolicy"][:2]
    assert tracking == {
        "PolicyName": "sluice-invocations-per-copy", "ServiceNamespace": "sagemaker", "ResourceId": f"inference-component/{BLUE}",
        "ScalableDimension": dimension, "PolicyType": "TargetTrackingScaling",
        "TargetTrackingScalingPolicyConfiguration": {
            "TargetValue": 20.0, "PredefinedMetricSpecification": {"PredefinedMetricType": "SageMakerInferenceComponentInvocationsPerCopy"},
            "ScaleInCooldown": 300, "ScaleOutCooldown": 60,
        },
    }  # fmt: skip
    assert step == {
        "PolicyName": "sluice-no-capacity", "ServiceNamespace": "sagemaker", "ResourceId": f"inference-component/{BLUE}",
        "ScalableDimension": dimension, "PolicyType": "StepScaling",
        "StepScalingPolicyConfiguration": {
            "AdjustmentType": "ChangeInCapacity", "StepAdjustments": [{"MetricIntervalLowerBound": 0.0, "ScalingAdjustment": 1}],
            "Cooldown": 60, "MetricAggregationType": "Maximum",
        },
    }  # fmt: skip
    assert sent["PutMetricAlarm"][0] == {
        "AlarmName": f"{BLUE}-NoCapacityInvocationFailures", "AlarmDescription": f"A request found no copy of {BLUE}",
        "AlarmActions": [f"arn:aws:autoscaling:step/{BLUE}"], "MetricName": "NoCapacityInvocationFailures",
        "Namespace": "AWS/SageMaker", "Statistic": "Sum", "Dimensions": [{"Name": "InferenceComponentName", "Value": BLUE}],
        "Period": 60, "EvaluationPeriods": 1, "DatapointsToAlarm": 1, "Threshold": 1.0,
        "ComparisonOperator": "GreaterThanOrEqualToThreshold", "TreatMissingData": "missing",
    }  # fmt: skip
    assert [a["AlarmName"] for a in sent["PutMetricAlarm"]] == [f"{BLUE}-NoCapacityInvocationFailures", f"{GREEN}-NoCapacityInvocationFailures"]

    assert (report["status"], report["bound"], report["pending_autoscaling"]) == ("InService", True, None)
    blue = report["components"][0]
    assert (blue["status"], blue["desired_copies"], blue["current_copies"], blue["compute"]) == ("InService", 2, 2, COMPUTE)
    assert blue["autoscaling"] == {"min_copies": 0, "max_copies": 4, "target_invocations_per_copy": 20.0, "scales_from_zero": True}
    # What the runtime reads: each version names its own component, with the fallback.
    policy = world.container.deployments.get(ACME, "ranker").policy
    for variant, name, source in (("blue", BLUE, 1), ("green", GREEN, 2)):
        version = next(v["target"]["version"] for v in policy["variants"] if v["name"] == variant)
        bound = world.container.registry.get_version("acme", "mlp", version)
        assert bound.config == {
            "endpoint_name": ENDPOINT, "inference_component": name, "max_batch_size": 64, "fallback": "in_process", "source_version": source,
        }  # fmt: skip
        target = EndpointTarget.of(bound)
        assert (target.inference_component, target.fallback, target.variant) == (name, True, None)


def _answer(rows: int) -> dict[str, Any]:
    body = json.dumps({"outputs": [{"name": "y", "datatype": "FP32", "shape": [rows, 3], "data": [0.25] * 3 * rows}]}).encode()
    return {"Body": StreamingBody(io.BytesIO(body), len(body)), "ContentType": "application/json", "InvokedProductionVariant": "AllTraffic"}


def test_predictions_name_the_component_and_fall_back_while_it_has_no_copy(world: World) -> None:
    _deploy(world)
    _in_service(world)
    client = boto3.client("sagemaker-runtime", region_name=REGION)
    runtime_stub = Stubber(client)
    runtime_stub.activate()
    world.container.runtimes["sagemaker"] = SageMakerRuntime(client, fallback=lambda: world.container.runtimes["onnx"])
    expected = {"EndpointName": ENDPOINT, "InferenceComponentName": BLUE, "Body": ANY, "ContentType": "application/json"}
    runtime_stub.add_response("invoke_endpoint", _answer(1), expected)
    r = world.client.post("/v2/models/ranker/infer", json=ROW, headers=auth(world.key))
    assert r.status_code == 200, r.text
    assert r.json()["outputs"][0]["data"] == [0.25, 0.25, 0.25]
    # Scaled to zero: SageMaker says "no capacity" (and its alarm starts a copy); the same
    # ONNX artifact answers in process meanwhile.
    runtime_stub.add_client_error("invoke_endpoint", "ValidationError", NO_CAPACITY, 400, expected_params=expected)
    r = world.client.post("/v2/models/ranker/infer", json=ROW, headers=auth(world.key))
    assert r.status_code == 200, r.text
    assert r.json()["outputs"][0]["data"] != [0.25, 0.25, 0.25]  # the model's own answer
    runtime_stub.assert_no_pending_responses()


def test_undeploy_removes_autoscaling_alarms_components_endpoint_config_and_models(world: World) -> None:
    _deploy(world)
    _in_service(world)
    account = world.account
    models = sorted(account.models().values())
    account.look("InService", {BLUE: "InService", GREEN: "InService"}, registered=True)
    dimension = "sagemaker:inference-component:DesiredCopyCount"
    for name in (BLUE, GREEN):
        resource = f"inference-component/{name}"
        where = {"ServiceNamespace": "sagemaker", "ResourceId": resource, "ScalableDimension": dimension}
        account.autoscaling.add_response("describe_scaling_policies", {"ScalingPolicies": policies(resource)}, where)
        for policy in ("sluice-invocations-per-copy", "sluice-no-capacity"):
            account.autoscaling.add_response("delete_scaling_policy", {}, {"PolicyName": policy, **where})
        account.autoscaling.add_response(
            "describe_scalable_targets",
            {"ScalableTargets": [{**where, "MinCapacity": 0, "MaxCapacity": 4, "RoleARN": ROLE, "CreationTime": NOW}]},
            {"ServiceNamespace": "sagemaker", "ResourceIds": [resource], "ScalableDimension": dimension},
        )
        account.autoscaling.add_response("deregister_scalable_target", {}, where)
    alarms = [f"{BLUE}-NoCapacityInvocationFailures", f"{GREEN}-NoCapacityInvocationFailures"]
    account.cloudwatch.add_response("describe_alarms", {"MetricAlarms": [{"AlarmName": a} for a in alarms]}, {"AlarmNames": alarms})
    account.cloudwatch.add_response("delete_alarms", {}, {"AlarmNames": alarms})
    for name in (BLUE, GREEN):
        account.sagemaker.add_response("delete_inference_component", {}, {"InferenceComponentName": name})
    account.sagemaker.add_response("delete_endpoint", {}, {"EndpointName": ENDPOINT})
    account.sagemaker.add_response("list_endpoint_configs", {"EndpointConfigs": [
        {"EndpointConfigName": CONFIG, "EndpointConfigArn": f"{ARN}:endpoint-config/{CONFIG}", "CreationTime": NOW},
    ]}, {"NameContains": ENDPOINT})  # fmt: skip
    account.sagemaker.add_response("delete_endpoint_config", {}, {"EndpointConfigName": CONFIG})
    account.sagemaker.add_response("list_models", {"Models": [
        {"ModelName": m, "ModelArn": f"{ARN}:model/{m}", "CreationTime": NOW} for m in models
    ]}, {"NameContains": ENDPOINT})  # fmt: skip
    for model in models:
        account.sagemaker.add_response("delete_model", {}, {"ModelName": model})
    account.calls.clear()
    r = world.client.delete("/api/v1/deployments/ranker/endpoint", headers=auth(world.key))
    assert r.status_code == 200, r.text
    account.done()
    changes = [c for c in account.calls if c.startswith(("Delete", "Deregister"))]
    assert changes == [
        "DeleteScalingPolicy", "DeleteScalingPolicy", "DeregisterScalableTarget",
        "DeleteScalingPolicy", "DeleteScalingPolicy", "DeregisterScalableTarget",
        "DeleteAlarms", "DeleteInferenceComponent", "DeleteInferenceComponent",
        "DeleteEndpoint", "DeleteEndpointConfig", "DeleteModel", "DeleteModel",
    ]  # fmt: skip
    deleted = r.json()["deleted"]
    assert (deleted["inference_components"], deleted["alarms"], deleted["models"]) == ([BLUE, GREEN], alarms, models)
    assert deleted["versions"] == ["mlp:3", "mlp:4"]
    policy = world.container.deployments.get(ACME, "ranker").policy
    assert [v["target"]["version"] for v in policy["variants"]] == [1, 2]  # in process again


def test_a_rollout_of_a_deployment_on_components_is_refused_naming_the_endpoint(world: World) -> None:
    """A rollout moves real-time variants' weights; an inference-component endpoint's versions
    name components, not variants: a 409 naming `endpoint` (it was a 500, a KeyError on the
    version's variant read before the endpoint's mode was looked at)."""
    _deploy(world)
    _in_service(world)
    world.account.look("InService", {BLUE: "InService", GREEN: "InService"}, registered=True, tags=world.account.tags)
    world.client.raise_server_exceptions = False  # type: ignore[attr-defined]
    r = world.client.post(
        "/api/v1/deployments/ranker/rollout", json={"to": "mlp:1", "steps": "5,50,100", "every": "10m", "gate": ["error_rate<=0.01"]},
        headers=auth(world.key),
    )  # fmt: skip
    assert r.status_code == 409 and r.json()["field"] == "endpoint" and "inference-component" in r.json()["error"], r.text
