"""The API deploys SageMaker endpoints at run time: it may make exactly the calls
`sluice.endpoints.sagemaker` (and its reader, `sagemaker_state`, and its scaling calls,
`sagemaker_scaling`) makes, on the names it makes, and pass a role to SageMaker that can do
no more than run those endpoints."""

from __future__ import annotations

import ast
import inspect
from fnmatch import fnmatchcase
from typing import Any

import boto3
import pytest

from sluice.endpoints import names as endpoint_names
from sluice.endpoints import (
    sagemaker,
    sagemaker_scaling,
    sagemaker_settle,
    sagemaker_state,
    sagemaker_teardown,
    sagemaker_variant,
)
from sluice.endpoints.image_uris import triton_image_uri
from sluice.storage.base import artifact_key
from tests.infra.synth import (
    ACCOUNT,
    REGION,
    Synthesized,
    assert_role_policy_has,
    function_by_handler,
    role_of,
    roles_assumed_by,
)
from tests.infra.synth import (
    SAGEMAKER_ARN as ARN,
)

pytestmark = pytest.mark.usefixtures("cdk_runtime")  # constructs of its own: on the CDK's worker (tests/conftest.py)

API = "sluice.handlers.api.handler"
ARTIFACTS = f"sluice-artifacts-{ACCOUNT}-{REGION}"
CLIENTS = {"sagemaker": "sagemaker", "autoscaling": "application-autoscaling", "cloudwatch": "cloudwatch", "sns": "sns"}


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _statements(app: Synthesized, role_id: str) -> list[dict[str, Any]]:
    """Every statement of the policies on one role (Allow and Deny), references resolved."""
    from aws_cdk.assertions import Match

    policies = app.resolved("api").find_resources(
        "AWS::IAM::Policy", {"Properties": {"Roles": Match.array_with([{"Ref": role_id}])}}
    )
    return [
        s
        for p in policies.values()
        for s in p["Properties"]["PolicyDocument"]["Statement"]
    ]


def _allowed(statements: list[dict[str, Any]], action: str, resource: str) -> bool:
    """Whether some statement allows `action` on `resource` and none denies it (ignoring conditions)."""

    def matches(s: dict[str, Any]) -> bool:
        return action in _as_list(s["Action"]) and any(fnmatchcase(resource, pattern) for pattern in _as_list(s["Resource"]))

    allowed = any(matches(s) for s in statements if s.get("Effect", "Allow") == "Allow")
    return allowed and not any(matches(s) for s in statements if s.get("Effect") == "Deny")


def _calls_of_the_lifecycle() -> set[str]:
    """IAM actions of every SageMaker, Application Auto Scaling, CloudWatch and SNS call the
    modules make: `self.<client>.<method>(…)` or `self.<client>().<method>(…)`, and methods
    they name as strings (`getattr(client, name)`)."""
    methods = {
        client: boto3.client(service, region_name=REGION).meta.method_to_api_mapping
        for client, service in CLIENTS.items()
    }
    actions: set[str] = set()
    trees = [ast.parse(inspect.getsource(module)) for module in (sagemaker, sagemaker_state, sagemaker_scaling, sagemaker_settle, sagemaker_variant, sagemaker_teardown)]
    for node in (n for tree in trees for n in ast.walk(tree)):
        owner = node.value.func if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Call) else getattr(node, "value", None)
        if (
            isinstance(node, ast.Attribute)
            and isinstance(owner, ast.Attribute)
            and owner.attr in CLIENTS
            and node.attr in methods[owner.attr]
        ):
            client = owner.attr
            actions.add(f"{CLIENTS[client]}:{methods[client][node.attr]}")
        elif isinstance(node, ast.Constant) and node.value in methods["sagemaker"]:
            actions.add(f"sagemaker:{methods['sagemaker'][node.value]}")
    return actions


@pytest.fixture(scope="module")
def api_statements(full_app: Synthesized) -> list[dict[str, Any]]:
    _, api = function_by_handler(full_app.template("api"), API)
    return _statements(full_app, role_of(api))


@pytest.fixture(scope="module")
def execution_role(full_app: Synthesized) -> tuple[str, list[dict[str, Any]]]:
    """(ARN, statements) of the role SageMaker runs the API's endpoints as."""
    (role_id,) = roles_assumed_by(full_app.resolved("api"), "sagemaker.amazonaws.com")
    return f"arn:aws:iam::{ACCOUNT}:role/{role_id}", _statements(full_app, role_id)


def test_every_name_the_service_makes_has_the_granted_prefix() -> None:
    from infra.naming import RUNTIME_ENDPOINT_PREFIX

    endpoint = endpoint_names.endpoint_name("acme", "a-very-long-deployment-name-indeed")
    names = {
        "endpoint": endpoint,
        "endpoint-config": endpoint_names.config_name(endpoint, "f" * 64),
        "model": endpoint_names.model_name(endpoint, "primary", "0" * 64),
    }
    for kind, name in names.items():
        assert name.startswith(RUNTIME_ENDPOINT_PREFIX), (kind, name)


def test_the_api_may_make_every_call_of_the_endpoint_lifecycle_on_sluice_names(
    api_statements: list[dict[str, Any]],
) -> None:
    calls = _calls_of_the_lifecycle()
    assert {
        "sagemaker:CreateEndpoint",
        "sagemaker:CreateInferenceComponent",
        "application-autoscaling:PutScalingPolicy",
        "cloudwatch:PutMetricAlarm",
        "cloudwatch:DeleteAlarms",
        "sns:CreateTopic",
        "sns:DeleteTopic",
    } <= calls
    endpoint = endpoint_names.endpoint_name("acme", "iris")
    component = endpoint_names.component_name(endpoint, "primary")
    resources = {
        "sagemaker": [
            f"{ARN}:endpoint/{endpoint}",
            f"{ARN}:endpoint-config/{endpoint_names.config_name(endpoint, 'ab' * 32)}",
            f"{ARN}:model/{endpoint_names.model_name(endpoint, 'primary', 'cd' * 32)}",
            f"{ARN}:inference-component/{component}",
        ],
        "application-autoscaling": [
            f"arn:aws:application-autoscaling:{REGION}:{ACCOUNT}:scalable-target/056a7d3e2b1f"
        ],
        "cloudwatch": [
            f"arn:aws:cloudwatch:{REGION}:{ACCOUNT}:alarm:{endpoint}-HasBacklogWithoutCapacity",
            f"arn:aws:cloudwatch:{REGION}:{ACCOUNT}:alarm:{component}-NoCapacityInvocationFailures",
        ],
        "sns": [f"arn:aws:sns:{REGION}:{ACCOUNT}:{endpoint}-succeeded"],
    }
    for action in sorted(calls):
        service = action.split(":")[0]
        assert any(_allowed(api_statements, action, r) for r in resources[service]), action
    # Tags travel with the create calls, which needs AddTags (TagResource) on what is created.
    for resource in resources["sagemaker"]:
        assert _allowed(api_statements, "sagemaker:AddTags", resource)
    assert _allowed(api_statements, "sns:TagResource", resources["sns"][0])
    # Other endpoints, components, alarms and topics in the account stay out of reach.
    for action in ("sagemaker:DeleteEndpoint", "sagemaker:UpdateEndpointWeightsAndCapacities"):
        assert not _allowed(api_statements, action, f"{ARN}:endpoint/someone-elses")
    assert not _allowed(api_statements, "sagemaker:DeleteInferenceComponent", f"{ARN}:inference-component/someone-elses")
    assert not _allowed(api_statements, "cloudwatch:DeleteAlarms", f"arn:aws:cloudwatch:{REGION}:{ACCOUNT}:alarm:someone-elses")
    # Nor the stacks' own alarms, which CloudFormation names after them (`sluice-observability-…`).
    for theirs in ("sluice-observability-ApiErrors5xxA1B2C3-1XYZ", "sluice-endpoints-ResnetHasBacklogAlarm-2ABC"):
        for action in ("cloudwatch:DeleteAlarms", "cloudwatch:PutMetricAlarm"):
            assert not _allowed(api_statements, action, f"arn:aws:cloudwatch:{REGION}:{ACCOUNT}:alarm:{theirs}"), (action, theirs)
    assert not _allowed(api_statements, "sns:DeleteTopic", f"arn:aws:sns:{REGION}:{ACCOUNT}:someone-elses")
    # The operator's own endpoint (infra/sluice.yaml's) shares the prefix: the API may invoke and
    # re-weight it, never replace, retag or delete it, nor touch its scaling alarms.
    reserved = f"{ARN}:endpoint/sluice-resnet"
    assert _allowed(api_statements, "sagemaker:UpdateEndpointWeightsAndCapacities", reserved)
    for action in ("sagemaker:DeleteEndpoint", "sagemaker:UpdateEndpoint", "sagemaker:CreateEndpoint", "sagemaker:AddTags", "sagemaker:DeleteTags"):
        assert not _allowed(api_statements, action, reserved), action
        assert _allowed(api_statements, action, f"{ARN}:endpoint/{endpoint}"), action  # a run-time one's still
    scaling_alarm = f"arn:aws:cloudwatch:{REGION}:{ACCOUNT}:alarm:TargetTracking-endpoint/sluice-resnet/variant/primary-AlarmHigh-1f2e"
    assert not _allowed(api_statements, "cloudwatch:DeleteAlarms", scaling_alarm)
    assert _allowed(api_statements, "cloudwatch:DeleteAlarms", f"arn:aws:cloudwatch:{REGION}:{ACCOUNT}:alarm:TargetTracking-endpoint/{endpoint}/variant/primary-AlarmHigh-1f2e")
    # The operator's alarm topic shares the prefix, not the suffix: the API cannot delete it.
    for action in ("sns:DeleteTopic", "sns:SetTopicAttributes"):
        assert not _allowed(api_statements, action, f"arn:aws:sns:{REGION}:{ACCOUNT}:sluice-alarms")


def test_the_config_file_s_inference_components_and_their_alarms_are_out_of_reach(
    full_app: Synthesized, api_statements: list[dict[str, Any]]
) -> None:
    """An endpoint of the config file with `inference_components` runs its model as a component
    of its own (`sluice-<endpoint>-<variant>`): the API may not delete, retag or replace it, nor
    its target-tracking alarms, while a run-time component's, even one of a tenant and a
    deployment named like it, stay in reach."""
    from infra.naming import inference_component

    alarm = f"arn:aws:cloudwatch:{REGION}:{ACCOUNT}:alarm:TargetTracking-inference-component/{{}}-AlarmHigh-1f2e"
    (ranker,) = [e for e in full_app.config.endpoints if e.inference_components is not None]
    reserved = inference_component(f"sluice-{ranker.name}", ranker.variants[0].name)
    lookalike = endpoint_names.endpoint_name(ranker.name, ranker.variants[0].name)  # sluice-ranker-primary-<digest>
    component = endpoint_names.component_name(lookalike, "primary")
    for action in ("sagemaker:CreateInferenceComponent", "sagemaker:DeleteInferenceComponent", "sagemaker:AddTags", "sagemaker:DeleteTags"):
        assert not _allowed(api_statements, action, f"{ARN}:inference-component/{reserved}"), action
        assert _allowed(api_statements, action, f"{ARN}:inference-component/{component}"), action
    assert _allowed(api_statements, "cloudwatch:DeleteAlarms", alarm.format(component))
    for action in ("cloudwatch:DeleteAlarms", "cloudwatch:PutMetricAlarm"):
        assert not _allowed(api_statements, action, alarm.format(reserved)), action
        assert not _allowed(api_statements, action, alarm.format(reserved).replace("AlarmHigh", "AlarmLow")), action


def test_scaling_writes_are_limited_to_sagemaker_variants_and_components(full_app: Synthesized) -> None:
    from aws_cdk.assertions import Match
    from infra.naming import RUNTIME_ENDPOINT_PREFIX

    assert_role_policy_has(
        full_app,
        "api",
        API,
        [
            Match.object_like(
                {
                    "Action": Match.array_with(
                        [
                            "application-autoscaling:PutScalingPolicy",
                            "application-autoscaling:RegisterScalableTarget",
                        ]
                    ),
                    "Condition": {
                        "StringEquals": {
                            "application-autoscaling:service-namespace": "sagemaker",
                            "application-autoscaling:scalable-dimension": [
                                "sagemaker:variant:DesiredInstanceCount",
                                "sagemaker:inference-component:DesiredCopyCount",
                            ],
                        }
                    },
                }
            ),
            Match.object_like(
                {
                    "Action": Match.array_with(
                        ["cloudwatch:DeleteAlarms", "cloudwatch:PutMetricAlarm"]
                    ),
                    "Resource": [
                        f"arn:aws:cloudwatch:{REGION}:{ACCOUNT}:alarm:"
                        f"TargetTracking-endpoint/{RUNTIME_ENDPOINT_PREFIX}*",
                        f"arn:aws:cloudwatch:{REGION}:{ACCOUNT}:alarm:"
                        f"TargetTracking-inference-component/{RUNTIME_ENDPOINT_PREFIX}*",
                        f"arn:aws:cloudwatch:{REGION}:{ACCOUNT}:alarm:{RUNTIME_ENDPOINT_PREFIX}*-HasBacklogWithoutCapacity",
                        f"arn:aws:cloudwatch:{REGION}:{ACCOUNT}:alarm:{RUNTIME_ENDPOINT_PREFIX}*-NoCapacityInvocationFailures",
                    ],
                }
            ),
            Match.object_like(
                {
                    "Action": "iam:CreateServiceLinkedRole",
                    "Resource": (
                        f"arn:aws:iam::{ACCOUNT}:role/aws-service-role/"
                        "sagemaker.application-autoscaling.amazonaws.com/"
                        "AWSServiceRoleForApplicationAutoScaling_SageMakerEndpoint"
                    ),
                    "Condition": {
                        "StringEquals": {
                            "iam:AWSServiceName": (
                                "sagemaker.application-autoscaling.amazonaws.com"
                            )
                        }
                    },
                }
            ),
        ],
    )


def test_the_api_passes_the_execution_role_to_sagemaker_only(
    full_app: Synthesized, execution_role: tuple[str, list[dict[str, Any]]]
) -> None:
    from aws_cdk.assertions import Match

    arn, _ = execution_role
    template = full_app.resolved("api")
    template.has_resource_properties(
        "AWS::IAM::Policy",
        {
            "PolicyDocument": {
                "Statement": Match.array_with(
                    [
                        {
                            "Action": "iam:PassRole",
                            "Effect": "Allow",
                            "Resource": arn,
                            "Condition": {
                                "StringEquals": {"iam:PassedToService": "sagemaker.amazonaws.com"}
                            },
                        }
                    ]
                )
            }
        },
    )
    template.has_resource_properties(
        "AWS::Lambda::Function",
        {
            "Handler": API,
            "Environment": {
                "Variables": Match.object_like({"SLUICE_SAGEMAKER_EXECUTION_ROLE_ARN": arn})
            },
        },
    )


def test_the_execution_role_reads_model_archives_pulls_triton_writes_logs_and_async_answers_only(
    execution_role: tuple[str, list[dict[str, Any]]],
) -> None:
    _, statements = execution_role
    granted = {a for s in statements for a in _as_list(s["Action"])}
    assert granted == {
        "s3:GetObject",
        "ecr:GetAuthorizationToken",
        "ecr:BatchGetImage",
        "ecr:GetDownloadUrlForLayer",
        "ecr:BatchCheckLayerAvailability",
        "logs:CreateLogGroup",
        "logs:CreateLogStream",
        "logs:PutLogEvents",
        "logs:DescribeLogStreams",
        "cloudwatch:PutMetricData",
        "s3:PutObject",
        "sns:Publish",
    }
    # The model.tar.gz the API builds lands at the store's content-addressed key.
    archive = f"arn:aws:s3:::{ARTIFACTS}/artifacts/" + artifact_key("acme", "ab" * 32, ".tar.gz")
    onnx = f"arn:aws:s3:::{ARTIFACTS}/artifacts/" + artifact_key("acme", "ab" * 32, ".onnx")
    assert _allowed(statements, "s3:GetObject", archive)
    assert not _allowed(statements, "s3:GetObject", onnx)
    assert not _allowed(statements, "s3:PutObject", archive)
    # Asynchronous inference: inputs read, answers and errors written under the results only.
    results = f"arn:aws:s3:::{ARTIFACTS}/artifacts/results/tenants/acme/"
    for key in ("0123abcd/input", "sagemaker/0123abcd.out", "sagemaker-errors/0123abcd-error.out"):
        assert _allowed(statements, "s3:GetObject", results + key) and _allowed(statements, "s3:PutObject", results + key)
    # A body a client uploaded is the request's InputLocation as it lies: read, never written.
    uploaded = f"arn:aws:s3:::{ARTIFACTS}/artifacts/uploads/tenants/acme/{'0' * 32}/body"
    assert _allowed(statements, "s3:GetObject", uploaded) and not _allowed(statements, "s3:PutObject", uploaded)
    endpoint = endpoint_names.endpoint_name("acme", "iris")
    assert _allowed(statements, "sns:Publish", f"arn:aws:sns:{REGION}:{ACCOUNT}:{endpoint}-succeeded")
    assert not _allowed(statements, "sns:Publish", f"arn:aws:sns:{REGION}:{ACCOUNT}:someone-elses")
    assert not _allowed(statements, "sns:Publish", f"arn:aws:sns:{REGION}:{ACCOUNT}:sluice-alarms")
    # The image the service picks for a new endpoint is one the role may pull.
    image = triton_image_uri(REGION, instance_type="ml.g5.xlarge", version="25.09", use_sdk=False)
    registry, repository = image.split(":")[0].split("/", 1)
    repository_arn = f"arn:aws:ecr:{REGION}:{registry.split('.')[0]}:repository/{repository}"
    assert _allowed(statements, "ecr:BatchGetImage", repository_arn)
    endpoint = endpoint_names.endpoint_name("acme", "iris")
    log_stream = (
        f"arn:aws:logs:{REGION}:{ACCOUNT}:log-group:/aws/sagemaker/Endpoints/{endpoint}"
        ":log-stream:primary/i-0123"
    )
    assert _allowed(statements, "logs:PutLogEvents", log_stream)
    (metrics,) = [s for s in statements if s["Action"] == "cloudwatch:PutMetricData"]
    assert metrics["Condition"] == {
        "StringEquals": {"cloudwatch:namespace": "/aws/sagemaker/Endpoints"}
    }


@pytest.mark.parametrize("handler", [API, "sluice.handlers.shadow.handler"])
def test_the_api_and_shadow_may_invoke_every_sluice_endpoint(
    full_app: Synthesized, handler: str
) -> None:
    _, function = function_by_handler(full_app.template("api"), handler)
    statements = _statements(full_app, role_of(function))
    for endpoint in (endpoint_names.endpoint_name("acme", "iris"), "sluice-resnet"):
        assert _allowed(statements, "sagemaker:InvokeEndpoint", f"{ARN}:endpoint/{endpoint}")
    assert not _allowed(statements, "sagemaker:InvokeEndpoint", f"{ARN}:endpoint/other")


def test_batch_score_may_invoke_every_sluice_endpoint(full_app: Synthesized) -> None:
    from aws_cdk.assertions import Match
    from infra.naming import RUNTIME_ENDPOINT_PREFIX

    assert_role_policy_has(
        full_app,
        "batch",
        "sluice.handlers.batch.score",
        [
            Match.object_like(
                {
                    "Action": "sagemaker:InvokeEndpoint",
                    "Resource": f"{ARN}:endpoint/{RUNTIME_ENDPOINT_PREFIX}*",
                }
            )
        ],
    )


def test_endpoints_of_an_app_with_another_name_are_granted_as_well() -> None:
    from aws_cdk import App, Stack
    from aws_cdk import aws_iam as iam
    from aws_cdk.assertions import Match, Template
    from constructs import Construct
    from infra.constructs.grants import grant_invoke_endpoints

    class RoleHolder(Construct):
        """What grants are given to: a construct with a role of its own, as a function is."""

        def __init__(self, scope: Construct, id: str) -> None:
            super().__init__(scope, id)
            self.role = iam.Role(self, "Role", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"))

    stack = Stack(App(), "Grants")
    grant_invoke_endpoints(RoleHolder(stack, "Function"), ["prod-resnet", "sluice-bert"])  # type: ignore[arg-type]
    Template.from_stack(stack).has_resource_properties(
        "AWS::IAM::Policy",
        {
            "PolicyDocument": {
                "Statement": [
                    Match.object_like(
                        {
                            "Action": "sagemaker:InvokeEndpoint",
                            "Resource": [
                                Match.object_like(
                                    {"Fn::Join": ["", Match.array_with([":endpoint/sluice-*"])]}
                                ),
                                Match.object_like(
                                    {"Fn::Join": ["", Match.array_with([":endpoint/prod-resnet"])]}
                                ),
                            ],
                        }
                    )
                ]
            }
        },
    )
