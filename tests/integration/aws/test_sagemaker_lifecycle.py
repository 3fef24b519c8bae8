"""A deployment's SageMaker endpoint against moto: deploy one version and a split, weights,
autoscaling, scale, status from Creating to InService to Failed, undeploy in order, tenants,
bad input, AWS failures, and an API cold start that never imports the SageMaker SDK."""

from __future__ import annotations

import io
import subprocess
import sys
import tarfile
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import boto3
import pytest

from sluice.domain import Principal
from sluice.domain.errors import BadRequest
from sluice.endpoints.names import digest, endpoint_name
from sluice.endpoints.sagemaker import SageMakerEndpoints
from sluice.runtimes.sagemaker_target import EndpointTarget
from sluice.wiring import Container, build_endpoint_control
from tests.conftest import REPO
from tests.integration.aws.conftest import BUCKET, REGION, EndpointsWorld, Recorded, on_sagemaker
from tests.integration.aws.conftest import ENDPOINTS_ROLE as ROLE
from tests.integration.conftest import api_keys, auth
from tests.integration.triton.conftest import mlp_onnx

if TYPE_CHECKING:
    from collections.abc import Callable

IMAGE = "763104351884.dkr.ecr.eu-west-1.amazonaws.com/sagemaker-tritonserver:25.09-py3"
ACME = Principal("acme", frozenset({"admin", "predict"}), "test-acme")
GLOBEX = Principal("globex", frozenset({"admin", "predict"}), "test-globex")
SPLIT = {
    "kind": "split",
    "routing_key": "user",
    "variants": [
        {"name": "blue", "weight": 0.9, "target": {"model": "mlp", "version": 1}},
        {"name": "green", "weight": 0.1, "target": {"model": "mlp", "version": 2}},
    ],
}


MLP = {1: mlp_onnx(1), 2: mlp_onnx(2)}


class World(EndpointsWorld):
    keys: dict[str, str]
    calls: list[str]
    sent: dict[str, list[dict[str, Any]]]  # request parameters by operation
    sagemaker: Any
    autoscaling: Any


@pytest.fixture
def world(mlp_service: Container) -> World:
    container = mlp_service
    wired = build_endpoint_control(container.settings, container.store)
    assert isinstance(wired, SageMakerEndpoints) and (wired.role_arn, wired.region) == (ROLE, REGION)
    recorded = Recorded()
    sagemaker = boto3.client("sagemaker", region_name=REGION)
    autoscaling = boto3.client("application-autoscaling", region_name=REGION)
    recorded.watch(sagemaker, autoscaling)
    keys = api_keys(container)
    return World(
        container=container,
        client=on_sagemaker(container, sagemaker=sagemaker, autoscaling=autoscaling),  # the same adapter, on clients this test watches
        keys=keys,
        calls=recorded.calls,
        sent=recorded.sent,
        sagemaker=sagemaker,
        autoscaling=autoscaling,
    )


def _deployment(world: World, policy: dict[str, Any], principal: Principal = ACME, name: str = "ranker") -> None:
    world.container.deployments.create(principal, name, policy)


def _deploy(world: World, body: dict[str, Any], key: str = "acme", name: str = "ranker") -> Any:
    return world.client.post(f"/api/v1/deployments/{name}/endpoint", json=body, headers=auth(world.keys[key]))


def _backend_endpoint(name: str) -> Any:
    from moto.sagemaker.models import sagemaker_backends

    return sagemaker_backends["123456789012"][REGION].endpoints[name]


def _tarball_members(world: World, uri: str) -> dict[str, bytes]:
    key = uri.removeprefix(f"s3://{BUCKET}/")
    data = boto3.client("s3", region_name=REGION).get_object(Bucket=BUCKET, Key=key)["Body"].read()
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}  # type: ignore[union-attr]


# deploy ------------------------------------------------------------------------------------
def test_deploy_one_version(world: World) -> None:
    _deployment(world, {"model": "mlp", "version": 1})
    r = _deploy(world, {"instance_type": "ml.g4dn.xlarge", "instance_count": 2})
    assert r.status_code == 202, r.text
    report = r.json()
    name = endpoint_name("acme", "ranker")
    assert report["endpoint_name"] == name and len(name) <= 63
    assert report["status"] == "InService" and report["bound"] is True
    assert report["images"] == [IMAGE]

    endpoint = world.sagemaker.describe_endpoint(EndpointName=name)
    assert endpoint["EndpointStatus"] == "InService"
    config = world.sagemaker.describe_endpoint_config(EndpointConfigName=endpoint["EndpointConfigName"])
    [variant] = config["ProductionVariants"]
    assert variant["VariantName"] == "primary"
    assert (variant["InstanceType"], variant["InitialInstanceCount"], variant["InitialVariantWeight"]) == ("ml.g4dn.xlarge", 2, 1.0)
    model = world.sagemaker.describe_model(ModelName=variant["ModelName"])
    container = model["PrimaryContainer"]
    assert container["Image"] == IMAGE
    assert container["Environment"] == {"SAGEMAKER_TRITON_DEFAULT_MODEL_NAME": "mlp"}
    assert model["ExecutionRoleArn"] == ROLE
    # Triton needs no internet: the model's container gets none. moto accepts the flag but
    # does not echo it in DescribeModel, so the request itself is checked.
    assert [p["EnableNetworkIsolation"] for p in world.sent["CreateModel"]] == [True]
    assert container["ModelDataUrl"].startswith(f"s3://{BUCKET}/artifacts/tenants/acme/sha256/")
    assert container["ModelDataUrl"].endswith(".tar.gz")
    members = _tarball_members(world, container["ModelDataUrl"])
    assert set(members) == {"mlp/config.pbtxt", "mlp/1/model.onnx"}
    config_text = members["mlp/config.pbtxt"].decode()
    assert 'backend: "onnxruntime"' in config_text and "KIND_GPU" in config_text and "max_batch_size: 64" in config_text
    assert members["mlp/1/model.onnx"] == MLP[1]

    # The deployment now routes to a `sagemaker` version of the same model, bound to the endpoint.
    policy = world.container.deployments.get(ACME, "ranker").policy
    bound = world.container.registry.get_version("acme", "mlp", policy["version"])
    source = world.container.registry.get_version("acme", "mlp", 1)
    assert bound.runtime == "sagemaker" and bound.version == 3
    assert bound.config == {"endpoint_name": name, "variant": "primary", "max_batch_size": 64, "source_version": 1}
    assert (bound.artifact_uri, bound.sha256, bound.signature) == (source.artifact_uri, source.sha256, source.signature)
    target = EndpointTarget.of(bound)
    assert (target.endpoint_name, target.variant, target.max_batch_size) == (name, "primary", 64)


def test_deploy_a_split_of_two_versions(world: World) -> None:
    _deployment(world, SPLIT)
    r = _deploy(world, {"instance_type": "ml.c5.xlarge"})
    assert r.status_code == 202, r.text
    name = r.json()["endpoint_name"]
    config = world.sagemaker.describe_endpoint_config(
        EndpointConfigName=world.sagemaker.describe_endpoint(EndpointName=name)["EndpointConfigName"]
    )
    variants = {v["VariantName"]: v for v in config["ProductionVariants"]}
    assert {n: v["InitialVariantWeight"] for n, v in variants.items()} == {"blue": 0.9, "green": 0.1}
    assert {v["InstanceType"] for v in variants.values()} == {"ml.c5.xlarge"}
    blue = world.sagemaker.describe_model(ModelName=variants["blue"]["ModelName"])["PrimaryContainer"]
    green = world.sagemaker.describe_model(ModelName=variants["green"]["ModelName"])["PrimaryContainer"]
    assert blue["Image"] == green["Image"] == IMAGE.replace(":25.09-py3", ":25.09-py3-cpu")  # a CPU instance: the -cpu build
    assert blue["ModelDataUrl"] != green["ModelDataUrl"]
    assert "KIND_CPU" in _tarball_members(world, green["ModelDataUrl"])["mlp/config.pbtxt"].decode()
    assert _tarball_members(world, green["ModelDataUrl"])["mlp/2/model.onnx"] == MLP[2]

    policy = world.container.deployments.get(ACME, "ranker").policy
    assert policy["routing_key"] == "user"
    by_name = {v["name"]: v for v in policy["variants"]}
    assert {n: v["weight"] for n, v in by_name.items()} == {"blue": 0.9, "green": 0.1}
    for label, source in (("blue", 1), ("green", 2)):
        version = world.container.registry.get_version("acme", "mlp", by_name[label]["target"]["version"])
        assert version.config["variant"] == label and version.config["source_version"] == source
    report = world.client.get("/api/v1/deployments/ranker/endpoint", headers=auth(world.keys["acme"])).json()
    assert [(v["name"], v["model"], v["version"]) for v in report["variants"]] == [("blue", "mlp", 1), ("green", "mlp", 2)]


# weights, autoscaling, scale ---------------------------------------------------------------
def test_weights_update_in_place(world: World) -> None:
    _deployment(world, SPLIT)
    name = _deploy(world, {"instance_type": "ml.g4dn.xlarge"}).json()["endpoint_name"]
    world.calls.clear()
    r = world.client.put("/api/v1/deployments/ranker/scale", json={"weights": {"blue": 0.5, "green": 0.5}}, headers=auth(world.keys["acme"]))
    assert r.status_code == 200, r.text
    assert "UpdateEndpointWeightsAndCapacities" in world.calls and "UpdateEndpoint" not in world.calls
    live = {v["VariantName"]: v for v in world.sagemaker.describe_endpoint(EndpointName=name)["ProductionVariants"]}
    assert (live["blue"]["DesiredWeight"], live["green"]["DesiredWeight"]) == (0.5, 0.5)
    # sluice picks the variant (TargetVariant), so its split takes the same weights
    policy = world.container.deployments.get(ACME, "ranker").policy
    assert [v["weight"] for v in policy["variants"]] == [0.5, 0.5]
    assert policy["variants"][0]["target"]["version"] == 3  # still bound


def test_autoscaling_is_registered_per_variant(world: World) -> None:
    _deployment(world, SPLIT)
    body = {"instance_type": "ml.g4dn.xlarge", "instance_count": 2, "min_instances": 1, "max_instances": 4, "target_invocations_per_instance": 250}
    name = _deploy(world, body).json()["endpoint_name"]
    targets = world.autoscaling.describe_scalable_targets(ServiceNamespace="sagemaker")["ScalableTargets"]
    assert {(t["ResourceId"], t["ScalableDimension"], t["MinCapacity"], t["MaxCapacity"]) for t in targets} == {
        (f"endpoint/{name}/variant/blue", "sagemaker:variant:DesiredInstanceCount", 1, 4),
        (f"endpoint/{name}/variant/green", "sagemaker:variant:DesiredInstanceCount", 1, 4),
    }
    policies = world.autoscaling.describe_scaling_policies(ServiceNamespace="sagemaker")["ScalingPolicies"]
    assert len(policies) == 2
    for policy in policies:
        tracking = policy["TargetTrackingScalingPolicyConfiguration"]
        assert policy["PolicyType"] == "TargetTrackingScaling"
        assert tracking["TargetValue"] == 250
        assert tracking["PredefinedMetricSpecification"]["PredefinedMetricType"] == "SageMakerVariantInvocationsPerInstance"


def test_scale_changes_range_and_instances(world: World) -> None:
    _deployment(world, SPLIT)
    name = _deploy(world, {"instance_type": "ml.g4dn.xlarge", "min_instances": 1, "max_instances": 2}).json()["endpoint_name"]
    headers = auth(world.keys["acme"])
    r = world.client.put("/api/v1/deployments/ranker/scale", json={"min_instances": 2, "max_instances": 6, "desired_instances": 3, "variant": "green"}, headers=headers)
    assert r.status_code == 200, r.text
    report = {v["name"]: v for v in r.json()["variants"]}
    assert report["green"]["autoscaling"] == {"min_instances": 2, "max_instances": 6, "target_invocations_per_instance": 100.0}
    assert report["green"]["desired_instances"] == 3
    assert report["blue"]["autoscaling"]["max_instances"] == 2 and report["blue"]["desired_instances"] == 1
    live = {v["VariantName"]: v for v in world.sagemaker.describe_endpoint(EndpointName=name)["ProductionVariants"]}
    assert live["green"]["DesiredInstanceCount"] == 3
    [green] = world.autoscaling.describe_scalable_targets(ServiceNamespace="sagemaker", ResourceIds=[f"endpoint/{name}/variant/green"])["ScalableTargets"]
    assert (green["MinCapacity"], green["MaxCapacity"]) == (2, 6)
    # Autoscaling can be turned on later for an endpoint deployed without it.
    _deployment(world, {"model": "mlp", "version": 1}, name="plain")
    _deploy(world, {"instance_type": "ml.g4dn.xlarge"}, name="plain")
    r = world.client.put("/api/v1/deployments/plain/scale", json={"min_instances": 1, "max_instances": 3, "target_invocations_per_instance": 50}, headers=headers)
    assert r.status_code == 200, r.text
    assert r.json()["variants"][0]["autoscaling"] == {"min_instances": 1, "max_instances": 3, "target_invocations_per_instance": 50.0}


# status ------------------------------------------------------------------------------------
def test_status_moves_from_creating_to_in_service_to_failed(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    from moto.sagemaker.models import FakeEndpoint

    born = FakeEndpoint.__init__

    def creating(self: Any, *args: Any, **kwargs: Any) -> None:  # moto's endpoints are born InService
        born(self, *args, **kwargs)
        self.endpoint_status = "Creating"

    monkeypatch.setattr(FakeEndpoint, "__init__", creating)
    _deployment(world, {"model": "mlp", "version": 1})
    headers = auth(world.keys["acme"])
    r = _deploy(world, {"instance_type": "ml.g4dn.xlarge", "min_instances": 1, "max_instances": 2})
    report = r.json()
    assert report["status"] == "Creating" and report["bound"] is False
    assert report["pending_autoscaling"] == {"min_instances": 1, "max_instances": 2, "target_invocations_per_instance": 100.0}
    # Nothing routes to the endpoint, and nothing scales it, before it is InService.
    assert world.container.deployments.get(ACME, "ranker").policy["version"] == 1
    assert world.autoscaling.describe_scalable_targets(ServiceNamespace="sagemaker")["ScalableTargets"] == []
    r = world.client.put("/api/v1/deployments/ranker/scale", json={"desired_instances": 2}, headers=headers)
    assert r.status_code == 409 and r.json()["field"] == "endpoint"

    name = report["endpoint_name"]
    _backend_endpoint(name).endpoint_status = "InService"
    report = world.client.get("/api/v1/deployments/ranker/endpoint", headers=headers).json()
    assert report["status"] == "InService" and report["bound"] is True and report["pending_autoscaling"] is None
    assert report["variants"][0]["autoscaling"]["max_instances"] == 2
    assert world.container.deployments.get(ACME, "ranker").policy["version"] == 3

    _backend_endpoint(name).endpoint_status = "Failed"
    _backend_endpoint(name).failure_reason = "The primary container for production variant primary did not pass the ping health check."
    report = world.client.get("/api/v1/deployments/ranker/endpoint", headers=headers).json()
    assert report["status"] == "Failed"
    assert report["failure_reason"].startswith("The primary container for production variant primary")


# undeploy ----------------------------------------------------------------------------------
def test_undeploy_routes_back_then_removes_everything_in_order(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    _deployment(world, SPLIT)
    name = _deploy(world, {"instance_type": "ml.g4dn.xlarge", "min_instances": 1, "max_instances": 2}).json()["endpoint_name"]
    world.calls.clear()
    update = world.container.deployments.update

    def spy(*args: Any, **kwargs: Any) -> Any:
        world.calls.append("PolicyRestored")
        return update(*args, **kwargs)

    monkeypatch.setattr(world.container.deployments, "update", spy)
    r = world.client.delete("/api/v1/deployments/ranker/endpoint", headers=auth(world.keys["acme"]))
    assert r.status_code == 200, r.text
    changes = [c for c in world.calls if c.startswith(("Delete", "Deregister", "Policy"))]
    assert changes == [
        "PolicyRestored",
        "DeleteScalingPolicy", "DeregisterScalableTarget",  # blue
        "DeleteScalingPolicy", "DeregisterScalableTarget",  # green
        "DeleteEndpoint",
        "DeleteEndpointConfig",
        "DeleteModel", "DeleteModel",
    ]
    deleted = r.json()["deleted"]
    assert deleted["endpoint"] == name and len(deleted["models"]) == 2 and deleted["versions"] == ["mlp:3", "mlp:4"]
    assert world.sagemaker.list_endpoints()["Endpoints"] == []
    assert world.sagemaker.list_endpoint_configs()["EndpointConfigs"] == []
    assert world.sagemaker.list_models()["Models"] == []
    assert world.autoscaling.describe_scalable_targets(ServiceNamespace="sagemaker")["ScalableTargets"] == []
    assert world.autoscaling.describe_scaling_policies(ServiceNamespace="sagemaker")["ScalingPolicies"] == []
    # Back on the versions it had before, which still answer in process.
    policy = world.container.deployments.get(ACME, "ranker").policy
    assert [v["target"]["version"] for v in policy["variants"]] == [1, 2] and policy["routing_key"] == "user"
    assert [v.version for v in world.container.registry.list_versions("acme", "mlp")] == [1, 2]
    body = {"inputs": [{"name": "x", "shape": [1, 8], "datatype": "FP32", "data": [0.5] * 8}]}
    assert world.client.post("/v2/models/ranker/infer", json=body, headers=auth(world.keys["acme_predict"])).status_code == 200
    # A second undeploy finds nothing.
    r = world.client.delete("/api/v1/deployments/ranker/endpoint", headers=auth(world.keys["acme"]))
    assert r.status_code == 404 and r.json()["field"] == "endpoint"


# tenants -----------------------------------------------------------------------------------
def test_tenants_get_their_own_endpoints(world: World) -> None:
    world.container.models.push(GLOBEX, "mlp", MLP[2])
    _deployment(world, {"model": "mlp", "version": 1}, ACME)
    _deployment(world, {"model": "mlp", "version": 1}, GLOBEX)
    acme = _deploy(world, {"instance_type": "ml.g4dn.xlarge"}).json()["endpoint_name"]
    # globex sees no endpoint under the same deployment name, and cannot scale or delete acme's
    for method, path, body in (
        ("GET", "/api/v1/deployments/ranker/endpoint", None),
        ("PUT", "/api/v1/deployments/ranker/scale", {"desired_instances": 2}),
        ("DELETE", "/api/v1/deployments/ranker/endpoint", None),
    ):
        r = world.client.request(method, path, json=body, headers=auth(world.keys["globex"]))
        assert r.status_code == 404 and r.json()["field"] == "endpoint", (method, r.text)
    globex = _deploy(world, {"instance_type": "ml.g4dn.xlarge"}, key="globex").json()["endpoint_name"]
    assert globex != acme and globex.startswith("sluice-globex-ranker-")
    tags = {t["Key"]: t["Value"] for t in world.sagemaker.list_tags(ResourceArn=world.sagemaker.describe_endpoint(EndpointName=globex)["EndpointArn"])["Tags"]}
    assert (tags["sluice:tenant"], tags["sluice:deployment"]) == ("globex", "ranker")
    assert world.client.delete("/api/v1/deployments/ranker/endpoint", headers=auth(world.keys["globex"])).status_code == 200
    assert [e["EndpointName"] for e in world.sagemaker.list_endpoints()["Endpoints"]] == [acme]
    assert world.client.get("/api/v1/deployments/ranker/endpoint", headers=auth(world.keys["acme"])).json()["status"] == "InService"
    assert world.client.get("/api/v1/deployments/ranker/endpoint", headers=auth(world.keys["acme_predict"])).status_code == 403



def test_undeploy_leaves_alone_another_tenants_endpoint_whose_name_extends_its_own(world: World) -> None:
    """acme's deployment "x" has endpoint sluice-acme-x-<d>; tenant acme-x's deployment
    "<d>-y" gets sluice-acme-x-<d>-y-<d2>, whose configs and models all start with
    "sluice-acme-x-<d>-". acme's undeploy deletes its own (a leftover model too, found by its
    name and tags) and none of acme-x's."""
    victim = Principal("acme-x", frozenset({"admin", "predict"}), "test-acme-x")
    victim_deployment = f"{digest('acme', 'x')}-y"
    mine, theirs = endpoint_name("acme", "x"), endpoint_name(victim.tenant, victim_deployment)
    assert theirs.startswith(mine + "-")
    world.container.models.push(victim, "mlp", MLP[1])
    _, victim_key = world.container.keys.create(victim.tenant, ["admin", "predict"])
    world.keys["acme-x"] = victim_key
    _deployment(world, {"model": "mlp", "version": 1}, ACME, name="x")
    _deployment(world, {"model": "mlp", "version": 1}, victim, name=victim_deployment)
    assert _deploy(world, {"instance_type": "ml.g4dn.xlarge"}, name="x").status_code == 202
    assert _deploy(world, {"instance_type": "ml.g4dn.xlarge"}, key="acme-x", name=victim_deployment).status_code == 202
    # A model an earlier, half-finished deploy of acme's left behind, which no config names.
    [mine_model] = [m["ModelName"] for m in world.sagemaker.list_models()["Models"] if m["ModelName"].startswith(mine) and not m["ModelName"].startswith(theirs)]
    left = world.sagemaker.describe_model(ModelName=mine_model)
    world.sagemaker.create_model(
        ModelName=f"{mine}-primary-0badc0de",
        ExecutionRoleArn=left["ExecutionRoleArn"],
        PrimaryContainer=left["PrimaryContainer"],
        Tags=[{"Key": "sluice:tenant", "Value": "acme"}, {"Key": "sluice:deployment", "Value": "x"}],
    )

    def names() -> tuple[list[str], list[str]]:
        models = [m["ModelName"] for m in world.sagemaker.list_models()["Models"]]
        configs = [c["EndpointConfigName"] for c in world.sagemaker.list_endpoint_configs()["EndpointConfigs"]]
        return sorted(models), sorted(configs)

    before = names()
    r = world.client.delete("/api/v1/deployments/x/endpoint", headers=auth(world.keys["acme"]))
    assert r.status_code == 200, r.text
    models, configs = names()
    assert models and configs and all(n.startswith(theirs) for n in models + configs), (models, configs)
    assert (models, configs) == ([m for m in before[0] if m.startswith(theirs)], [c for c in before[1] if c.startswith(theirs)])
    assert f"{mine}-primary-0badc0de" in r.json()["deleted"]["models"]
    assert [e["EndpointName"] for e in world.sagemaker.list_endpoints()["Endpoints"]] == [theirs]
    r = world.client.get(f"/api/v1/deployments/{victim_deployment}/endpoint", headers=auth(victim_key))
    assert r.json()["status"] == "InService", r.text


# bad input and AWS failures ----------------------------------------------------------------
BAD_DEPLOYS = [
    ({"instance_type": "g5.xlarge"}, 400, "instance_type", "ml.<family>.<size>"),
    ({"instance_type": "ml.inf1.xlarge"}, 400, "instance_type", "Inferentia"),
    ({"instance_type": "ml.g4dn.xlarge", "min_instances": 3, "max_instances": 2}, 400, "min_instances", "above max_instances"),
    ({"instance_type": "ml.g4dn.xlarge", "min_instances": 0, "max_instances": 2}, 422, "min_instances", "inference components"),  # a combination: mode realtime
    ({"instance_type": "ml.g4dn.xlarge", "instance_count": 5, "max_instances": 2}, 400, "instance_count", "between"),
    ({"instance_type": "ml.g4dn.xlarge", "triton_version": "19.01"}, 400, "triton_version", "unknown SageMaker Triton version"),
    ({"instance_type": "ml.g4dn.xlarge", "instance_count": 0}, 422, "instance_count", ""),
    ({"instance_type": "ml.g4dn.xlarge", "instance_count": 101}, 400, "instance_count", "between 1 and 100"),
    # the autoscaling ceiling is held to the same bound as the count it scales
    ({"instance_type": "ml.g4dn.xlarge", "max_instances": 101}, 400, "max_instances", "at most 100"),
    ({"instance_type": "ml.g4dn.xlarge", "max_instances": 10**9}, 400, "max_instances", "at most 100"),
    ({"instance_type": "ml.g4dn.xlarge", "min_instances": 101}, 400, "min_instances", "at most 100"),
    ({"instance_type": "ml.g4dn.xlarge", "max_batch_size": 2**31}, 422, "max_batch_size", "2147483647"),  # Triton's int32
    ({"instance_type": "ml.g4dn.xlarge", "colour": "red"}, 422, "colour", ""),
]
BAD_SCALES = [
    ({"weights": {"blue": 1, "purple": 1}}, "weights.purple", "no variant 'purple'"),
    ({"weights": {"blue": 0, "green": 0}}, "weights", "more than 0"),
    ({"weights": {"blue": 2e9, "green": 1}}, "weights.blue", "from 0 to 1000000000"),  # past the policy's bound: refused before the endpoint moves
    ({"min_instances": 4, "max_instances": 2}, "min_instances", "above max_instances"),
    ({"min_instances": 0, "max_instances": 2}, "min_instances", "inference components"),
    ({"desired_instances": 0}, "desired_instances", "inference components"),
    ({"desired_instances": 9}, "desired_instances", "outside variant 'blue''s autoscaling range 1-2"),
    ({"max_instances": 10**9}, "max_instances", "at most 100"),
    ({"min_instances": 1, "max_instances": 101}, "max_instances", "at most 100"),
    ({"desired_instances": 10**9}, "desired_instances", "at most 100"),
    ({"max_instances": 5, "variant": "purple"}, "variant", "no variant 'purple'"),
    ({}, "body", "give min_instances"),
]


def test_bad_deploy_requests_are_4xx(world: World) -> None:
    _deployment(world, SPLIT)
    for body, status, field, words in BAD_DEPLOYS:
        r = _deploy(world, body)
        assert (r.status_code, r.json()["field"]) == (status, field), (body, r.text)
        assert words in r.json()["error"], (body, r.text)
    assert world.sagemaker.list_endpoints()["Endpoints"] == []


def test_bad_scale_requests_are_400(world: World) -> None:
    _deployment(world, SPLIT)
    _deploy(world, {"instance_type": "ml.g4dn.xlarge", "min_instances": 1, "max_instances": 2})
    world.calls.clear()
    for body, field, words in BAD_SCALES:
        r = world.client.put("/api/v1/deployments/ranker/scale", json=body, headers=auth(world.keys["acme"]))
        assert (r.status_code, r.json()["field"]) == (400, field), (body, r.text)
        assert words in r.json()["error"], (body, r.text)
    assert not [c for c in world.calls if c.startswith(("Update", "Register", "Put"))]  # nothing changed


@pytest.mark.parametrize("weight", ["NaN", "Infinity", "-Infinity"])
def test_a_weight_that_is_not_finite_is_refused_before_the_endpoint_changes(world: World, weight: str) -> None:
    """The body's float took "NaN" and "Infinity" and the weight check let NaN through: the
    endpoint was weighted NaN before the policy refused the same number, naming a field the
    caller never sent. Refused, naming the weight, by the API and by the service the CLI calls."""
    _deployment(world, SPLIT)
    _deploy(world, {"instance_type": "ml.g4dn.xlarge"})
    world.calls.clear()
    r = world.client.put("/api/v1/deployments/ranker/scale", json={"weights": {"blue": weight, "green": 0.5}}, headers=auth(world.keys["acme"]))
    assert r.status_code in (400, 422) and r.json()["field"] == "weights.blue", r.text
    with pytest.raises(BadRequest) as refused:
        world.container.endpoints.set_weights(ACME, "ranker", {"blue": float(weight.lower().replace("infinity", "inf")), "green": 0.5})
    assert refused.value.field == "weights.blue"
    assert not [c for c in world.calls if c.startswith(("Update", "Register", "Put"))]  # nothing changed


def test_deploy_refusals(world: World) -> None:
    headers = auth(world.keys["acme"])
    assert _deploy(world, {"instance_type": "ml.g4dn.xlarge"}, name="nothing").status_code == 404
    _deployment(world, {"kind": "shadow", "primary": {"model": "mlp", "version": 1}, "mirrors": [{"name": "m", "target": {"model": "mlp", "version": 2}}]}, name="shadowed")
    r = _deploy(world, {"instance_type": "ml.g4dn.xlarge"}, name="shadowed")
    assert (r.status_code, r.json()["field"]) == (422, "policy")
    _deployment(world, {"model": "mlp", "version": 1})
    assert world.client.get("/api/v1/deployments/ranker/endpoint", headers=headers).status_code == 404
    assert _deploy(world, {"instance_type": "ml.g4dn.xlarge"}).status_code == 202
    r = _deploy(world, {"instance_type": "ml.g4dn.xlarge"})
    assert (r.status_code, r.json()["field"]) == (409, "endpoint")
    world.container.endpoints.control.role_arn = None  # type: ignore[attr-defined]
    r = _deploy(world, {"instance_type": "ml.g4dn.xlarge"}, name="shadowed")
    assert r.status_code == 422  # the policy is checked before the service's own configuration
    _deployment(world, {"model": "mlp", "version": 2}, name="other")
    r = _deploy(world, {"instance_type": "ml.g4dn.xlarge"}, name="other")
    assert (r.status_code, r.json()["field"]) == (503, "sagemaker_execution_role_arn")



def test_a_version_with_a_scalar_tensor_is_refused_naming_it_and_makes_nothing(world: World) -> None:
    """Triton cannot declare a rank-0 tensor, so no endpoint could ever load the version."""
    from tests.models import relu_model

    world.container.models.push(ACME, "scalar", relu_model([]))
    _deployment(world, {"model": "scalar", "version": 1}, name="scalar")
    r = _deploy(world, {"instance_type": "ml.g4dn.xlarge"}, name="scalar")
    assert (r.status_code, r.json()["field"]) == (422, "policy"), r.text
    assert "input 'x' is a scalar" in r.json()["error"] and "[1]" in r.json()["error"]
    assert world.sagemaker.list_endpoints()["Endpoints"] == [] and world.sagemaker.list_models()["Models"] == []

def _failing(operation: str, code: str) -> Callable[..., Any]:
    def fail(model: Any, **_: Any) -> Any:
        if model.name == operation:
            return SimpleNamespace(status_code=400, headers={}), {
                "Error": {"Code": code, "Message": "raw AWS words that stay in the log"},
                "ResponseMetadata": {"HTTPStatusCode": 400},
            }
        return None

    return fail


def test_aws_failures_are_502_or_503_and_roll_back(world: World) -> None:
    _deployment(world, SPLIT)
    for code, status in (("ThrottlingException", 503), ("ResourceLimitExceeded", 503), ("AccessDeniedException", 502), ("ValidationException", 502)):
        hook = _failing("CreateEndpoint", code)
        world.sagemaker.meta.events.register("before-call.sagemaker.CreateEndpoint", hook)
        r = _deploy(world, {"instance_type": "ml.g4dn.xlarge"})
        world.sagemaker.meta.events.unregister("before-call.sagemaker.CreateEndpoint", hook)
        assert r.status_code == status, (code, r.text)
        assert "raw AWS words" not in r.text
        # What the failed deploy created is gone again; the deployment still routes in process.
        assert world.sagemaker.list_models()["Models"] == []
        assert world.sagemaker.list_endpoint_configs()["EndpointConfigs"] == []
        assert world.container.deployments.get(ACME, "ranker").policy["variants"][0]["target"]["version"] == 1


# the SDK stays out of the API Lambda ----------------------------------------------------------
def test_the_api_cold_start_does_not_import_the_sagemaker_sdk(tmp_path: Path) -> None:
    # Stand-in SDKs on the path: any import of `sagemaker` (or of MLflow, which only
    # `sluice models push models:/…` uses) at cold start would load them.
    for sdk in ("sagemaker", "mlflow"):
        (tmp_path / sdk).mkdir()
        (tmp_path / sdk / "__init__.py").write_text("")
    code = (
        "import importlib.util, sys; assert importlib.util.find_spec('sagemaker') is not None; "
        "import sluice.handlers.api; assert 'sagemaker' not in sys.modules, 'the SageMaker SDK was imported'; "
        "assert 'mlflow' not in sys.modules, 'MLflow was imported'"
    )
    env = {"PATH": "/usr/bin:/bin", "AWS_DEFAULT_REGION": REGION, "SLUICE_LOG_LEVEL": "WARNING"}
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        env={**env, "PYTHONPATH": f"{tmp_path}:{REPO / 'functions'}"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
