"""SageMaker Model Registry's approvals on AWS: an EventBridge rule sends approvals and
rejections of model packages to the registry event function, whose role may describe model
packages and read the configured model data buckets, and nothing else of SageMaker or S3."""

from __future__ import annotations

import json
from typing import Any

import pytest
from infra.config import SluiceConfig
from pydantic import ValidationError

from tests.infra.synth import (
    ACCOUNT,
    MLFLOW_KMS_KEY_ARN,
    MLFLOW_SECRET_ARN,
    REGION,
    Synthesized,
    as_list,
    function_arn,
    function_by_handler,
    policy_statements_of_role,
    properties,
    schedule_invoking,
    statements_of_function,
)

HANDLER = "sluice.handlers.registry_events.handler"
API_HANDLER = "sluice.handlers.api.handler"


def _statements(app: Synthesized) -> list[dict[str, Any]]:
    return statements_of_function(app, HANDLER)


def _actions(statement: dict[str, Any]) -> list[str]:
    return as_list(statement["Action"])


def test_approvals_and_rejections_of_model_packages_invoke_the_function(full_app: Synthesized) -> None:
    template = full_app.resolved("api")
    _, function = function_by_handler(full_app.template("api"), HANDLER)
    rules = [r for r in properties(template, "AWS::Events::Rule") if r["EventPattern"].get("source") == ["aws.sagemaker"]]
    assert [r["EventPattern"] for r in rules] == [
        {
            "source": ["aws.sagemaker"],
            "detail-type": ["SageMaker Model Package State Change"],
            "detail": {"ModelApprovalStatus": ["Approved", "Rejected", "PendingManualApproval"]},  # pending: a return told from an update
        }
    ]
    [target] = rules[0]["Targets"]
    assert function["FunctionName"] in str(target["Arn"])
    assert target["RetryPolicy"] == {"MaximumRetryAttempts": 2, "MaximumEventAgeInSeconds": 3600}
    # What EventBridge could not deliver: a queue under a key of its own, which EventBridge may
    # use (the AWS-managed aws/sqs key's policy names no service), rotated.
    queue_id = target["DeadLetterConfig"]["Arn"]["Fn::GetAtt"][0]
    queue = template.find_resources("AWS::SQS::Queue")[queue_id]["Properties"]
    key_id = queue["KmsMasterKeyId"]["Fn::GetAtt"][0]
    key = template.find_resources("AWS::KMS::Key")[key_id]["Properties"]
    assert key["EnableKeyRotation"] is True
    (events_use,) = [s for s in key["KeyPolicy"]["Statement"] if s["Principal"] == {"Service": "events.amazonaws.com"}]
    assert set(events_use["Action"]) == {"kms:GenerateDataKey", "kms:Decrypt"}


def test_an_event_that_fails_its_invocation_is_delivered_again_then_kept(full_app: Synthesized) -> None:
    """An approval some binding could not claim for other writes fails the invocation: Lambda
    invokes the function again with it, twice, then keeps it in the function's dead-letter queue."""
    template = full_app.resolved("api")
    function_id, function = function_by_handler(full_app.template("api"), HANDLER)
    assert "TargetArn" in function["DeadLetterConfig"]
    # Lambda's own retries of an asynchronous invocation (twice), which no EventInvokeConfig lowers
    assert not [c for c in properties(template, "AWS::Lambda::EventInvokeConfig") if function_id in json.dumps(c["FunctionName"])]


def test_the_function_may_describe_the_followed_groups_packages_and_read_the_model_data_locations_only(full_app: Synthesized) -> None:
    from infra.naming import STORE_PREFIX

    statements = _statements(full_app)
    sagemaker = [s for s in statements if any(a.startswith("sagemaker:") for a in _actions(s))]
    packages = f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:model-package"
    # Each group some tenant may follow, as given and in lower case (how ARNs may spell it).
    assert {a for s in sagemaker for a in _actions(s)} == {"sagemaker:DescribeModelPackage"}
    assert sorted(r for s in sagemaker for r in as_list(s["Resource"])) == [
        f"{packages}/{group}/*" for group in ("Churn-Model", "churn-model", "fraud")
    ]
    # beta's location is given without its last `/`: granted with it, so no key of `beta/models-other/` is.
    model_data = ["arn:aws:s3:::acme-model-data/*", "arn:aws:s3:::shared-ml/acme/*", "arn:aws:s3:::shared-ml/beta/models/*"]
    reads = [s for s in statements if _actions(s) == ["s3:GetObject"]]
    assert sorted(r for s in reads for r in as_list(s["Resource"])) == model_data
    # Objects elsewhere: the store's own prefix in the artifacts bucket alone.
    objects = {
        r for st in statements if any(a.startswith("s3:") and a != "s3:ListBucket" for a in _actions(st))
        for r in (st["Resource"] if isinstance(st["Resource"], list) else [st["Resource"]])
    }  # fmt: skip
    others = objects - set(model_data)
    assert len(others) == 1 and str(others.pop()).endswith(f"/{STORE_PREFIX}*")


def test_a_tenant_reads_only_its_own_model_data_locations_and_groups(full_app: Synthesized) -> None:
    """The grants are the union of the tenants' (IAM cannot tell tenants apart here): the function
    is told which tenant may read which, and checks."""
    _, function = function_by_handler(full_app.template("api"), HANDLER)
    variables = function["Environment"]["Variables"]
    assert json.loads(variables["SLUICE_MODEL_DATA_LOCATIONS"]) == {
        "acme": ["s3://acme-model-data/", "s3://shared-ml/acme/"], "beta": ["s3://shared-ml/beta/models"]
    }  # fmt: skip
    assert json.loads(variables["SLUICE_FOLLOW_PACKAGE_GROUPS"]) == {"acme": ["fraud", "Churn-Model"], "beta": ["fraud"]}


def test_model_data_buckets_is_refused_with_where_it_went() -> None:
    with pytest.raises(ValidationError, match=r"api\.model_data_buckets is now per tenant: list each tenant's S3 prefixes"):
        SluiceConfig.model_validate({"api": {"model_data_buckets": ["shared-ml"]}})
    for bad in ({"model_data_locations": {"acme": ["s3://Shared_ML/acme/"]}}, {"model_data_locations": {"acme": ["shared-ml/acme/"]}},
                {"follow_package_groups": {"acme": ["a/b"]}}, {"follow_package_groups": {"../x": ["fraud"]}}):  # fmt: skip
        with pytest.raises(ValidationError):
            SluiceConfig.model_validate({"api": bad})


# MLflow followed on AWS: the same function polls on a schedule ------------------------------
def _function_arn(app: Synthesized) -> str:
    return function_arn(app, HANDLER)


def test_a_schedule_invokes_the_function_to_poll_with_a_role_that_may_do_nothing_else(full_app: Synthesized) -> None:
    template = full_app.resolved("api")
    schedule = schedule_invoking(full_app, HANDLER)
    assert schedule["ScheduleExpression"] == "rate(2 minutes)" and schedule["State"] == "ENABLED"
    assert json.loads(schedule["Target"]["Input"]) == {"poll": "follows"}
    assert schedule["Target"]["RetryPolicy"] == {"MaximumRetryAttempts": 0, "MaximumEventAgeInSeconds": 120}
    role_id = schedule["Target"]["RoleArn"].rsplit("/", 1)[-1]
    [trust] = template.find_resources("AWS::IAM::Role")[role_id]["Properties"]["AssumeRolePolicyDocument"]["Statement"]
    assert trust["Principal"] == {"Service": "scheduler.amazonaws.com"}
    assert policy_statements_of_role(template, role_id) == [
        {"Action": "lambda:InvokeFunction", "Effect": "Allow", "Resource": _function_arn(full_app)}
    ]


def test_the_function_may_read_the_configured_mlflow_secrets_and_no_other(full_app: Synthesized) -> None:
    secrets = [s for s in _statements(full_app) if any(a.startswith("secretsmanager:") for a in _actions(s))]
    assert all(_actions(s) == ["secretsmanager:GetSecretValue"] for s in secrets)
    resources = sorted(r for s in secrets for r in (s["Resource"] if isinstance(s["Resource"], list) else [s["Resource"]]))
    # A secret named: its ARN with any six-character suffix (what Secrets Manager appends); one given by ARN: that ARN.
    assert resources == [f"arn:aws:secretsmanager:{REGION}:{ACCOUNT}:secret:mlflow/acme-??????", MLFLOW_SECRET_ARN]
    # No other function may read them.
    template = full_app.resolved("api")
    readers = [
        p for p in properties(template, "AWS::IAM::Policy")
        if any("secretsmanager:GetSecretValue" in _actions(s) for s in p["PolicyDocument"]["Statement"])
    ]  # fmt: skip
    assert len(readers) == 1


def test_the_function_may_decrypt_the_secrets_key_through_secrets_manager_for_those_secrets_alone(full_app: Synthesized) -> None:
    decrypts = [s for s in _statements(full_app) if any(a.startswith("kms:") for a in _actions(s))]
    assert decrypts == [
        {
            "Action": "kms:Decrypt",
            "Effect": "Allow",
            "Resource": MLFLOW_KMS_KEY_ARN,
            "Condition": {
                "StringEquals": {"kms:ViaService": f"secretsmanager.{REGION}.amazonaws.com"},
                "StringLike": {
                    "kms:EncryptionContext:SecretARN": [f"arn:aws:secretsmanager:{REGION}:{ACCOUNT}:secret:mlflow/acme-??????", MLFLOW_SECRET_ARN]
                },
            },
        }
    ]
    # No other function may use the key.
    template = full_app.resolved("api")
    users = [p for p in properties(template, "AWS::IAM::Policy") if MLFLOW_KMS_KEY_ARN in json.dumps(p["PolicyDocument"])]
    assert len(users) == 1


def test_the_function_alone_has_pyyaml_for_mlmodel_files(full_app: Synthesized) -> None:
    template = full_app.template("api")
    layers = {k for k, v in template.find_resources("AWS::Lambda::LayerVersion").items() if v["Properties"]["Description"] == "sluice registry event dependencies"}
    assert len(layers) == 1
    carriers = [f for f in template.find_resources("AWS::Lambda::Function").values() if {"Ref": next(iter(layers))} in f["Properties"].get("Layers", [])]
    assert [f["Properties"]["Handler"] for f in carriers] == [HANDLER]


def test_the_poll_is_told_the_servers_and_secrets_and_the_api_the_servers_alone(full_app: Synthesized) -> None:
    template = full_app.template("api")
    _, function = function_by_handler(template, HANDLER)
    variables = function["Environment"]["Variables"]
    assert json.loads(variables["SLUICE_MLFLOW_TRACKING_SERVERS"]) == ["https://mlflow.example.com"]
    assert json.loads(variables["SLUICE_MLFLOW_CREDENTIALS_SECRETS"]) == {"acme": "mlflow/acme", "beta": MLFLOW_SECRET_ARN}
    _, api = function_by_handler(template, API_HANDLER)
    assert json.loads(api["Environment"]["Variables"]["SLUICE_MLFLOW_TRACKING_SERVERS"]) == ["https://mlflow.example.com"]
    assert json.loads(api["Environment"]["Variables"]["SLUICE_FOLLOW_PACKAGE_GROUPS"]) == {"acme": ["fraud", "Churn-Model"], "beta": ["fraud"]}
    # Both functions that check a binding's group know the stack's own account and region.
    resolved = full_app.resolved("api")
    for handler in (API_HANDLER, HANDLER):
        told = function_by_handler(resolved, handler)[1]["Environment"]["Variables"]["SLUICE_FOLLOW_GROUP_ARN_PREFIX"]
        assert told == f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:model-package-group/"
    assert "SLUICE_MLFLOW_CREDENTIALS_SECRETS" not in api["Environment"]["Variables"]
    assert "SLUICE_MODEL_DATA_LOCATIONS" not in api["Environment"]["Variables"]
