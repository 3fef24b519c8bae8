"""Who may touch which items of the registry table, in IAM rather than in application code.

The key layout is `sluice.registry.dynamodb`'s: every tenant's items have a partition key of
`T#<tenant>` or `T#<tenant>#...`; API keys alone live under `K#<key id>`. IAM can condition on
the partition key (`dynamodb:LeadingKeys`) but not on the sort key, so what can be enforced
is which partitions and which actions, per function:

- the authorizer may only GetItem `K#*` items: it reads no tenant's data at all;
- the API may read and write `K#*` items with its own credentials, and every tenant partition
  only through `TenantRegistryRole`, assumed per request for the request's tenant;
- the shadow and batch functions may read and write `T#*` items, never delete, never touch
  API keys;
- the functions that run in the background over every tenant (the rollout controller, the
  monitoring check, the registry events) may Scan the whole table, reading each item's keys
  and the one attribute they look for alone (`grant_keys_scan`): they see every item's keys,
  API key ids included, never its other attributes;
- nobody else may Scan; nobody may run PartiQL, export, or change or delete the table.

Tenant isolation itself needs the tenant in the credentials: `TenantRegistryRole` may only
reach `T#<tenant>` and `T#<tenant>#*` where `<tenant>` is the `tenant` session tag the caller
put on it when assuming it (see `sluice.registry.dynamodb.tenant_scope`); the API binds the
authenticated tenant for each request (`sluice.registry.scope`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from aws_cdk import Duration
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from constructs import Construct

from infra.constructs.functions import FunctionGroup, SluiceFunction

TENANT_ITEMS = "T#*"
KEY_ITEMS = "K#*"
TENANT_TAG = "tenant"
# The calls DynamoRegistry makes; TransactGet/TransactWrite are authorized per item as
# GetItem/PutItem/UpdateItem/DeleteItem/ConditionCheckItem.
# BatchGetItem: ground truth finds the kept predictions of a post's request ids at once.
READ = ("dynamodb:GetItem", "dynamodb:BatchGetItem", "dynamodb:Query")
WRITE = ("dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:ConditionCheckItem")
DELETE = ("dynamodb:DeleteItem", "dynamodb:BatchWriteItem")


def tenant_partitions(tenant: str) -> list[str]:
    """The partitions of one tenant's items: `T#<tenant>` and `T#<tenant>#…`."""
    return [f"T#{tenant}", f"T#{tenant}#*"]


def leading_keys(patterns: Sequence[str]) -> dict[str, dict[str, list[str]]]:
    # ForAllValues: every partition key the request touches must match one pattern.
    return {"ForAllValues:StringLike": {"dynamodb:LeadingKeys": list(patterns)}}


def registry_statement(
    table: dynamodb.ITableV2, actions: Sequence[str], partitions: Sequence[str]
) -> iam.PolicyStatement:
    """Item actions on the table itself (no index: it has none), on these partitions only."""
    return iam.PolicyStatement(
        actions=list(actions),
        resources=[table.table_arn],
        conditions=leading_keys(partitions),
    )


def grant_registry(
    role: iam.IRole,
    table: dynamodb.ITableV2,
    *,
    actions: Sequence[str],
    partitions: Sequence[str] = (TENANT_ITEMS,),
) -> None:
    role.add_to_principal_policy(registry_statement(table, actions, partitions))


def session_tag_conditions() -> dict[str, dict[str, object]]:
    """Assuming the tenant role needs exactly one session tag, `tenant`, non-empty and free
    of IAM wildcards (`${*}`/`${?}` are IAM's escapes for a literal `*`/`?`): a tag of `*`
    would otherwise widen `T#${aws:PrincipalTag/tenant}` to every tenant."""
    return {
        "StringLike": {f"aws:RequestTag/{TENANT_TAG}": "?*"},
        "StringNotLike": {f"aws:RequestTag/{TENANT_TAG}": ["*${*}*", "*${?}*"]},
        "ForAllValues:StringEquals": {"aws:TagKeys": [TENANT_TAG]},
    }


def tenant_tagged_role(scope: Construct, caller: iam.IRole, *, description: str) -> iam.Role:
    """`scope`'s role "Role", which `caller` may assume only with a session tagged as
    `session_tag_conditions` asks; its policies name `${aws:PrincipalTag/tenant}`."""
    return iam.Role(
        scope,
        "Role",
        assumed_by=iam.SessionTagsPrincipal(
            iam.PrincipalWithConditions(
                iam.ArnPrincipal(caller.role_arn), session_tag_conditions()
            )
        ),
        description=description,
        max_session_duration=Duration.hours(1),
    )


def assume_tagged_statement(role: iam.IRole) -> iam.PolicyStatement:
    """The caller's side: assume `role`, tagging the session as `session_tag_conditions` asks."""
    return iam.PolicyStatement(
        actions=["sts:AssumeRole", "sts:TagSession"],
        resources=[role.role_arn],
        conditions=session_tag_conditions(),
    )


class TenantRegistryRole(Construct):
    """A role whose registry access is confined to one tenant's partitions by a session tag.

    `caller` may assume it only while tagging the session with `tenant` (and no other tag);
    its policy then allows `T#${aws:PrincipalTag/tenant}` and `…#*` alone, so credentials
    obtained for tenant A cannot read or write an item of tenant B, whatever the code asks.
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        table: dynamodb.ITableV2,
        caller: iam.IRole,
        actions: Sequence[str],
    ) -> None:
        super().__init__(scope, id)
        self.role = tenant_tagged_role(
            self, caller, description="Registry access confined to the tenant named by the session tag"
        )
        tagged = f"${{aws:PrincipalTag/{TENANT_TAG}}}"
        self.role.add_to_principal_policy(
            registry_statement(table, actions, tenant_partitions(tagged))
        )
        caller.add_to_principal_policy(assume_tagged_statement(self.role))


def grant_keys_scan(role: iam.IRole, table: dynamodb.ITableV2, attributes: Sequence[str]) -> None:
    """A scan of the whole table that may read `attributes` of each item alone (its keys and
    what the function looks for: no statistics, no API key hashes): how the scheduled functions
    find the items they act on in every tenant."""
    role.add_to_principal_policy(
        iam.PolicyStatement(
            actions=["dynamodb:Scan"],
            resources=[table.table_arn],
            conditions={
                "StringEquals": {"dynamodb:Select": "SPECIFIC_ATTRIBUTES"},
                "ForAllValues:StringEquals": {"dynamodb:Attributes": list(attributes)},
            },
        )
    )


@dataclass(frozen=True)
class RegistryWorker:
    """What the stack gives each function it runs in the background over the registry (the
    rollout controller, the monitoring check, the registry events): its name, the group it
    runs in (platform and layers), its reserved concurrency, and the registry's table."""

    function_name: str
    functions: FunctionGroup
    reserved_concurrency: int | None
    table: dynamodb.ITableV2

    def function(
        self, scope: Construct, id: str, *, handler: str, description: str, memory_mb: int,
        timeout_s: int, actions: Sequence[str], scan: Sequence[str],
    ) -> SluiceFunction:  # fmt: skip
        """The function, invoked asynchronously (by a schedule or a rule: a dead-letter queue
        holds what fails), granted `actions` on the tenant partitions and a scan of the table
        that reads `scan`, the attributes it looks for, of each item alone."""
        fn = self.functions.function(
            scope, id, function_name=self.function_name, handler=handler, description=description,
            memory_mb=memory_mb, timeout_s=timeout_s, invoked_async=True,
            reserved_concurrency=self.reserved_concurrency,
        )  # fmt: skip
        grant_registry(fn.role, self.table, actions=actions)
        grant_keys_scan(fn.role, self.table, scan)
        return fn
