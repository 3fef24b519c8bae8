"""`api.managed_instances`: the capacity provider and the API function on it, synthesized in a
small stack of their own (with cdk-nag, as the app runs it), and the config's checks."""

from __future__ import annotations

from typing import Any

import pytest
from infra.config import SluiceConfig
from pydantic import ValidationError

from tests.infra.synth import cdk_context, properties, resources

pytestmark = pytest.mark.usefixtures("cdk_runtime")  # constructs of its own: on the CDK's worker (tests/conftest.py)

NETWORK = {"subnet_ids": ["subnet-0a1b2c3d", "subnet-4e5f6a7b"], "security_group_ids": ["sg-0a1b2c3d"]}


def _config(**managed: Any) -> dict[str, Any]:
    return {"api": {"managed_instances": {**NETWORK, **managed}}}


def test_the_api_function_runs_on_a_capacity_provider_in_the_given_subnets() -> None:
    from aws_cdk import App, Duration, Stack
    from aws_cdk.assertions import Template
    from infra.constructs.functions import FunctionPlatform, SluiceFunction
    from infra.constructs.managed_instances import ManagedInstances
    from infra.nag import register_checks

    managed = SluiceConfig.model_validate(
        _config(instance_types=["c7i.xlarge", "m7i.xlarge"], max_vcpus=64, per_environment_concurrency=8,
                memory_gib_per_vcpu=2, min_environments=3, max_environments=30)
    ).api.managed_instances
    assert managed is not None
    app = App(context=cdk_context())
    stack = Stack(app, "Managed")
    platform = FunctionPlatform(python="3.14", architecture_name="x86_64", log_retention_days=30, retain_logs=False, environment={})
    fn = SluiceFunction(
        stack, "Api", function_name="sluice-api", handler="sluice.handlers.api.handler", description="api",
        platform=platform, layers=[], memory_mb=4096, timeout=Duration.seconds(30),
    )  # fmt: skip
    provider = ManagedInstances(stack, "ManagedInstances", config=managed, architecture=platform.architecture, name="sluice-api")
    provider.attach(fn, 4096)
    register_checks(app)
    app.synth()  # cdk-nag: raises on a finding neither fixed nor acknowledged
    template = Template.from_stack(stack)

    [(provider_id, found)] = resources(template, "AWS::Lambda::CapacityProvider").items()
    props = found["Properties"]
    assert props["VpcConfig"] == {"SubnetIds": NETWORK["subnet_ids"], "SecurityGroupIds": NETWORK["security_group_ids"]}
    assert props["InstanceRequirements"] == {"AllowedInstanceTypes": ["c7i.xlarge", "m7i.xlarge"], "Architectures": ["x86_64"]}
    assert props["CapacityProviderScalingConfig"] == {"MaxVCpuCount": 64}
    # The operator role: assumed by Lambda alone, with the managed policy and nothing else.
    [(role_id, role)] = [
        (rid, r) for rid, r in resources(template, "AWS::IAM::Role").items()
        if rid == props["PermissionsConfig"]["CapacityProviderOperatorRoleArn"]["Fn::GetAtt"][0]
    ]  # fmt: skip
    statement = role["Properties"]["AssumeRolePolicyDocument"]["Statement"]
    assert [s["Principal"] for s in statement] == [{"Service": "lambda.amazonaws.com"}]
    [policy] = role["Properties"]["ManagedPolicyArns"]
    assert policy["Fn::Join"][1][-1] == ":iam::aws:policy/AWSLambdaManagedEC2ResourceOperator"
    assert not any(p.get("Roles") == [{"Ref": role_id}] for p in properties(template, "AWS::IAM::Policy"))

    [function] = properties(template, "AWS::Lambda::Function")
    config = function["CapacityProviderConfig"]["LambdaManagedInstancesCapacityProviderConfig"]
    assert config == {
        "CapacityProviderArn": {"Fn::GetAtt": [provider_id, "Arn"]},
        "PerExecutionEnvironmentMaxConcurrency": 8,
        "ExecutionEnvironmentMemoryGiBPerVCpu": 2,
    }
    assert function["PublishToLatestPublished"] is True  # what an unqualified invoke runs
    assert function["FunctionScalingConfig"] == {"MinExecutionEnvironments": 3, "MaxExecutionEnvironments": 30}
    assert "SnapStart" not in function and "ReservedConcurrentExecutions" not in function
    # 8 processes share 4096 MB and 2 vCPUs: each caches within its 512 MB and tunes for one vCPU.
    variables = function["Environment"]["Variables"]
    assert variables["SLUICE_MODEL_CACHE_BYTES"] == str(256 << 20)
    assert variables["SLUICE_PREDICTION_CACHE_MAX_BYTES"] == str(32 << 20)
    assert variables["SLUICE_PRECOMPUTED_ANSWERS_KEPT_BYTES"] == str(16 << 20)
    assert variables["SLUICE_ORT_VCPUS"] == "1"


def test_off_by_default_and_the_shipped_config_stays_on_demand() -> None:
    assert SluiceConfig().api.managed_instances is None
    managed = SluiceConfig.model_validate(_config()).api.managed_instances
    assert managed is not None and managed.per_environment_concurrency == 4 and managed.memory_gib_per_vcpu == 2


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"functions": {"python": "3.12"}, **_config()}, r"api\.managed_instances needs functions\.python 3\.13 or 3\.14"),
        ({"api": {"managed_instances": {"security_group_ids": ["sg-0a1b2c3d"]}}}, "subnet_ids"),
        ({"api": {"managed_instances": {**NETWORK, "subnet_ids": []}}}, "subnet_ids"),
        ({"api": {"managed_instances": {**NETWORK, "security_group_ids": []}}}, "security_group_ids"),
        (_config(subnet_ids=["vpc-0a1b2c3d"]), r"'vpc-0a1b2c3d' is not a subnet id"),
        (_config(security_group_ids=["default"]), r"'default' is not a security group id"),
        (_config(instance_types=["C7G LARGE"]), "not an EC2 instance type"),
        (_config(instance_types=["c7g.xlarge"]), r"c7g\.xlarge do not run functions\.architecture x86_64"),
        ({"functions": {"architecture": "arm64"}, **_config(instance_types=["m7i.large"])}, "do not run functions.architecture arm64"),
        ({"api": {"memory_mb": 1024, "managed_instances": NETWORK}}, r"at least 2048 MB and one vCPU"),
        ({"api": {"memory_mb": 2048, "managed_instances": {**NETWORK, "memory_gib_per_vcpu": 4}}}, r"api\.memory_mb >= 4096"),
        (_config(per_environment_concurrency=16), "leaves each process 128 MB"),
        (_config(max_vcpus=4), "max_vcpus"),
        (_config(min_environments=5, max_environments=2), "min_environments"),
    ],
)
def test_what_aws_requires_is_refused_before_synthesis(change: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        SluiceConfig.model_validate(change)
