"""The rollout controller on AWS: EventBridge Scheduler invokes it once a minute with a role
that may invoke it and nothing else, and its own role may move the variant weights of the
endpoints the API deploys (the only endpoints a deployment is bound to) and no more."""

from __future__ import annotations

import ast
import inspect
import textwrap
from fnmatch import fnmatchcase
from typing import Any

import boto3

from sluice.endpoints.names import endpoint_name
from sluice.endpoints.sagemaker import SageMakerEndpoints
from tests.infra.synth import (
    ACCOUNT,
    REGION,
    Synthesized,
    as_list,
    function_arn,
    policy_statements_of_role,
    properties,
    schedule_invoking,
    statements_of_function,
)
from tests.infra.synth import (
    SAGEMAKER_ARN as SAGEMAKER,
)

CONTROLLER = "sluice.handlers.rollouts.handler"


def _allowed(statements: list[dict[str, Any]], action: str, resource: str) -> bool:
    return any(
        s["Effect"] == "Allow"
        and any(fnmatchcase(action, a) for a in as_list(s["Action"]))
        and any(fnmatchcase(resource, r) for r in as_list(s["Resource"]) if isinstance(r, str))
        for s in statements
    )


def _controller_arn(app: Synthesized) -> str:
    return function_arn(app, CONTROLLER)


def _schedule(app: Synthesized) -> dict[str, Any]:
    return schedule_invoking(app, CONTROLLER)


def test_eventbridge_scheduler_invokes_the_controller_every_minute(full_app: Synthesized) -> None:
    template = full_app.resolved("api")
    schedule = _schedule(full_app)
    assert schedule["ScheduleExpression"] == "rate(1 minute)" and schedule["State"] == "ENABLED"
    assert schedule["FlexibleTimeWindow"] == {"Mode": "OFF"}
    target = schedule["Target"]
    assert target["Arn"] == _controller_arn(full_app)
    # One look a minute: a delivery that fails is not retried (the next look comes anyway).
    assert target["RetryPolicy"] == {"MaximumRetryAttempts": 0, "MaximumEventAgeInSeconds": 60}
    # No EventBridge rule invokes it: the schedule is the only thing that does.
    for rule in properties(template, "AWS::Events::Rule"):
        assert all(t["Arn"] != _controller_arn(full_app) for t in rule["Targets"])


def test_the_schedules_role_may_invoke_the_controller_and_nothing_else(full_app: Synthesized) -> None:
    template = full_app.resolved("api")
    schedule = _schedule(full_app)
    role_id = schedule["Target"]["RoleArn"].rsplit("/", 1)[-1]
    role = template.find_resources("AWS::IAM::Role")[role_id]["Properties"]
    [trust] = role["AssumeRolePolicyDocument"]["Statement"]
    assert trust["Principal"] == {"Service": "scheduler.amazonaws.com"}
    assert trust["Condition"] == {"StringEquals": {"aws:SourceAccount": ACCOUNT}}
    assert "ManagedPolicyArns" not in role
    assert policy_statements_of_role(template, role_id) == [
        {"Action": "lambda:InvokeFunction", "Effect": "Allow", "Resource": _controller_arn(full_app)}
    ]


def test_the_controller_may_move_the_weights_of_sluices_own_endpoints_only(full_app: Synthesized) -> None:
    statements = statements_of_function(full_app, CONTROLLER)
    bound = f"{SAGEMAKER}:endpoint/{endpoint_name('acme', 'ranker')}"
    for action in ("sagemaker:DescribeEndpoint", "sagemaker:UpdateEndpointWeightsAndCapacities"):
        assert _allowed(statements, action, bound), action
        assert not _allowed(statements, action, f"{SAGEMAKER}:endpoint/someone-elses")
    # Adding a candidate's variant is the API's (rollout start), never the controller's.
    for action in ("sagemaker:UpdateEndpoint", "sagemaker:CreateEndpointConfig", "sagemaker:CreateModel", "iam:PassRole"):
        assert not any(_allowed(statements, action, r) for r in (bound, f"{SAGEMAKER}:endpoint-config/*", "*")), action


def test_what_the_controller_is_granted_is_what_its_endpoint_calls_are() -> None:
    """The SageMaker calls of a rollout's look: `weights` (status and weights) and the
    weights-only path of `change`."""
    methods = boto3.client("sagemaker", region_name=REGION).meta.method_to_api_mapping
    calls = set()
    for method in (SageMakerEndpoints.weights, SageMakerEndpoints.change):
        tree = ast.parse(textwrap.dedent(inspect.getsource(method)))
        calls |= {
            f"sagemaker:{methods[n.attr]}"
            for n in ast.walk(tree)
            if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Attribute) and n.value.attr == "sagemaker" and n.attr in methods
        }
    assert calls == {"sagemaker:DescribeEndpoint", "sagemaker:UpdateEndpointWeightsAndCapacities"}
