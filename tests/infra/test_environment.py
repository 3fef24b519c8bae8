"""What the functions are told: every `SLUICE_*` variable is a setting the code reads, and the
API function gets all it needs to run on AWS."""

from __future__ import annotations

import json
from typing import Any

import pytest

from sluice.settings import GROUP_OF, Settings
from tests.infra.synth import (
    ACCOUNT,
    COMPONENTS,
    REGION,
    Synthesized,
    assert_role_policy_has,
    roles_assumed_by,
)

PREFIX = "SLUICE_"
API = "sluice.handlers.api.handler"
ARTIFACTS = f"sluice-artifacts-{ACCOUNT}-{REGION}"


def _environments(app: Synthesized) -> list[tuple[str, dict[str, Any]]]:
    """(stack/handler, resolved environment) of every function that has one."""
    from aws_cdk.assertions import Match

    found = []
    for component in COMPONENTS:
        functions = app.resolved(component).find_resources(
            "AWS::Lambda::Function",
            {"Properties": {"Environment": {"Variables": Match.any_value()}}},
        )
        for resource in functions.values():
            props = resource["Properties"]
            found.append((f"{component}/{props['Handler']}", props["Environment"]["Variables"]))
    return found


def _settings_from(variables: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> Settings:
    """Settings as the function builds them from its environment (and nothing else)."""
    import os

    for name in [n for n in os.environ if n.startswith(PREFIX)]:
        monkeypatch.delenv(name)
    for name, value in variables.items():
        assert isinstance(value, str), f"{name} is not resolved to a string: {value}"
        monkeypatch.setenv(name, value)
    return Settings()


@pytest.mark.parametrize("app_name", ["default_app", "full_app"])
def test_every_sluice_variable_is_a_setting(app_name: str, request: pytest.FixtureRequest) -> None:
    app: Synthesized = request.getfixturevalue(app_name)
    environments = _environments(app)
    assert len(environments) >= 8  # api, authorizer, shadow, five batch functions
    fields = set(GROUP_OF)
    for function, variables in environments:
        unknown = [
            name
            for name in variables
            if name.startswith(PREFIX) and name[len(PREFIX) :].lower() not in fields
        ]
        assert not unknown, f"{function} sets {unknown}, which no field of Settings reads"


@pytest.mark.parametrize("app_name", ["default_app", "full_app"])
def test_every_function_environment_makes_valid_settings(
    app_name: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    app: Synthesized = request.getfixturevalue(app_name)
    for function, variables in _environments(app):
        sluice = {k: v for k, v in variables.items() if k.startswith(PREFIX)}
        with monkeypatch.context() as patch:
            settings = _settings_from(sluice, patch)
        assert settings.mode == "aws", function


def test_the_api_function_gets_what_it_needs_on_aws(
    default_app: Synthesized, monkeypatch: pytest.MonkeyPatch
) -> None:
    from aws_cdk.assertions import Match

    template = default_app.resolved("api")
    (execution_role,) = roles_assumed_by(template, "sagemaker.amazonaws.com")
    expected = {
        "SLUICE_MODE": "aws",
        "SLUICE_REGISTRY": "dynamodb://sluice-registry",
        "SLUICE_STORE": f"s3://{ARTIFACTS}/artifacts",
        "SLUICE_MIRROR": "lambda://sluice-shadow:live",  # the SnapStart alias
        "SLUICE_ORCHESTRATOR": f"stepfunctions://arn:aws:states:{REGION}:{ACCOUNT}:stateMachine:sluice-batch",
        "SLUICE_BATCH_BUCKET": f"sluice-batch-{ACCOUNT}-{REGION}",
        "SLUICE_IMPORT_PREFIXES": Match.any_value(),
        "SLUICE_SAGEMAKER_EXECUTION_ROLE_ARN": f"arn:aws:iam::{ACCOUNT}:role/{execution_role}",
    }
    template.has_resource_properties(
        "AWS::Lambda::Function",
        {"Handler": API, "Environment": {"Variables": Match.object_like(expected)}},
    )

    (api,) = template.find_resources(
        "AWS::Lambda::Function", {"Properties": {"Handler": API}}
    ).values()
    variables = api["Properties"]["Environment"]["Variables"]
    assert json.loads(variables["SLUICE_IMPORT_PREFIXES"]) == [
        f"s3://{ARTIFACTS}/imports/{{tenant}}/"
    ]
    settings = _settings_from(
        {k: v for k, v in variables.items() if k.startswith(PREFIX)}, monkeypatch
    )
    # Push-by-URI reads only from the caller's own folder under imports/.
    assert settings.import_prefixes_for("acme") == [f"s3://{ARTIFACTS}/imports/acme/"]
    assert settings.batch_root_url == f"s3://sluice-batch-{ACCOUNT}-{REGION}/"
    assert settings.endpoint_control.sagemaker_execution_role_arn == expected["SLUICE_SAGEMAKER_EXECUTION_ROLE_ARN"]
    # The prediction cache's shared tier is a config choice, off by default.
    assert variables["SLUICE_PREDICTION_CACHE_SHARED"] == "false" and not settings.prediction_cache.prediction_cache_shared


def test_the_prediction_cache_shared_tier_follows_the_config(full_app: Synthesized, monkeypatch: pytest.MonkeyPatch) -> None:
    (api,) = full_app.resolved("api").find_resources("AWS::Lambda::Function", {"Properties": {"Handler": API}}).values()
    variables = api["Properties"]["Environment"]["Variables"]
    assert variables["SLUICE_PREDICTION_CACHE_SHARED"] == "true"
    assert _settings_from({k: v for k, v in variables.items() if k.startswith(PREFIX)}, monkeypatch).prediction_cache.prediction_cache_shared


def test_the_api_may_read_the_imports_prefix_it_is_told_about(default_app: Synthesized) -> None:
    from aws_cdk.assertions import Match

    assert_role_policy_has(
        default_app,
        "api",
        API,
        [
            Match.object_like(
                {
                    "Action": "s3:GetObject",
                    "Resource": Match.array_with(
                        [f"arn:aws:s3:::{ARTIFACTS}/imports/*"]
                    ),
                }
            ),
            Match.object_like(
                {
                    "Action": "s3:ListBucket",
                    "Resource": f"arn:aws:s3:::{ARTIFACTS}",
                    "Condition": {"StringLike": {"s3:prefix": ["imports/*"]}},
                }
            ),
        ],
    )
