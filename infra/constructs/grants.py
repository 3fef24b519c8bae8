"""IAM statements written out for what sluice's code actually calls.

CDK's `grant_read`/`grant_write` on buckets hand out wildcard actions (`s3:GetObject*`,
`s3:List*`, …); these name each action and confine objects to a key prefix. Each function
that gets object access has the one unavoidable wildcard — the keys under its prefix —
acknowledged here, where it is created.
"""

from __future__ import annotations

from collections.abc import Iterable

from aws_cdk import ArnFormat, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3

from constructs import Construct
from infra.nag import acknowledge, wildcard_resource

READ_OBJECTS = ("s3:GetObject",)
WRITE_OBJECTS = ("s3:PutObject", "s3:AbortMultipartUpload")
DELETE_OBJECTS = ("s3:DeleteObject",)


def grant_objects(
    owner: Construct,
    role: iam.IRole,
    bucket: s3.IBucket,
    *,
    prefix: str = "",
    write: bool = False,
    delete: bool = False,
    purpose: str,
) -> None:
    """Object access under `prefix` (and listing it, so a missing key reads as 404, not 403)."""
    actions = [
        *READ_OBJECTS,
        *(WRITE_OBJECTS if write else ()),
        *(DELETE_OBJECTS if delete else ()),
    ]
    objects = bucket.arn_for_objects(f"{prefix}*")
    role.add_to_principal_policy(iam.PolicyStatement(actions=actions, resources=[objects]))
    list_statement = iam.PolicyStatement(actions=["s3:ListBucket"], resources=[bucket.bucket_arn])
    if prefix:
        list_statement.add_condition("StringLike", {"s3:prefix": [f"{prefix}*"]})
    role.add_to_principal_policy(list_statement)
    acknowledge(
        owner,
        wildcard_resource(owner, objects),
        f"Object keys are made at run time ({purpose}); access is confined to "
        f"'{prefix or '(whole bucket)'}' in this one bucket and to the actions listed.",
    )


def endpoint_arns(scope: Construct, endpoint_names: Iterable[str]) -> list[str]:
    # SageMaker writes endpoint names in lower case in its ARNs.
    stack = Stack.of(scope)
    return [
        stack.format_arn(service="sagemaker", resource="endpoint", resource_name=name.lower())
        for name in endpoint_names
    ]


def grant_invoke_endpoints(
    role: iam.IRole, scope: Construct, endpoint_names: Iterable[str]
) -> None:
    arns = endpoint_arns(scope, endpoint_names)
    if arns:
        role.add_to_principal_policy(
            iam.PolicyStatement(actions=["sagemaker:InvokeEndpoint"], resources=arns)
        )


def state_machine_arn(scope: Construct, name: str) -> str:
    return Stack.of(scope).format_arn(
        service="states",
        resource="stateMachine",
        resource_name=name,
        arn_format=ArnFormat.COLON_RESOURCE_NAME,
    )


def executions_arn(scope: Construct, state_machine_name: str) -> str:
    """Every execution of one state machine (`…:execution:<machine>:*`)."""
    return Stack.of(scope).format_arn(
        service="states",
        resource="execution",
        resource_name=f"{state_machine_name}:*",
        arn_format=ArnFormat.COLON_RESOURCE_NAME,
    )
