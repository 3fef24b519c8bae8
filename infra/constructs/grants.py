"""IAM statements written out for what sluice's code actually calls.

CDK's `grant_read`/`grant_write` on buckets hand out wildcard actions (`s3:GetObject*`,
`s3:List*`, …); these name each action and confine objects to a key prefix. Each function
that gets object access has the one unavoidable wildcard — the keys under its prefix —
acknowledged here, where it is created. A grant goes to a function's own role, and its
acknowledgement on the function.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from aws_cdk import ArnFormat, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_scheduler as scheduler
from constructs import Construct

from infra.nag import acknowledge, wildcard_resource
from infra.naming import RUNTIME_ENDPOINT_PREFIX

if TYPE_CHECKING:
    from infra.constructs.functions import SluiceFunction

@dataclass(frozen=True)
class Callee:
    """What a function calls with one action on its ARN and is told of by one variable, whose
    value is `<scheme>://<name>`: a subclass names the variable, the scheme and the action."""

    name: str
    arn: str

    variable: ClassVar[str]
    scheme: ClassVar[str]
    action: ClassVar[str]

    @property
    def environment(self) -> dict[str, str]:
        return {self.variable: f"{self.scheme}://{self.name}"}

    def grant_to(self, role: iam.IRole) -> None:
        role.add_to_principal_policy(iam.PolicyStatement(actions=[self.action], resources=[self.arn]))


@dataclass(frozen=True)
class FunctionSteps:
    """The tenants' own Lambda functions that graphs' `function` steps call (`graphs.functions`
    in the config): each function that predicts may invoke exactly these, one statement per
    ARN (a Sid each, so IAM's minimizing does not fold them into one), and is told the
    allowlist per tenant as SLUICE_FUNCTION_ARNS, which sluice checks on every save and call.
    None configured: no statement and no variable."""

    allowlist: Mapping[str, Sequence[str]]
    lookups: LookupSources | None = None  # and the online stores graphs' lookup steps read

    @property
    def arns(self) -> list[str]:
        return sorted({arn for arns in self.allowlist.values() for arn in arns})

    def for_tenant(self, tenant: str) -> FunctionSteps:
        """What one tenant's functions may call and read (a stream bound to it): its own alone."""
        lookups = LookupSources({t: s for t, s in self.lookups.sources.items() if t == tenant}) if self.lookups is not None else None
        return FunctionSteps({t: a for t, a in self.allowlist.items() if t == tenant}, lookups)

    @property
    def environment(self) -> dict[str, str]:
        if not self.allowlist:
            return {}
        return {"SLUICE_FUNCTION_ARNS": json.dumps({t: list(a) for t, a in sorted(self.allowlist.items())}, separators=(",", ":"))}

    def grant_to(self, owner: SluiceFunction) -> None:
        for arn in self.arns:
            sid = "FunctionStep" + hashlib.sha256(arn.encode()).hexdigest()[:16]
            owner.role.add_to_principal_policy(iam.PolicyStatement(sid=sid, actions=["lambda:InvokeFunction"], resources=[arn]))
        for variable, value in self.environment.items():
            owner.function.add_environment(variable, value)
        if self.lookups is not None:
            self.lookups.grant_to(owner)


@dataclass(frozen=True)
class LookupSources:
    """The online stores graphs' `lookup` steps read (`graphs.lookups` in the config), as
    `{tenant: ["dynamodb:TABLE", "sagemaker:GROUP", …]}`: each function that predicts may read
    exactly these — `dynamodb:BatchGetItem` on each table, `sagemaker:BatchGetRecord` and
    `GetRecord` on each feature group (SageMaker writes its names in lower case in ARNs), one
    statement each — and is told the list per tenant as SLUICE_LOOKUP_SOURCES, which sluice
    checks on every save and call. None configured: no statement and no variable."""

    sources: Mapping[str, Sequence[str]]

    def grant_to(self, owner: SluiceFunction) -> None:
        stack = Stack.of(owner.function)
        for source in sorted({s for names in self.sources.values() for s in names}):
            store, _, name = source.partition(":")
            sid = "LookupSource" + hashlib.sha256(source.encode()).hexdigest()[:16]
            if store == "dynamodb":
                actions, arn = ["dynamodb:BatchGetItem"], stack.format_arn(service="dynamodb", resource="table", resource_name=name)
            else:
                actions = ["sagemaker:BatchGetRecord", "sagemaker:GetRecord"]
                arn = stack.format_arn(service="sagemaker", resource="feature-group", resource_name=name.lower())
            owner.role.add_to_principal_policy(iam.PolicyStatement(sid=sid, actions=actions, resources=[arn]))
        if self.sources:
            value = json.dumps({t: list(s) for t, s in sorted(self.sources.items())}, separators=(",", ":"))
            owner.function.add_environment("SLUICE_LOOKUP_SOURCES", value)


READ_OBJECTS = ("s3:GetObject",)
READ_VERSIONS = ("s3:GetObjectVersion",)  # a batch upload is read at the version its event named
WRITE_OBJECTS = ("s3:PutObject", "s3:AbortMultipartUpload")
DELETE_OBJECTS = ("s3:DeleteObject",)


def grant_objects(
    owner: SluiceFunction,
    bucket: s3.IBucket,
    *,
    prefix: str = "",
    write: bool = False,
    delete: bool = False,
    versions: bool = False,
    purpose: str,
) -> None:
    """Object access under `prefix` (and listing it, so a missing key reads as 404, not 403);
    `versions`: reading given versions of objects too."""
    actions = [
        *READ_OBJECTS,
        *(READ_VERSIONS if versions else ()),
        *(WRITE_OBJECTS if write else ()),
        *(DELETE_OBJECTS if delete else ()),
    ]
    objects, role = bucket.arn_for_objects(f"{prefix}*"), owner.role
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


ENDPOINT_TENANT_TAG = "sluice:tenant"  # what the API tags the endpoints it deploys with (`sluice.endpoints`)


def _invocable_endpoints(owner: Construct, endpoint_names: Iterable[str]) -> tuple[str, list[str]]:
    """(the ARN pattern of the endpoints the API deploys at run time, `sluice-*`; the ARNs of
    the config file's endpoints, `<name>-<endpoint>`, not already among them)."""
    runtime = endpoint_arns(owner, [f"{RUNTIME_ENDPOINT_PREFIX}*"])[0]
    others = [n for n in endpoint_names if not n.lower().startswith(RUNTIME_ENDPOINT_PREFIX)]
    return runtime, endpoint_arns(owner, others)


def grant_invoke_endpoints(owner: SluiceFunction, endpoint_names: Iterable[str], *, tenant: str | None = None) -> None:
    """InvokeEndpoint on the endpoints the API deploys at run time (`sluice-*`) and on the
    config file's endpoints (`<name>-<endpoint>`, already among them when `name` is `sluice`).
    `tenant`: a function bound to one tenant (a stream's) may invoke only that tenant's
    run-time endpoints, those tagged `sluice:tenant` with its name (a name prefix cannot tell
    `acme` from `acme-x`), beside the config file's, which the operator made for every tenant."""
    runtime, configured = _invocable_endpoints(owner, endpoint_names)
    if tenant is None:
        owner.role.add_to_principal_policy(
            iam.PolicyStatement(actions=["sagemaker:InvokeEndpoint"], resources=[runtime, *configured])
        )
    else:
        # Every config file's endpoint by its name, `sluice-…` ones too: the tenant condition on
        # `sluice-*` below would leave those out (the operator's endpoints carry no tenant tag).
        configured = endpoint_arns(owner, list(endpoint_names))
        owner.role.add_to_principal_policy(
            iam.PolicyStatement(
                sid="InvokeTenantEndpoints",
                actions=["sagemaker:InvokeEndpoint"],
                resources=[runtime],
                conditions={"StringEquals": {f"aws:ResourceTag/{ENDPOINT_TENANT_TAG}": tenant}},
            )
        )
        if configured:
            owner.role.add_to_principal_policy(
                iam.PolicyStatement(sid="InvokeConfiguredEndpoints", actions=["sagemaker:InvokeEndpoint"], resources=configured)
            )
    acknowledge(
        owner,
        wildcard_resource(owner, runtime),
        "The API deploys SageMaker endpoints at run time, named sluice-<tenant>-<deployment>-"
        "<digest>; only InvokeEndpoint, and only on endpoints with that prefix.",
    )


def grant_invoke_endpoints_async(owner: SluiceFunction, endpoint_names: Iterable[str]) -> None:
    """InvokeEndpointAsync on the same endpoints, for the API (asynchronous inference: the
    input is written first under the tenant's results prefix, which the object grants cover).
    A policy of its own, so that CDK does not fold it into the InvokeEndpoint statement."""
    runtime, configured = _invocable_endpoints(owner, endpoint_names)
    policy = iam.Policy(
        owner,
        "InvokeEndpointsAsync",
        statements=[
            iam.PolicyStatement(
                actions=["sagemaker:InvokeEndpointAsync"], resources=[runtime, *configured]
            )
        ],
    )
    policy.attach_to_role(owner.role)
    acknowledge(
        policy,
        wildcard_resource(owner, runtime),
        "Endpoints the API deploys at run time are named sluice-<tenant>-<deployment>-<digest>; "
        "only InvokeEndpointAsync, and only on endpoints with that prefix.",
    )


def scheduler_principal(scope: Construct) -> iam.ServicePrincipal:
    """EventBridge Scheduler, on behalf of schedules of this account only."""
    return iam.ServicePrincipal(
        "scheduler.amazonaws.com",
        conditions={"StringEquals": {"aws:SourceAccount": Stack.of(scope).account}},
    )


def invoke_on_schedule(
    scope: Construct, id: str, function: lambda_.IFunction, *, name: str, who: str, description: str,
    expression: str, input: str, retries: int, max_age_s: int, timezone: str | None = None,
) -> scheduler.CfnSchedule:
    """EventBridge Scheduler invokes `function` (asynchronously: a failed run lands in the
    function's dead-letter queue after Lambda's retries) on `expression`, with `input`, assuming
    a role (`{id}SchedulerRole`) that may invoke that function and nothing else; `who` names
    the function in the role's description."""
    role = iam.Role(
        scope, f"{id}SchedulerRole", description=f"EventBridge Scheduler invokes {who}", assumed_by=scheduler_principal(scope)
    )
    role.add_to_principal_policy(iam.PolicyStatement(actions=["lambda:InvokeFunction"], resources=[function.function_arn]))
    return scheduler.CfnSchedule(
        scope,
        f"{id}Schedule",
        name=name,
        description=description,
        schedule_expression=expression,
        schedule_expression_timezone=timezone,
        flexible_time_window=scheduler.CfnSchedule.FlexibleTimeWindowProperty(mode="OFF"),
        state="ENABLED",
        target=scheduler.CfnSchedule.TargetProperty(
            arn=function.function_arn,
            role_arn=role.role_arn,
            input=input,
            retry_policy=scheduler.CfnSchedule.RetryPolicyProperty(maximum_retry_attempts=retries, maximum_event_age_in_seconds=max_age_s),
        ),
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


def schedules_arn(scope: Construct, group: str) -> str:
    """Every schedule of one EventBridge Scheduler group (`…:schedule/<group>/*`)."""
    return Stack.of(scope).format_arn(
        service="scheduler", resource="schedule", resource_name=f"{group}/*"
    )


def role_arn(scope: Construct, name: str) -> str:
    return Stack.of(scope).format_arn(
        service="iam", region="", resource="role", resource_name=name
    )
