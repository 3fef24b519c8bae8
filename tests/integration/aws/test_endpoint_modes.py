"""`sluice endpoints deploy --mode async` against moto: the endpoint config's
AsyncInferenceConfig under the tenant's results, SNS topics made or given, autoscaling on the
backlog down to zero with the HasBacklogWithoutCapacity step policy and alarm, the deployment
bound so that a prediction goes through the queue (202, then the answer SageMaker writes), and
undeploy removing all of it. And the refusals of every mode, by the API (422 naming the field)
and by the CLI (naming the flag). Inference components, which moto does not model, are in
test_endpoint_components.py."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import boto3
import pytest

from sluice.domain import Principal
from sluice.endpoints.names import digest, endpoint_name
from sluice.runtimes.sagemaker_target import EndpointTarget
from sluice.wiring import Container
from tests.integration.aws.conftest import BUCKET, REGION, EndpointsWorld, Recorded, on_sagemaker
from tests.integration.conftest import auth, run_cli

if TYPE_CHECKING:
    from pathlib import Path

ACCOUNT = "123456789012"
ACME = Principal("acme", frozenset({"admin", "predict"}), "test-acme")
RESULTS = f"s3://{BUCKET}/artifacts/results/tenants/acme/"
SPLIT = {
    "kind": "split",
    "variants": [
        {"name": "blue", "weight": 0.9, "target": {"model": "mlp", "version": 1}},
        {"name": "green", "weight": 0.1, "target": {"model": "mlp", "version": 2}},
    ],
}
ROW = {"inputs": [{"name": "x", "shape": [1, 8], "datatype": "FP32", "data": [0.5] * 8}]}


class World(EndpointsWorld):
    keys: dict[str, str]
    calls: list[str]  # operations, in order, across the four clients
    sent: dict[str, list[dict[str, Any]]]  # request parameters by operation
    sagemaker: Any
    autoscaling: Any
    cloudwatch: Any
    sns: Any


@pytest.fixture
def world(mlp_service: Container) -> World:
    container = mlp_service
    recorded = Recorded()
    # The adapter's clients, by the names it takes them under.
    clients = {
        "sagemaker": boto3.client("sagemaker", region_name=REGION),
        "autoscaling": boto3.client("application-autoscaling", region_name=REGION),
        "cloudwatch": boto3.client("cloudwatch", region_name=REGION),
        "sns": boto3.client("sns", region_name=REGION),
    }
    recorded.watch(*clients.values())
    client = on_sagemaker(container, **clients)
    _, admin = container.keys.create("acme", ["admin", "predict"])
    _, globex = container.keys.create("globex", ["admin", "predict"])
    return World(
        container=container,
        client=client,
        keys={"acme": admin, "globex": globex},
        calls=recorded.calls,
        sent=recorded.sent,
        **clients,
    )


def _deploy(world: World, body: dict[str, Any], name: str = "ranker") -> Any:
    return world.client.post(f"/api/v1/deployments/{name}/endpoint", json=body, headers=auth(world.keys["acme"]))


@pytest.fixture
def queued(world: World, monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """moto's InvokeEndpointAsync answering as SageMaker does: the output and failure
    locations under the endpoint config's S3OutputPath and S3FailurePath. The calls it got."""
    from moto.sagemaker.models import sagemaker_backends
    from moto.sagemakerruntime.models import SageMakerRuntimeBackend

    got: list[tuple[str, str]] = []

    def invoke_endpoint_async(self: Any, endpoint_name: str, input_location: str) -> tuple[str, str]:
        backend = sagemaker_backends[self.account_id][self.region_name]
        config = backend.endpoint_configs[backend.endpoints[endpoint_name].endpoint_config_name]
        output = config.async_inference_config["OutputConfig"]
        got.append((endpoint_name, input_location))
        return f"{output['S3OutputPath']}/{len(got)}.out", f"{output['S3FailurePath']}/{len(got)}-error.out"

    monkeypatch.setattr(SageMakerRuntimeBackend, "invoke_endpoint_async", invoke_endpoint_async)
    return got


# deploy ------------------------------------------------------------------------------------
def test_an_async_deploy_sends_the_queue_config_and_scales_to_zero(world: World) -> None:
    world.container.deployments.create(ACME, "ranker", {"model": "mlp", "version": 1})
    r = _deploy(world, {"instance_type": "ml.g4dn.xlarge", "mode": "async", "create_topics": True, "max_concurrent_invocations": 2})
    assert r.status_code == 202, r.text
    name = endpoint_name("acme", "ranker")
    topics = {t["TopicArn"].rsplit(":", 1)[1]: t["TopicArn"] for t in world.sns.list_topics()["Topics"]}
    assert set(topics) == {f"{name}-succeeded", f"{name}-failed"}
    [config] = world.sent["CreateEndpointConfig"]
    [variant] = config["ProductionVariants"]
    assert (variant["VariantName"], variant["InstanceType"], variant["InitialInstanceCount"]) == ("primary", "ml.g4dn.xlarge", 1)
    assert config["AsyncInferenceConfig"] == {
        "ClientConfig": {"MaxConcurrentInvocationsPerInstance": 2},
        "OutputConfig": {
            "S3OutputPath": RESULTS + "sagemaker",
            "S3FailurePath": RESULTS + "sagemaker-errors",
            "NotificationConfig": {"SuccessTopic": topics[f"{name}-succeeded"], "ErrorTopic": topics[f"{name}-failed"]},
        },
    }
    assert "ExecutionRoleArn" not in config
    for arn in topics.values():  # encrypted, TLS only
        attributes = world.sns.get_topic_attributes(TopicArn=arn)["Attributes"]
        assert attributes["KmsMasterKeyId"] == "alias/aws/sns"
        [deny] = json.loads(attributes["Policy"])["Statement"]
        assert (deny["Effect"], deny["Condition"]) == ("Deny", {"Bool": {"aws:SecureTransport": "false"}})

    # InService at once in moto: the first look registered autoscaling and bound the deployment.
    report = r.json()
    assert (report["mode"], report["status"], report["bound"], report["pending_autoscaling"]) == ("async", "InService", True, None)
    assert report["asynchronous"]["output_path"] == RESULTS + "sagemaker"
    assert report["variants"][0]["autoscaling"] == {
        "min_instances": 0, "max_instances": 1, "target_backlog_per_instance": 5.0, "scales_from_zero": True,
    }  # fmt: skip
    resource = f"endpoint/{name}/variant/primary"
    assert world.sent["RegisterScalableTarget"] == [
        {"ServiceNamespace": "sagemaker", "ResourceId": resource, "ScalableDimension": "sagemaker:variant:DesiredInstanceCount", "MinCapacity": 0, "MaxCapacity": 1}
    ]
    tracking, step = world.sent["PutScalingPolicy"]
    assert tracking == {
        "PolicyName": "sluice-backlog-per-instance",
        "ServiceNamespace": "sagemaker",
        "ResourceId": resource,
        "ScalableDimension": "sagemaker:variant:DesiredInstanceCount",
        "PolicyType": "TargetTrackingScaling",
        "TargetTrackingScalingPolicyConfiguration": {
            "TargetValue": 5.0,
            "CustomizedMetricSpecification": {
                "MetricName": "ApproximateBacklogSizePerInstance",
                "Namespace": "AWS/SageMaker",
                "Dimensions": [{"Name": "EndpointName", "Value": name}],
                "Statistic": "Average",
            },
            "ScaleInCooldown": 600,
            "ScaleOutCooldown": 300,
        },
    }
    assert step["PolicyType"] == "StepScaling" and step["PolicyName"] == "sluice-has-backlog-without-capacity"
    assert step["StepScalingPolicyConfiguration"] == {
        "AdjustmentType": "ChangeInCapacity",
        "StepAdjustments": [{"MetricIntervalLowerBound": 0.0, "ScalingAdjustment": 1}],
        "Cooldown": 300,
        "MetricAggregationType": "Average",
    }
    step_arn = next(
        p["PolicyARN"]
        for p in world.autoscaling.describe_scaling_policies(ServiceNamespace="sagemaker")["ScalingPolicies"]
        if p["PolicyName"] == "sluice-has-backlog-without-capacity"
    )
    [alarm] = world.cloudwatch.describe_alarms()["MetricAlarms"]
    assert alarm["AlarmName"] == f"{name}-HasBacklogWithoutCapacity"
    assert alarm["AlarmActions"] == [step_arn]
    assert (alarm["Namespace"], alarm["MetricName"], alarm["Statistic"], alarm["Period"]) == ("AWS/SageMaker", "HasBacklogWithoutCapacity", "Average", 60)
    assert alarm["Dimensions"] == [{"Name": "EndpointName", "Value": name}]
    assert (alarm["EvaluationPeriods"], alarm["DatapointsToAlarm"], alarm["Threshold"]) == (2, 2, 1.0)
    assert (alarm["ComparisonOperator"], alarm["TreatMissingData"]) == ("GreaterThanOrEqualToThreshold", "missing")

    # What the runtime reads: every request through InvokeEndpointAsync.
    policy = world.container.deployments.get(ACME, "ranker").policy
    bound = world.container.registry.get_version("acme", "mlp", policy["version"])
    assert bound.config == {"endpoint_name": name, "variant": "primary", "max_batch_size": 64, "invocation": "async", "source_version": 1}
    target = EndpointTarget.of(bound)
    assert target.asynchronous and target.takes_async and target.endpoint_name == name


def test_a_prediction_goes_through_the_queue_and_the_answer_is_read_back(world: World, queued: list[tuple[str, str]]) -> None:
    world.container.deployments.create(ACME, "ranker", {"model": "mlp", "version": 1})
    assert _deploy(world, {"instance_type": "ml.g4dn.xlarge", "mode": "async"}).status_code == 202
    r = world.client.post("/v2/models/ranker/infer", json=ROW, headers=auth(world.keys["acme"]))
    assert r.status_code == 202, r.text
    [(endpoint, input_location)] = queued
    assert endpoint == endpoint_name("acme", "ranker")
    assert input_location.startswith(RESULTS) and input_location.endswith("/input")
    # SageMaker runs the container and writes its answer where the endpoint config says.
    answer = {"outputs": [{"name": "y", "datatype": "FP32", "shape": [1, 3], "data": [0.25, 0.5, 0.25]}]}
    key = f"artifacts/results/tenants/acme/sagemaker/{len(queued)}.out"
    boto3.client("s3", region_name=REGION).put_object(Bucket=BUCKET, Key=key, Body=json.dumps(answer).encode())
    result = world.client.get(r.json()["result"], headers=auth(world.keys["acme"])).json()
    assert result["status"] == "succeeded", result
    bound = world.container.deployments.get(ACME, "ranker").policy["version"]
    assert result["outputs"] == answer["outputs"] and (result["model"], result["version"]) == ("mlp", bound)
    assert world.client.get(r.json()["result"], headers=auth(world.keys["globex"])).status_code == 404


def test_the_cli_deploys_async_and_undeploys_it_all(world: World, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import sluice.wiring

    monkeypatch.setattr(sluice.wiring, "get_container", lambda: world.container)
    world.container.deployments.create(ACME, "ranker", {"model": "mlp", "version": 1})
    code, out, err = run_cli(
        capsys, "--tenant", "acme", "endpoints", "deploy", "ranker", "--mode", "async", "--instance-type", "ml.g4dn.xlarge",
        "--min-instances", "0", "--max-instances", "3", "--backlog-per-instance", "2", "--create-topics",
    )  # fmt: skip
    assert code == 0, err
    report = json.loads(out)
    assert (report["mode"], report["status"], report["instance_count"]) == ("async", "InService", 1)
    assert report["variants"][0]["autoscaling"]["max_instances"] == 3
    code, out, _ = run_cli(capsys, "--tenant", "acme", "endpoints", "status", "ranker")
    assert code == 0 and json.loads(out)["asynchronous"]["topics"]["success"].endswith("-succeeded")

    mine = endpoint_name("acme", "ranker")
    operator = f"{mine}-p99-latency"  # an operator's own alarm, named after the endpoint
    # Tenant acme-ranker's deployment "<digest>-y" has an endpoint whose name extends acme's,
    # and so does the name of its own scale-from-zero alarm.
    other = f"{endpoint_name('acme-ranker', digest('acme', 'ranker') + '-y')}-HasBacklogWithoutCapacity"
    assert other.startswith(f"{mine}-")
    for name in (operator, other):
        world.cloudwatch.put_metric_alarm(
            AlarmName=name, MetricName="ModelLatency", Namespace="AWS/SageMaker", Statistic="Average", Period=60,
            EvaluationPeriods=1, Threshold=1.0, ComparisonOperator="GreaterThanThreshold",
        )  # fmt: skip
    world.calls.clear()
    code, out, err = run_cli(capsys, "--tenant", "acme", "endpoints", "undeploy", "ranker")
    assert code == 0, err
    changes = [c for c in world.calls if c.startswith(("Delete", "Deregister"))]
    assert changes == [
        "DeleteScalingPolicy", "DeleteScalingPolicy", "DeregisterScalableTarget",
        "DeleteAlarms", "DeleteEndpoint", "DeleteEndpointConfig", "DeleteModel", "DeleteTopic", "DeleteTopic",
    ]  # fmt: skip
    deleted = json.loads(out)["deleted"]
    assert deleted["alarms"] == [f"{endpoint_name('acme', 'ranker')}-HasBacklogWithoutCapacity"] and len(deleted["topics"]) == 2
    assert world.sns.list_topics()["Topics"] == []
    assert sorted(a["AlarmName"] for a in world.cloudwatch.describe_alarms()["MetricAlarms"]) == sorted([operator, other])  # its own alone went
    assert world.autoscaling.describe_scalable_targets(ServiceNamespace="sagemaker")["ScalableTargets"] == []
    assert world.autoscaling.describe_scaling_policies(ServiceNamespace="sagemaker")["ScalingPolicies"] == []
    assert world.sagemaker.list_endpoints()["Endpoints"] == [] and world.sagemaker.list_models()["Models"] == []
    assert world.container.deployments.get(ACME, "ranker").policy["version"] == 1  # in process again


def test_given_topics_and_output_path_are_used_and_kept(world: World) -> None:
    ok = world.sns.create_topic(Name="acme-answers")["TopicArn"]
    failed = world.sns.create_topic(Name="acme-errors")["TopicArn"]
    world.container.deployments.create(ACME, "ranker", {"model": "mlp", "version": 1})
    body = {
        "instance_type": "ml.g4dn.xlarge", "mode": "async", "min_instances": 1, "max_instances": 2,
        "output_path": RESULTS + "ranker/", "success_topic": ok, "error_topic": failed,
    }  # fmt: skip
    r = _deploy(world, body)
    assert r.status_code == 202, r.text
    output = world.sent["CreateEndpointConfig"][0]["AsyncInferenceConfig"]["OutputConfig"]
    assert output == {
        "S3OutputPath": RESULTS + "ranker",
        "S3FailurePath": RESULTS + "ranker-errors",
        "NotificationConfig": {"SuccessTopic": ok, "ErrorTopic": failed},
    }
    # A minimum of 1: no scale-from-zero policy or alarm.
    assert [p["PolicyType"] for p in world.sent["PutScalingPolicy"]] == ["TargetTrackingScaling"]
    assert world.cloudwatch.describe_alarms()["MetricAlarms"] == []
    assert r.json()["variants"][0]["autoscaling"]["scales_from_zero"] is False
    # The endpoint's capacity is its own: scale refuses, naming the mode.
    r = world.client.put("/api/v1/deployments/ranker/scale", json={"min_instances": 2, "max_instances": 4}, headers=auth(world.keys["acme"]))
    assert (r.status_code, r.json()["field"]) == (422, "mode")
    r = world.client.delete("/api/v1/deployments/ranker/endpoint", headers=auth(world.keys["acme"]))
    assert r.status_code == 200 and r.json()["deleted"]["topics"] == []
    assert {t["TopicArn"] for t in world.sns.list_topics()["Topics"]} == {ok, failed}  # yours: kept


# refusals ----------------------------------------------------------------------------------
TOPIC = f"arn:aws:sns:{REGION}:{ACCOUNT}:answers"
BAD = [
    ({"copies": 2}, "copies", "mode components"),
    ({"output_path": RESULTS + "x"}, "output_path", "mode async"),
    ({"mode": "async", "copies": 2}, "copies", "mode components"),
    ({"mode": "async", "target_invocations_per_instance": 50}, "target_invocations_per_instance", "mode realtime"),
    ({"mode": "components", "output_path": RESULTS + "x"}, "output_path", "mode async"),
    ({"mode": "components", "create_topics": True}, "create_topics", "mode async"),
    ({"mode": "async", "output_path": f"s3://{BUCKET}/artifacts/results/tenants/globex/sagemaker"}, "output_path", "tenant's results"),
    ({"mode": "async", "output_path": "s3://another-bucket/results/tenants/acme/sagemaker"}, "output_path", "tenant's results"),
    ({"mode": "async", "output_path": RESULTS + "../../globex/sagemaker"}, "output_path", "tenant's results"),
    # a `..` a URL parser would hide (after `?` or `#`, or escaped): the key SageMaker writes is not the one checked
    *(({"mode": "async", "output_path": RESULTS + odd}, "output_path", "tenant's results") for odd in ("x?/../../globex/sagemaker", "x#/../../globex/sagemaker", "x/%2e%2e/%2e%2e/globex/sagemaker")),
    # the area itself: its failures beside it (`…/tenants/acme-errors`) would be outside it, inside a tenant acme-errors's
    *(({"mode": "async", "output_path": root}, "output_path", "its failures beside it") for root in (RESULTS, RESULTS.rstrip("/"))),
    ({"mode": "async", "success_topic": "answers"}, "success_topic", "SNS topic ARN"),
    ({"mode": "async", "success_topic": TOPIC, "create_topics": True}, "create_topics", "not both"),
    ({"mode": "async", "error_topic": f"arn:aws:sns:{REGION}:{ACCOUNT}:sluice-alarms"}, "error_topic", "sluice's own"),
    ({"mode": "async", "min_instances": 3, "max_instances": 2}, "min_instances", "above max_instances"),
    ({"mode": "async", "instance_count": 3, "max_instances": 2}, "instance_count", "between"),
    ({"mode": "async", "max_instances": 10**9}, "max_instances", "at most 100"),
    ({"mode": "components", "min_instances": 101}, "min_instances", "at most 100"),
    ({"mode": "components", "copies": 5, "max_copies": 2}, "copies", "between min_copies"),
    ({"mode": "components", "copies": {"purple": 1}}, "copies.purple", "no variant 'purple'"),
    ({"mode": "components", "min_copies": 3, "max_copies": 2}, "min_copies", "min_copies"),
    ({"mode": "components", "instance_type": "ml.c5.xlarge", "gpus": 1}, "gpus", "no GPU"),
    ({"mode": "batch"}, "mode", ""),
]


def test_bad_combinations_are_422_naming_the_field_and_make_nothing(world: World) -> None:
    world.container.deployments.create(ACME, "ranker", {"model": "mlp", "version": 1})
    for extra, field, words in BAD:
        r = _deploy(world, {"instance_type": "ml.g4dn.xlarge", **extra})
        assert (r.status_code, r.json().get("field")) == (422, field), (extra, r.text)
        assert words in r.json()["error"], (extra, r.text)
    world.container.deployments.create(ACME, "split", SPLIT)
    r = _deploy(world, {"instance_type": "ml.g4dn.xlarge", "mode": "async"}, name="split")
    assert (r.status_code, r.json()["field"]) == (422, "mode") and "one version" in r.json()["error"]
    assert [c for c in world.calls if c.startswith(("Create", "Register", "Put"))] == []


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (("--min-instances", "0"), "--min-instances"),
        (("--copies", "2"), "--copies"),
        (("--mode", "async", "--copies", "2"), "--copies"),
        (("--mode", "components", "--output-path", RESULTS + "x"), "--output-path"),
        (("--mode", "async", "--output-path", "s3://elsewhere/sagemaker"), "--output-path"),
        (("--mode", "components", "--copies", "blue=1", "--copies", "3"), "--copies"),
        (("--mode", "components", "--copies", "purple=1"), "--copies"),
        (("--mode", "components", "--instance-type", "ml.c5.xlarge", "--gpus", "1"), "--gpus"),
        (("--max-batch-size", str(2**31)), "--max-batch-size"),  # an int32 in Triton's config.pbtxt
    ],
)
def test_the_cli_names_the_flag(
    world: World, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], args: tuple[str, ...], flag: str
) -> None:
    import sluice.wiring

    monkeypatch.setattr(sluice.wiring, "get_container", lambda: world.container)
    world.container.deployments.create(ACME, "ranker", {"model": "mlp", "version": 1})
    code, out, err = run_cli(capsys, "--tenant", "acme", "endpoints", "deploy", "ranker", "--instance-type", "ml.g4dn.xlarge", *args)
    assert code == 2 and out == ""
    assert err.startswith(f"error [{flag}]: "), err
    assert world.sagemaker.list_endpoints()["Endpoints"] == []


def test_the_local_twin_refuses_the_modes_it_does_not_run(world: World, tmp_path: Path) -> None:
    from sluice.endpoints.local_endpoints import LocalEndpoints

    world.container.endpoint_control = LocalEndpoints(world.container.store, tmp_path / "home")
    world.container.deployments.create(ACME, "ranker", {"model": "mlp", "version": 1})
    for mode in ("async", "components"):
        r = _deploy(world, {"instance_type": "ml.c5.xlarge", "mode": mode})
        assert (r.status_code, r.json()["field"]) == (422, "mode"), r.text
        assert "real-time endpoints only" in r.json()["error"]
    assert not (tmp_path / "home" / "endpoints").exists()


def test_a_rollout_on_an_async_endpoint_is_refused_naming_the_endpoint(world: World, queued: list[tuple[str, str]]) -> None:
    world.container.deployments.create(ACME, "ranker", {"model": "mlp", "version": 1})
    assert _deploy(world, {"instance_type": "ml.g4dn.xlarge", "mode": "async"}).status_code == 202
    # The first prediction's look binds the deployment to the endpoint once it is in service.
    assert world.client.post("/v2/models/ranker/infer", json=ROW, headers=auth(world.keys["acme"])).status_code == 202
    body = {"to": "mlp:2", "steps": [10, 100], "every": "1m", "gate": "error_rate<=0.01"}
    r = world.client.post("/api/v1/deployments/ranker/rollout", json=body, headers=auth(world.keys["acme"]))
    assert (r.status_code, r.json()["field"]) == (409, "endpoint"), r.text
    assert "asynchronous" in r.json()["error"]
    assert "UpdateEndpoint" not in world.calls and "UpdateEndpointWeightsAndCapacities" not in world.calls


def test_a_deployment_with_an_endpoint_is_not_deleted_until_the_endpoint_is_undeployed(
    world: World, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Deleting a deployment whose endpoint runs would leave the endpoint billed with nothing to
    route to it, and a deployment made again under the name would find it as its own: 409,
    naming what to do, over the API and the CLI; once undeployed, the deployment goes."""
    import sluice.wiring

    monkeypatch.setattr(sluice.wiring, "get_container", lambda: world.container)
    world.container.deployments.create(ACME, "ranker", {"model": "mlp", "version": 1})
    assert _deploy(world, {"instance_type": "ml.g4dn.xlarge"}).status_code == 202
    r = world.client.delete("/api/v1/deployments/ranker", headers=auth(world.keys["acme"]))
    assert (r.status_code, r.json()["field"]) == (409, "deployment"), r.text
    assert endpoint_name("acme", "ranker") in r.json()["error"] and "undeploy" in r.json()["error"]
    code, _, err = run_cli(capsys, "--tenant", "acme", "deployments", "delete", "ranker")
    assert code != 0 and "undeploy it first" in err
    assert world.container.deployments.get(ACME, "ranker").name == "ranker"  # still there
    assert world.client.delete("/api/v1/deployments/ranker/endpoint", headers=auth(world.keys["acme"])).status_code == 200
    assert world.client.delete("/api/v1/deployments/ranker", headers=auth(world.keys["acme"])).status_code == 204
    assert world.client.get("/api/v1/deployments/ranker", headers=auth(world.keys["acme"])).status_code == 404


def test_a_batch_job_or_a_stream_over_an_asynchronous_endpoint_is_refused_before_anything_is_queued(
    world: World, queued: list[tuple[str, str]], tmp_path: Path
) -> None:
    """Scoring in place through an asynchronous endpoint would queue a SageMaker job per call
    that nothing reads, then fail every row with "queued": the job fails at its plan, and a
    stream's records are sent back for their retry and dead-letter queue, naming the endpoint,
    with nothing queued."""
    import asyncio

    from sluice.stream.core import StreamScorer
    from sluice.stream.records import StreamRecord
    from tests.integration.batch.jobs import run_job

    world.container.deployments.create(ACME, "ranker", {"model": "mlp", "version": 1})
    assert _deploy(world, {"instance_type": "ml.g4dn.xlarge", "mode": "async"}).status_code == 202
    source = tmp_path / "rows.jsonl"
    source.write_text("".join(json.dumps({"x": [0.5] * 8}) + "\n" for _ in range(5)))
    job = run_job(world.container, ACME, source, deployment="ranker")
    assert job.status == "FAILED" and "asynchronous endpoint" in (job.error or "") and job.rows_failed == 0
    record = StreamRecord(json.dumps({"features": [0.5] * 8}), "arn:aws:sqs:us-east-1:123456789012:rows", "m-1", {"message_id": "m-1"})
    [outcome] = asyncio.run(StreamScorer(world.container.predictions, "acme", "ranker").score([record]))
    assert outcome.retry is not None and "asynchronous endpoint" in outcome.retry
    # Reached through a reference: the same (it was scored, each row failing "queued").
    world.container.deployments.create(ACME, "front", {"kind": "ref", "deployment": "ranker"})
    job = run_job(world.container, ACME, source, deployment="front")
    assert job.status == "FAILED" and "asynchronous endpoint" in (job.error or "") and job.rows_failed == 0, job
    [outcome] = asyncio.run(StreamScorer(world.container.predictions, "acme", "front").score([record]))
    assert outcome.retry is not None and "asynchronous endpoint" in outcome.retry
    assert queued == []
