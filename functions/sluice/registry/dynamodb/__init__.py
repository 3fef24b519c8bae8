"""The AWS registry: one DynamoDB table, single-table design, one module per aggregate.

The table has two string keys, `pk` (partition) and `sk` (sort), on-demand billing, and no
secondary index; `layout` says where each record lives. `create_table` builds it for tests and
local tooling; the CDK stack defines the production table with the same key schema.

Every read is a GetItem or a Query on one partition, strongly consistent, so the registry reads
its own writes as the SQLite one does; lists come back in sort-key order, which is the name
(or number) order SQLite gives. Each aggregate's module says how its writes stay correct under
concurrency; `table` holds the calls, retries and attribute mapping they share.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sluice.registry.dynamodb.answers import DynamoAnswers
from sluice.registry.dynamodb.connections import DynamoConnections
from sluice.registry.dynamodb.deployments import DynamoDeployments
from sluice.registry.dynamodb.follows import DynamoFollows
from sluice.registry.dynamodb.jobs import DynamoJobs
from sluice.registry.dynamodb.keys import DynamoKeys
from sluice.registry.dynamodb.models import DynamoModels
from sluice.registry.dynamodb.monitor import DynamoMonitor
from sluice.registry.dynamodb.optimize_jobs import DynamoOptimizeJobs
from sluice.registry.dynamodb.schedules import DynamoSchedules
from sluice.registry.dynamodb.stats import ASSIGNMENT_TTL_S, DynamoStats
from sluice.registry.dynamodb.table import Table, create_table, table_of_url

if TYPE_CHECKING:
    from typing import Unpack

    from mypy_boto3_dynamodb import DynamoDBClient

    from sluice.clients import AwsArgs, AwsSource

__all__ = ["ASSIGNMENT_TTL_S", "DynamoRegistry", "create_table", "table_of_url"]


class DynamoRegistry(DynamoModels, DynamoDeployments, DynamoKeys, DynamoJobs, DynamoOptimizeJobs, DynamoSchedules, DynamoStats, DynamoMonitor, DynamoFollows, DynamoAnswers, DynamoConnections):
    """Every aggregate over one table. The client comes from `clients` (by default the
    process's factory for `region`) on first use, or is given ready (tests)."""

    def __init__(self, table_name: str, *, tenant_role_arn: str | None = None, **aws: Unpack[AwsArgs]) -> None:
        own = Table(table_name, **aws)
        if not tenant_role_arn:
            super().__init__(own)
            return
        # Tenant partitions through credentials IAM confines to the bound tenant; API key
        # items (`K#…`, no tenant in their key) through the function's own.
        from sluice.registry.dynamodb.tenant_scope import TenantCredentials, TenantRoutingClient

        routed = TenantRoutingClient(TenantCredentials(tenant_role_arn, clients=aws.get("clients"), region=own.region))
        super().__init__(Table(table_name, client=routed, region=own.region))
        self._key_table = own

    @classmethod
    def from_url(cls, url: str, *, tenant_role_arn: str | None = None, **aws: Unpack[AwsSource]) -> DynamoRegistry:
        return cls(table_of_url(url), tenant_role_arn=tenant_role_arn, **aws)

    @property
    def table_name(self) -> str:
        return self.table.name

    @property
    def region(self) -> str | None:
        return self.table.region

    @property
    def client(self) -> DynamoDBClient:
        return self.table.client
