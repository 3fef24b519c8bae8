"""Tenant-confined registry credentials: one tagged AssumeRole per tenant, cached; the
registry works through them; and no call goes out without a tenant bound."""

from __future__ import annotations

import json
from typing import Any

import boto3
import pytest

from sluice.clients import AwsClients
from sluice.domain import Model
from sluice.registry.dynamodb import DynamoRegistry, create_table
from sluice.tenant_credentials import (
    NoTenant,
    TenantCredentials,
    TenantRoutingClient,
    use_tenant,
)
from tests.integration.aws.conftest import REGION

TABLE = "sluice-registry"


@pytest.fixture
def tenant_role(aws: None) -> tuple[str, AwsClients, list[dict[str, Any]]]:
    """The tenant role's ARN, a client factory, and every AssumeRole request sent through it."""
    arn = boto3.client("iam", region_name=REGION).create_role(
        RoleName="sluice-tenant-registry",
        AssumeRolePolicyDocument=json.dumps({"Version": "2012-10-17", "Statement": []}),
    )["Role"]["Arn"]
    create_table(boto3.client("dynamodb", region_name=REGION), TABLE)
    clients = AwsClients(region=REGION)
    calls: list[dict[str, Any]] = []
    clients.client("sts", region=REGION).meta.events.register(
        "provide-client-params.sts.AssumeRole", lambda params, **_: calls.append(dict(params))
    )
    return arn, clients, calls


def test_each_tenant_gets_credentials_tagged_with_it_once(tenant_role) -> None:
    arn, clients, calls = tenant_role
    credentials = TenantCredentials(arn, clients=clients, region=REGION)
    acme = credentials.client("acme")
    assert credentials.client("acme") is acme
    other = credentials.client("globex")
    assert other is not acme
    assert [(c["RoleArn"], c["Tags"]) for c in calls] == [
        (arn, [{"Key": "tenant", "Value": "acme"}]),
        (arn, [{"Key": "tenant", "Value": "globex"}]),
    ]
    # The client signs as the assumed role, not as the function's own credentials.
    frozen = acme._request_signer._credentials.get_frozen_credentials()
    assert frozen.access_key != "testing"


@pytest.mark.parametrize("tenant", ["*", "acme*", "a#b", "", "Acme", "x" * 64])
def test_a_name_iam_could_widen_is_refused_before_any_call(tenant_role, tenant: str) -> None:
    arn, clients, calls = tenant_role
    with pytest.raises(ValueError, match="not a tenant name"):
        TenantCredentials(arn, clients=clients, region=REGION).client(tenant)
    assert calls == []


def test_the_registry_works_through_the_bound_tenant(tenant_role) -> None:
    arn, clients, calls = tenant_role
    registry = DynamoRegistry(
        TABLE, client=TenantRoutingClient(TenantCredentials(arn, clients=clients, region=REGION))
    )
    with use_tenant("acme"):
        registry.create_model(Model(tenant="acme", name="iris"))
        assert [m.name for m in registry.list_models("acme")] == ["iris"]
    with use_tenant("globex"):
        assert registry.list_models("globex") == []
    assert [c["Tags"][0]["Value"] for c in calls] == ["acme", "globex"]


def test_no_tenant_bound_means_no_call(tenant_role) -> None:
    arn, clients, calls = tenant_role
    registry = DynamoRegistry(
        TABLE, client=TenantRoutingClient(TenantCredentials(arn, clients=clients, region=REGION))
    )
    with pytest.raises(NoTenant, match="no tenant bound"):
        registry.list_models("acme")
    assert calls == []
