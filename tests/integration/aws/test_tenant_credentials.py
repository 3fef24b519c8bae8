"""Tenant-confined registry credentials: one tagged AssumeRole per tenant, cached; the
registry works through them; and no call goes out without a tenant bound."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import boto3
import pytest

from sluice.clients import AwsClients
from sluice.domain import Model
from sluice.registry.dynamodb import DynamoRegistry, create_table
from sluice.registry.dynamodb.tenant_scope import (
    NoTenant,
    TenantCredentials,
    TenantRoutingClient,
    use_tenant,
)
from tests.integration.aws.conftest import REGION

if TYPE_CHECKING:
    from pathlib import Path

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


def test_a_request_reaches_the_registry_only_as_its_own_tenant(tenant_role, monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    """Through the API: every call on a tenant partition goes out with the credentials of the
    request's tenant (from authentication), API key items with the function's own."""
    from fastapi.testclient import TestClient

    from sluice.api.app import create_app
    from sluice.settings import Settings
    from sluice.wiring import Container, build_runtimes, build_store
    from tests.integration.conftest import auth

    arn, clients, _ = tenant_role
    used: list[str] = []
    original = TenantCredentials.client

    def recording(self: TenantCredentials, tenant: str) -> Any:
        used.append(tenant)
        return original(self, tenant)

    monkeypatch.setattr(TenantCredentials, "client", recording)
    registry = DynamoRegistry(TABLE, clients=clients, region=REGION, tenant_role_arn=arn)
    own_calls: list[str] = []
    registry.key_table.client.meta.events.register("before-call.dynamodb.*", lambda model, **_: own_calls.append(model.name))
    settings = Settings(mode="local", home=tmp_path / "home", registry="", store="", deployment_cache_ttl_s=0)
    store = build_store(settings)
    container = Container(settings, registry, store, build_runtimes(settings, store))
    with use_tenant("acme"):
        _, acme = container.keys.create("acme", ["admin", "predict"])
    with use_tenant("globex"):
        _, globex = container.keys.create("globex", ["admin", "predict"])
    used.clear()
    client = TestClient(create_app(container))
    assert client.post("/api/v1/models", json={"name": "iris"}, headers=auth(acme)).status_code == 201
    assert client.get("/api/v1/models", headers=auth(acme)).json()[0]["name"] == "iris"
    assert set(used) == {"acme"}
    used.clear()
    assert client.get("/api/v1/models", headers=auth(globex)).json() == []
    assert client.get("/api/v1/models/iris", headers=auth(globex)).status_code == 404
    assert set(used) == {"globex"}
    # Key items (no tenant in their key) went out with the function's own credentials.
    assert "GetItem" in own_calls and "PutItem" in own_calls
    # Outside a request nothing is bound: no call falls back to the function's own role.
    with pytest.raises(NoTenant):
        registry.list_models("acme")


def test_keys_are_created_listed_and_revoked_across_the_two_sets_of_credentials(tenant_role) -> None:
    from sluice.domain import ApiKey

    arn, clients, _ = tenant_role
    registry = DynamoRegistry(TABLE, clients=clients, region=REGION, tenant_role_arn=arn)
    with use_tenant("acme"):
        registry.put_api_key(ApiKey("k1", "acme", "f" * 64, frozenset({"predict"})))
        assert [k.key_id for k in registry.list_api_keys("acme")] == ["k1"]
        revoked = registry.revoke_api_key("acme", "k1")
        assert revoked.revoked_at is not None
        assert registry.list_api_keys("acme")[0].revoked_at is not None
    assert registry.get_api_key("k1").revoked_at is not None  # the authorizer's read: own credentials


def test_the_last_admin_key_is_kept_across_the_two_sets_of_credentials(tenant_role, monkeypatch: pytest.MonkeyPatch) -> None:
    """The guard's check rides on the listing copies (the tenant's credentials); the key item
    the authorizer reads (the function's own) follows, and a revoke cut short between the two
    is finished by the next one."""
    from sluice.domain import ApiKey
    from sluice.domain.errors import Conflict, Unavailable

    arn, clients, _ = tenant_role
    registry = DynamoRegistry(TABLE, clients=clients, region=REGION, tenant_role_arn=arn)
    own = registry.key_table
    send = own.send

    def cut_short(operation: str, **params: Any) -> Any:
        if operation == "update_item":
            raise Unavailable("the registry is unavailable; try again")
        return send(operation, **params)

    with use_tenant("acme"):
        for key_id in ("k1", "k2"):
            registry.put_api_key(ApiKey(key_id, "acme", "f" * 64, frozenset({"admin"})))
        monkeypatch.setattr(own, "send", cut_short)
        with pytest.raises(Unavailable):
            registry.revoke_api_key("acme", "k1", keep_an_admin=True)
        monkeypatch.setattr(own, "send", send)
        assert registry.get_api_key("k1").active  # type: ignore[union-attr]  # the caller was told it failed
        revoked = registry.revoke_api_key("acme", "k1", keep_an_admin=True)
        assert registry.get_api_key("k1") == revoked and not revoked.active
        with pytest.raises(Conflict) as refused:
            registry.revoke_api_key("acme", "k2", keep_an_admin=True)
        assert refused.value.field == "key_id"
        assert [k.key_id for k in registry.list_api_keys("acme") if k.active] == ["k2"]
    assert registry.get_api_key("k2").active  # type: ignore[union-attr]


def test_the_snapshot_hook_preloads_each_deployment_as_its_tenant(aws: None, tmp_path: Path) -> None:
    """On AWS the API function's registry acts through the tenant's own role, and a read bound
    to no tenant is refused. The SnapStart hook runs outside any request: its preload read
    `acme/iris` bound to none, and the hook failed the version's publication."""
    from sluice.domain import Principal
    from sluice.inference.loop import run
    from sluice.inference.warmup import preload
    from sluice.registry.scope import use_tenant
    from sluice.settings import Settings
    from sluice.wiring import Container, build_runtimes, build_store
    from tests.conftest import MODELS

    acme = Principal("acme", frozenset({"admin", "predict"}), "k")
    role = boto3.client("iam", region_name=REGION).create_role(
        RoleName="tenant-registry-preload", AssumeRolePolicyDocument=json.dumps({"Version": "2012-10-17", "Statement": []})
    )["Role"]["Arn"]
    create_table(boto3.client("dynamodb", region_name=REGION), "sluice-preload")
    registry = DynamoRegistry("sluice-preload", clients=AwsClients(region=REGION), region=REGION, tenant_role_arn=role)
    settings = Settings(mode="local", home=tmp_path / "home", registry="", store="")
    store = build_store(settings)
    container = Container(settings, registry, store, build_runtimes(settings, store))
    with use_tenant("acme"):
        container.models.push(acme, "iris", (MODELS / "iris.onnx").read_bytes())
        container.deployments.create(acme, "iris", {"kind": "single", "model": "iris", "version": 1})
    warmed = run(preload(container.predictions, ["acme/iris"], max_bytes=64 << 20))  # no tenant bound, as the hook runs
    assert warmed.loaded == ["acme/iris:1"] and warmed.failed == []
