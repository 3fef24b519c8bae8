"""The API: REST API -> API function, behind the key authorizer, metered per tenant."""

from __future__ import annotations

import json
from fnmatch import fnmatchcase
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from tests.infra.synth import (
    ACCOUNT,
    REGION,
    Synthesized,
    assert_role_policy_has,
    function_by_handler,
    policy_statements_of_role,
    properties,
    role_of,
)

if TYPE_CHECKING:
    from aws_cdk.assertions import Template

API = "sluice.handlers.api.handler"
AUTHORIZER = "sluice.handlers.authorizer.handler"
SHADOW = "sluice.handlers.shadow.handler"


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def test_rest_api_takes_usage_keys_from_the_authorizer(full_app: Synthesized) -> None:
    template = full_app.template("api")
    template.has_resource_properties(
        "AWS::ApiGateway::RestApi",
        {
            "Name": "sluice-api",
            "ApiKeySourceType": "AUTHORIZER",
            "EndpointConfiguration": {"Types": ["REGIONAL"]},
        },
    )


def _console_resources(template: Any) -> set[str]:
    """The `/console` resource and its `{proxy+}` child: the console's static files."""
    resources = template.find_resources("AWS::ApiGateway::Resource")
    console = {rid for rid, r in resources.items() if r["Properties"]["PathPart"] == "console"}
    return console | {rid for rid, r in resources.items() if r["Properties"]["ParentId"] in [{"Ref": c} for c in console]}


def test_every_method_needs_the_authorizer_and_a_usage_key(full_app: Synthesized) -> None:
    template = full_app.template("api")
    (authorizer_id,) = template.find_resources("AWS::ApiGateway::Authorizer")
    console = _console_resources(template)
    methods = [m for m in properties(template, "AWS::ApiGateway::Method") if m["ResourceId"] not in [{"Ref": c} for c in console]]
    assert methods, "the API has no methods"
    for method in methods:
        assert method["AuthorizationType"] == "CUSTOM"
        assert method["AuthorizerId"] == {"Ref": authorizer_id}
        assert method["ApiKeyRequired"] is True
        assert method["Integration"]["Type"] == "AWS_PROXY"
        assert method["Integration"]["TimeoutInMillis"] == 29000


def test_only_the_consoles_static_files_are_public_and_only_to_get(full_app: Synthesized) -> None:
    template = full_app.template("api")
    console = _console_resources(template)
    assert len(console) == 2
    public = [m for m in properties(template, "AWS::ApiGateway::Method") if m["AuthorizationType"] == "NONE"]
    assert len(public) == 2
    for method in public:
        assert method["HttpMethod"] == "GET" and method["ApiKeyRequired"] is False
        assert method["ResourceId"] in [{"Ref": c} for c in console]
        assert method["Integration"]["Type"] == "AWS_PROXY"


def test_authorizer_is_the_request_authorizer_function_without_gateway_cache(
    full_app: Synthesized,
) -> None:
    template = full_app.template("api")
    function_id, _ = function_by_handler(template, AUTHORIZER)
    (authorizer,) = properties(template, "AWS::ApiGateway::Authorizer")
    assert authorizer["Type"] == "REQUEST"
    assert authorizer["AuthorizerResultTtlInSeconds"] == 0
    assert {"Fn::GetAtt": [function_id, "Arn"]} in authorizer["AuthorizerUri"]["Fn::Join"][1]


def test_stage_traces_throttles_and_writes_json_access_logs(full_app: Synthesized) -> None:
    template = full_app.template("api")
    (stage,) = properties(template, "AWS::ApiGateway::Stage")
    assert stage["StageName"] == "v1"
    assert stage["TracingEnabled"] is True
    assert {
        "HttpMethod": "*",
        "ResourcePath": "/*",
        "ThrottlingRateLimit": 300,
        "ThrottlingBurstLimit": 600,
    }.items() <= stage["MethodSettings"][0].items()
    access_log = json.loads(stage["AccessLogSetting"]["Format"])
    assert access_log["tenant"] == "$context.authorizer.tenant"
    assert access_log["status"] == "$context.status"
    template.has_resource_properties("AWS::Logs::LogGroup", {"RetentionInDays": 30})


def test_usage_plans_meter_each_configured_tenant_and_everyone_else(full_app: Synthesized) -> None:
    from aws_cdk.assertions import Match

    template = full_app.template("api")
    template.resource_count_is("AWS::ApiGateway::UsagePlan", 2)
    template.has_resource_properties(
        "AWS::ApiGateway::UsagePlan",
        {
            "UsagePlanName": "sluice-acme",
            "Throttle": {"RateLimit": 20, "BurstLimit": 40},
            "Quota": {"Limit": 100000, "Period": "MONTH"},
        },
    )
    template.has_resource_properties(
        "AWS::ApiGateway::UsagePlan",
        {
            "UsagePlanName": "sluice-_default",
            "Throttle": {"RateLimit": 50, "BurstLimit": 100},
            "Quota": Match.absent(),
        },
    )
    # The authorizer names these key values; they only select a plan.
    values = {key["Value"] for key in properties(template, "AWS::ApiGateway::ApiKey")}
    assert values == {"sluice-api-usage-plan-key-acme", "sluice-api-usage-plan-key-_default"}
    template.resource_count_is("AWS::ApiGateway::UsagePlanKey", 2)
    _, authorizer = function_by_handler(template, AUTHORIZER)
    assert (
        authorizer["Environment"]["Variables"]["SLUICE_USAGE_KEY_PREFIX"]
        == "sluice-api-usage-plan-key-"
    )
    assert authorizer["Environment"]["Variables"]["SLUICE_USAGE_TENANTS"] == "acme"


def test_gateway_errors_use_the_api_error_shape(full_app: Synthesized) -> None:
    template = full_app.template("api")
    responses = {
        r["ResponseType"]: r for r in properties(template, "AWS::ApiGateway::GatewayResponse")
    }
    assert responses["ACCESS_DENIED"]["StatusCode"] == "401"
    assert responses["THROTTLED"]["StatusCode"] == "429"
    assert (
        '"error":"quota_exceeded"'
        in responses["QUOTA_EXCEEDED"]["ResponseTemplates"]["application/json"]
    )


def test_functions_get_the_runtime_settings(full_app: Synthesized) -> None:
    template = full_app.template("api")
    shadow_id, _ = function_by_handler(template, SHADOW)
    for handler in (API, AUTHORIZER, SHADOW):
        _, function = function_by_handler(template, handler)
        assert function["Runtime"] == "python3.13"  # the default: DataSketches has wheels for it
        assert function["TracingConfig"] == {"Mode": "Active"}
        variables = function["Environment"]["Variables"]
        assert variables["SLUICE_MODE"] == "aws"
        assert variables["SLUICE_REGISTRY"] == "dynamodb://sluice-registry"
        assert variables["SLUICE_STORE"]["Fn::Join"][1][0] == "s3://sluice-artifacts-"
        assert variables["SLUICE_STORE"]["Fn::Join"][1][-1] == "/artifacts"
        assert variables["POWERTOOLS_METRICS_NAMESPACE"] == "sluice"
        assert variables["POWERTOOLS_SERVICE_NAME"] == "sluice"
        assert variables["LOG_LEVEL"] == "INFO"
    _, api = function_by_handler(template, API)
    variables = api["Environment"]["Variables"]
    assert variables["SLUICE_MIRROR"] == {"Fn::Join": ["", ["lambda://", {"Ref": shadow_id}, ":live"]]}
    orchestrator = variables["SLUICE_ORCHESTRATOR"]["Fn::Join"][1]
    assert (
        orchestrator[0] == "stepfunctions://arn:"
        and orchestrator[-1] == ":stateMachine:sluice-batch"
    )
    assert variables["SLUICE_BATCH_BUCKET"]["Fn::Join"][1][0] == "sluice-batch-"
    assert api["Timeout"] == 30


def test_api_role_may_invoke_the_shadow_function_and_sluice_endpoints_only(
    full_app: Synthesized,
) -> None:
    template = full_app.template("api")
    shadow_id, _ = function_by_handler(template, SHADOW)
    _, api = function_by_handler(template, API)
    statements = policy_statements_of_role(template, role_of(api))
    invoke = [s for s in statements if s["Action"] == "lambda:InvokeFunction" and "Sid" not in s]  # function steps: test_function_step_grants
    # The shadow function's `live` alias (SnapStart runs published versions only).
    assert invoke == [
        {
            "Action": "lambda:InvokeFunction",
            "Effect": "Allow",
            "Resource": {"Ref": live_alias_of(template, shadow_id)},
        }
    ]
    (sagemaker,) = [s for s in statements if s["Action"] == "sagemaker:InvokeEndpoint"]
    # sluice-* covers the config file's sluice-resnet and the endpoints the API deploys.
    assert sagemaker["Resource"]["Fn::Join"][1][-1] == ":endpoint/sluice-*"
    (start,) = [s for s in statements if s["Action"] == "states:StartExecution"]
    assert start["Resource"]["Fn::Join"][1][-1] == ":stateMachine:sluice-batch"
    (stop,) = [s for s in statements if "states:StopExecution" in _as_list(s["Action"])]
    assert sorted(stop["Action"]) == ["states:DescribeExecution", "states:StopExecution"]
    assert stop["Resource"]["Fn::Join"][1][-1] == ":execution:sluice-batch:*"
    writes = [s for s in statements if "s3:PutObject" in _as_list(s["Action"])]
    assert [w["Resource"]["Fn::Join"][1][-1] for w in writes] == ["/artifacts/*"]


def test_api_role_may_start_batch_executions_and_stop_and_describe_those_it_started(
    default_app: Synthesized,
) -> None:
    from aws_cdk.assertions import Match

    from sluice.batch.orchestrators import StepFunctionsOrchestrator

    machine = f"arn:aws:states:{REGION}:{ACCOUNT}:stateMachine:sluice-batch"
    executions = f"arn:aws:states:{REGION}:{ACCOUNT}:execution:sluice-batch:*"
    assert_role_policy_has(
        default_app,
        "api",
        API,
        [
            Match.object_like({"Action": "states:StartExecution", "Resource": machine}),
            Match.object_like(
                {"Action": ["states:DescribeExecution", "states:StopExecution"], "Resource": executions}
            ),
        ],
    )
    # Cancelling stops the execution the orchestrator named after the job.
    job = SimpleNamespace(id="01JB2Z6Y4XKQ3V7T9M8N5P0R1S", execution=None)
    assert fnmatchcase(StepFunctionsOrchestrator(machine).execution_arn(job), executions)


def test_onnx_uploads_reach_the_function_as_binary(full_app: Synthesized) -> None:
    from aws_cdk.assertions import Match

    from sluice.api.routers.models import ONNX_BODY

    # Every non-JSON body POST /api/v1/models/{name}/versions takes, and application/onnx,
    # which it takes too: API Gateway passes them base64-encoded instead of as text.
    uploads = {t for t in ONNX_BODY["requestBody"]["content"] if t != "application/json"}
    assert uploads == {"application/octet-stream"}
    template = full_app.template("api")
    template.has_resource_properties(
        "AWS::ApiGateway::RestApi",
        {"BinaryMediaTypes": Match.array_with(sorted(uploads | {"application/onnx"}))},
    )
    # Triton's binary+json is spoken between sluice and SageMaker, never by API callers.
    template.has_resource_properties(
        "AWS::ApiGateway::RestApi",
        {
            "BinaryMediaTypes": Match.not_(
                Match.array_with([Match.string_like_regexp("sagemaker-triton")])
            )
        },
    )


def test_every_body_reaches_the_function_unmangled(full_app: Synthesized) -> None:
    # v2 binary tensors come from tritonclient with no Content-Type (the sync client) or
    # application/octet-stream (the asyncio one): only */* keeps both byte for byte.
    from aws_cdk.assertions import Match

    full_app.template("api").has_resource_properties(
        "AWS::ApiGateway::RestApi", {"BinaryMediaTypes": Match.array_with(["*/*"])}
    )


def test_authorizer_can_only_read_the_registry(full_app: Synthesized) -> None:
    template = full_app.template("api")
    _, authorizer = function_by_handler(template, AUTHORIZER)
    actions = {
        a
        for s in policy_statements_of_role(template, role_of(authorizer))
        for a in _as_list(s["Action"])
    }
    assert "dynamodb:GetItem" in actions
    assert not {"dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem"} & actions
    assert not any(a.startswith(("s3:", "lambda:", "sagemaker:")) for a in actions)


def test_no_policy_grants_a_wildcard_action(full_app: Synthesized) -> None:
    for component in ("api", "batch", "endpoints"):
        template = full_app.template(component)
        for policy in properties(template, "AWS::IAM::Policy"):
            for statement in policy["PolicyDocument"]["Statement"]:
                for action in _as_list(statement["Action"]):
                    assert "*" not in action, f"{component}: {action}"


def test_shadow_function_is_invoked_async_with_a_dead_letter_queue(full_app: Synthesized) -> None:
    template = full_app.template("api")
    _, shadow = function_by_handler(template, SHADOW)
    queue_id = shadow["DeadLetterConfig"]["TargetArn"]["Fn::GetAtt"][0]
    assert template.to_json()["Resources"][queue_id]["Type"] == "AWS::SQS::Queue"
    # Encrypted at rest with KMS (the AWS-managed aws/sqs key), TLS only.
    template.has_resource_properties("AWS::SQS::Queue", {"KmsMasterKeyId": "alias/aws/sqs"})


def live_alias_of(template: Template, function_id: str) -> str:
    """The logical id of the function's `live` alias."""
    (alias_id,) = [
        alias_id
        for alias_id, alias in template.find_resources("AWS::Lambda::Alias").items()
        if alias["Properties"]["FunctionName"] == {"Ref": function_id}
        and alias["Properties"]["Name"] == "live"
    ]
    return alias_id


def test_the_api_may_invoke_endpoints_asynchronously_where_it_invokes_them(full_app: Synthesized) -> None:
    statements = [
        s
        for p in properties(full_app.template("api"), "AWS::IAM::Policy")
        for s in p["PolicyDocument"]["Statement"]
    ]
    sync = [s["Resource"] for s in statements if s["Action"] == "sagemaker:InvokeEndpoint"]
    asynchronous = [s["Resource"] for s in statements if s["Action"] == "sagemaker:InvokeEndpointAsync"]
    assert len(asynchronous) == 1 and asynchronous[0] in sync  # the API function only


def test_api_role_manages_schedules_of_its_group_and_passes_the_scheduler_role_only_to_scheduler(
    default_app: Synthesized,
) -> None:
    from sluice.batch.eventbridge import schedule_name

    schedules = f"arn:aws:scheduler:{REGION}:{ACCOUNT}:schedule/sluice-batch/*"
    role = f"arn:aws:iam::{ACCOUNT}:role/sluice-batch-scheduler"
    api = assert_role_policy_has(
        default_app,
        "api",
        API,
        [
            {
                "Action": [
                    "scheduler:CreateSchedule",
                    "scheduler:DeleteSchedule",
                    "scheduler:GetSchedule",
                    "scheduler:UpdateSchedule",
                ],
                "Effect": "Allow",
                "Resource": schedules,
            },
            {
                "Action": "iam:PassRole",
                "Condition": {
                    "StringEquals": {"iam:PassedToService": "scheduler.amazonaws.com"}
                },
                "Effect": "Allow",
                "Resource": role,
            },
        ],
    )
    variables = api["Environment"]["Variables"]
    assert variables["SLUICE_SCHEDULE_GROUP"] == "sluice-batch"
    assert variables["SLUICE_SCHEDULER_ROLE_ARN"]["Fn::Join"][1][-1] == ":role/sluice-batch-scheduler"
    # The schedules the API makes are named so that the grant above covers them.
    assert fnmatchcase(f"arn:aws:scheduler:{REGION}:{ACCOUNT}:schedule/sluice-batch/{schedule_name('acme', 'nightly')}", schedules)
    assert len(schedule_name("t" * 63, "n" * 63)) <= 64


def test_upload_forms_are_signed_by_a_role_that_writes_the_tagged_tenants_uploads_only(
    default_app: Synthesized,
) -> None:
    """The API signs presigned POSTs as the upload signer role, assumed per tenant with the
    `tenant` session tag: PutObject under that tenant's uploads prefix, nothing else."""
    template = default_app.template("api")
    _, api = function_by_handler(template, API)
    signer = api["Environment"]["Variables"]["SLUICE_UPLOAD_SIGNER_ROLE_ARN"]["Fn::GetAtt"][0]
    (statement,) = policy_statements_of_role(template, signer)
    assert statement["Action"] == "s3:PutObject"
    assert statement["Resource"]["Fn::Join"][1][-1] == "/artifacts/uploads/tenants/${aws:PrincipalTag/tenant}/*"
    trust = template.to_json()["Resources"][signer]["Properties"]["AssumeRolePolicyDocument"]
    (allow,) = trust["Statement"]
    assert allow["Principal"] == {"AWS": {"Fn::GetAtt": [role_of(api), "Arn"]}}
    assert allow["Condition"]["ForAllValues:StringEquals"] == {"aws:TagKeys": ["tenant"]}
    assert allow["Condition"]["StringNotLike"] == {"aws:RequestTag/tenant": ["*${*}*", "*${?}*"]}
    (assume,) = [
        s
        for s in policy_statements_of_role(template, role_of(api))
        if {"Fn::GetAtt": [signer, "Arn"]} in _as_list(s.get("Resource"))
    ]
    assert sorted(assume["Action"]) == ["sts:AssumeRole", "sts:TagSession"]
    assert assume["Resource"] == {"Fn::GetAtt": [signer, "Arn"]}


def test_the_shadow_function_may_delete_the_bodies_it_was_handed_and_no_artifact(full_app: Synthesized) -> None:
    """A shadow job too large for an async invoke comes as a stored body, which the shadow
    function deletes once compared (its delete was refused, so each retry counted the comparison
    again until the job went to the dead-letter queue); it may delete such bodies alone."""
    from fnmatch import fnmatchcase

    from tests.infra.synth import statements_of_function

    def may_delete(key: str) -> bool:
        return any(
            s.get("Effect", "Allow") == "Allow" and "s3:DeleteObject" in _as_list(s["Action"])
            and any(fnmatchcase(f"arn:aws:s3:::bucket/{key}", str(r).replace(str(r).split(":::")[1].split("/")[0], "bucket", 1)) for r in _as_list(s["Resource"]) if ":::" in str(r))
            for s in statements_of_function(full_app, SHADOW)
        )  # fmt: skip

    assert may_delete("artifacts/tenants/acme/sha256/0f3a.shadow.json")
    assert not may_delete("artifacts/tenants/acme/sha256/0f3a.onnx")
    assert not may_delete("artifacts/tenants/acme/sha256/0f3a")
