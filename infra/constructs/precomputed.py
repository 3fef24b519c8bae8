"""The table of precomputed answers (`sluice.registry.precomputed.dynamodb`) as the function
stacks use it: imported by name, each function told where it is (SLUICE_PRECOMPUTED_TABLE) and
granted only what its code calls, on tenants' partitions only (`T#*`, or one tenant's):

- the functions that predict (API, WebSocket, shadow, batch scoring, streams) read it:
  GetItem (a publication) and BatchGetItem (a request's entities); the API and WebSocket
  functions only through their tenant role, confined to the request's tenant;
- batch scoring writes a job's answers (BatchWriteItem, and PutItem for what they hold);
- Finalize reads what a job wrote (GetItem) and points the table at it (PutItem);
  MarkFailed and ExecutionEnded withdraw a job that published and then did not succeed
  (GetItem, then PutItem, or DeleteItem where it replaced nothing).

Nobody may Scan, Query, delete answers, or change the table: old generations leave by their time
to live.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam

from infra.constructs.registry_access import (
    TENANT_ITEMS,
    TENANT_TAG,
    registry_statement,
    tenant_partitions,
)

if TYPE_CHECKING:
    from infra.constructs.functions import SluiceFunction

READ_ANSWERS = ("dynamodb:GetItem", "dynamodb:BatchGetItem")
WRITE_ANSWERS = ("dynamodb:BatchWriteItem", "dynamodb:PutItem")
PUBLISH = ("dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:DeleteItem")  # DeleteItem: a job withdrawn that replaced nothing


@dataclass(frozen=True)
class PrecomputedAnswers:
    table: dynamodb.ITableV2

    @property
    def environment(self) -> dict[str, str]:
        return {"SLUICE_PRECOMPUTED_TABLE": f"dynamodb://{self.table.table_name}"}

    def tell(self, owner: SluiceFunction) -> None:
        for variable, value in self.environment.items():
            owner.function.add_environment(variable, value)

    def grant(self, owner: SluiceFunction, actions: Sequence[str], partitions: Sequence[str] = (TENANT_ITEMS,)) -> None:
        """`actions` on these partitions, to the function's own role, and tell it where the table is."""
        owner.role.add_to_principal_policy(registry_statement(self.table, actions, partitions))
        self.tell(owner)

    def grant_tenant_reads(self, tenant_role: iam.IRole) -> None:
        """Reads through a tenant role (`TenantRegistryRole`): the tagged tenant's partitions only."""
        tagged = f"${{aws:PrincipalTag/{TENANT_TAG}}}"
        tenant_role.add_to_principal_policy(registry_statement(self.table, READ_ANSWERS, tenant_partitions(tagged)))
