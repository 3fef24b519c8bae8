"""cdk-nag through CDK's policy validation, and acknowledgements that say why.

The AWS Solutions and Serverless packs run on every synthesis; any finding that is neither
fixed nor acknowledged fails it. An acknowledgement sits on the construct it concerns (it
covers that construct's children) and always carries a reason.
"""

from __future__ import annotations

import json
from typing import Any

from aws_cdk import Acknowledgment, App, Stack, Validations
from cdk_nag import AwsSolutionsChecks, ServerlessChecks
from constructs import IConstruct


def register_checks(app: App) -> None:
    Validations.of(app).add_plugins(
        AwsSolutionsChecks(app, verbose=True), ServerlessChecks(app, verbose=True)
    )


def acknowledge(scope: IConstruct, rule_id: str, reason: str) -> None:
    if not reason.strip():
        raise ValueError(f"acknowledging {rule_id} on {scope.node.path} needs a reason")
    Validations.of(scope).acknowledge(Acknowledgment(id=rule_id, reason=reason))


def flatten_reference(node: Any) -> str:
    """The flat form cdk-nag gives a resolved CloudFormation value in a finding id."""
    if node is None:
        return ""
    if isinstance(node, str):
        return node.replace("${", "<").replace("}", ">")
    if isinstance(node, dict):
        if "Fn::Join" in node:
            delimiter, items = node["Fn::Join"]
            return delimiter.join(flatten_reference(item) for item in items)
        if "Fn::Sub" in node:
            return flatten_reference(node["Fn::Sub"])
        if "Fn::GetAtt" in node:
            resource, attribute = node["Fn::GetAtt"]
            return f"<{flatten_reference(resource)}.{flatten_reference(attribute)}>"
        if "Fn::ImportValue" in node:
            return flatten_reference(node["Fn::ImportValue"])
        if "Ref" in node:
            return f"<{flatten_reference(node['Ref'])}>"
    return json.dumps(node, separators=(",", ":"))


def wildcard_resource(scope: IConstruct, arn: str) -> str:
    """The IAM5 finding id for a statement resource (`AwsSolutions-IAM5[Resource::…]`)."""
    return f"AwsSolutions-IAM5[Resource::{flatten_reference(Stack.of(scope).resolve(arn))}]"


def wildcard_action(action: str) -> str:
    return f"AwsSolutions-IAM5[Action::{action}]"


def policy_wildcards(policy: IConstruct) -> list[str]:
    """The IAM5 finding ids cdk-nag reports for an IAM policy (L2 or L1) we did not write."""
    from aws_cdk import aws_iam as iam

    cfn = policy.node.default_child if isinstance(policy, iam.Policy) else policy
    if not isinstance(cfn, iam.CfnPolicy):
        raise TypeError(f"{policy.node.path} is not an IAM policy")
    document = Stack.of(cfn).resolve(cfn.policy_document)
    findings: list[str] = []
    for statement in document.get("Statement", []):
        if statement.get("Effect") != "Allow":
            continue
        actions = statement.get("Action", [])
        resources = statement.get("Resource", [])
        for action in actions if isinstance(actions, list) else [actions]:
            if "*" in action:
                findings.append(wildcard_action(action))
        for resource in resources if isinstance(resources, list) else [resources]:
            flat = flatten_reference(resource)
            if "*" in flat:
                findings.append(f"AwsSolutions-IAM5[Resource::{flat}]")
    return list(dict.fromkeys(findings))
