"""The REQUEST authorizer against a real registry (SQLite on a temporary folder)."""

from __future__ import annotations

import copy
import json
import logging
import threading
from pathlib import Path
from typing import Any

import pytest
from aws_lambda_powertools.utilities.data_classes.api_gateway_authorizer_event import (
    APIGatewayAuthorizerRequestEvent,
)

from sluice.domain import Principal
from sluice.handlers.authorizer import UsagePlans, authorize, authorize_connect
from sluice.registry.sqlite import SqliteRegistry
from sluice.services.keys import KEY_ID_CHARS, KeyService
from sluice.settings import Settings
from sluice.storage.folder import FolderStore
from sluice.wiring import Container

EVENT = json.loads((Path(__file__).parent / "events" / "authorizer_request.json").read_text())
USAGE = UsagePlans(key_prefix="sluice-api-usage-plan-key-", tenants=frozenset({"acme"}))


@pytest.fixture
def keys_container(tmp_path: Path) -> Container:
    settings = Settings(mode="local", home=tmp_path, registry="", store="")
    return Container(
        settings, SqliteRegistry(tmp_path / "registry.db"), FolderStore(tmp_path / "artifacts"), {}
    )


def request(**headers: str) -> APIGatewayAuthorizerRequestEvent:
    event: dict[str, Any] = copy.deepcopy(EVENT)
    event["headers"].update(headers)
    return APIGatewayAuthorizerRequestEvent(event)


def effect(response: dict[str, Any]) -> str:
    (statement,) = response["policyDocument"]["Statement"]
    return statement["Effect"]


def test_a_valid_bearer_key_is_allowed_with_the_principal_in_context(
    keys_container: Container,
) -> None:
    record, key = keys_container.keys.create("acme", ["predict", "admin"], name="ci")
    response = authorize(
        request(Authorization=f"Bearer {key}"), keys=keys_container.keys, usage=USAGE
    )
    assert effect(response) == "Allow"
    assert response["principalId"] == record.key_id
    assert response["context"] == {
        "tenant": "acme",
        "scopes": "admin predict",
        "subject": record.key_id,
    }
    assert response["usageIdentifierKey"] == "sluice-api-usage-plan-key-acme"
    (statement,) = response["policyDocument"]["Statement"]
    assert statement["Resource"] == ["arn:aws:execute-api:eu-west-1:123456789012:a1b2c3d4e5/v1/*/*"]


def test_x_api_key_works_and_tenants_without_a_plan_share_the_default(
    keys_container: Container,
) -> None:
    _, key = keys_container.keys.create("globex", ["predict"])
    response = authorize(request(**{"X-Api-Key": key}), keys=keys_container.keys, usage=USAGE)
    assert effect(response) == "Allow"
    assert response["context"]["tenant"] == "globex"
    assert response["context"]["scopes"] == "predict"
    assert response["usageIdentifierKey"] == "sluice-api-usage-plan-key-_default"


def test_the_bearer_scheme_is_case_insensitive(keys_container: Container) -> None:
    _, key = keys_container.keys.create("acme", ["predict"])
    assert (
        effect(
            authorize(request(authorization=f"bearer {key}"), keys=keys_container.keys, usage=USAGE)
        )
        == "Allow"
    )


@pytest.mark.parametrize(
    "headers",
    [
        {"Authorization": "Bearer sk_0123456789abcdef_not-the-secret"},
        {"Authorization": "Bearer not-a-sluice-key"},
        {"x-api-key": "sk_"},
        {"Authorization": "Basic dXNlcjpwYXNz"},
    ],
)
def test_a_wrong_key_is_denied(keys_container: Container, headers: dict[str, str]) -> None:
    response = authorize(request(**headers), keys=keys_container.keys, usage=USAGE)
    assert effect(response) == "Deny"
    assert "context" not in response or not response["context"]
    assert "usageIdentifierKey" not in response



def test_a_key_sent_only_as_a_websocket_subprotocol_is_denied_on_the_rest_api(keys_container: Container) -> None:
    """An HTTP request presents its key as `Authorization: Bearer` or `x-api-key`, as
    `sluice serve` reads it (401 otherwise); a `bearer.<key>` subprotocol opens a WebSocket only."""
    _, key = keys_container.keys.create("acme", ["predict", "admin"])
    offered = request(**{"Sec-WebSocket-Protocol": f"sluice.v1, bearer.{key}"})
    assert effect(authorize(offered, keys=keys_container.keys, usage=USAGE)) == "Deny"
    assert effect(authorize_connect(offered, keys=keys_container.keys)) == "Allow"


class CountingRegistry(SqliteRegistry):
    """The real registry, counting its key lookups."""

    lookups = 0

    def get_api_key(self, key_id: str) -> Any:
        self.lookups += 1
        return super().get_api_key(key_id)


@pytest.mark.parametrize("length", [KEY_ID_CHARS + 1, 2100])
def test_a_key_whose_id_is_longer_than_any_made_is_denied_without_a_lookup(tmp_path: Path, length: int) -> None:
    """DynamoDB answers an oversized key with an error, not a miss: such an id is never looked up."""
    registry = CountingRegistry(tmp_path / "registry.db")
    keys = KeyService(registry, cache_ttl_s=0)
    _, key = keys.create("acme", ["predict"])
    assert effect(authorize(request(Authorization=f"Bearer {key}"), keys=keys, usage=USAGE)) == "Allow"
    assert registry.lookups == 1
    response = authorize(request(Authorization=f"Bearer sk_{'a' * length}_x"), keys=keys, usage=USAGE)
    assert effect(response) == "Deny" and registry.lookups == 1

def test_a_revoked_key_is_denied(keys_container: Container) -> None:
    record, key = keys_container.keys.create("acme", ["predict", "admin"])
    keys_container.keys.create("acme", ["admin"])  # the tenant's last admin key cannot be revoked
    admin = Principal("acme", frozenset({"admin"}), "test-admin")
    keys_container.keys.revoke(admin, record.key_id)
    response = authorize(
        request(Authorization=f"Bearer {key}"), keys=keys_container.keys, usage=USAGE
    )
    assert effect(response) == "Deny"


def test_a_missing_header_is_denied(keys_container: Container) -> None:
    response = authorize(request(), keys=keys_container.keys, usage=USAGE)
    assert effect(response) == "Deny"
    assert response["principalId"] == "anonymous"


def test_the_key_never_reaches_the_logs(
    keys_container: Container, caplog: pytest.LogCaptureFixture
) -> None:
    _, key = keys_container.keys.create("acme", ["predict"])
    wrong = key[:-4] + "AAAA"
    with caplog.at_level(logging.DEBUG):
        authorize(request(Authorization=f"Bearer {wrong}"), keys=keys_container.keys, usage=USAGE)
        authorize(request(Authorization=f"Bearer {key}"), keys=keys_container.keys, usage=USAGE)
    # Not other tests' mirror threads, nor powertools' own word on the logger (said once per
    # process, by whichever test first makes one: this one where it runs first in its worker).
    mine = [r for r in caplog.records if r.thread == threading.get_ident() and not r.name.startswith("aws_lambda_powertools")]
    assert [r.getMessage() for r in mine] == ["api key rejected"]
    logged = " ".join(str(vars(record)) for record in caplog.records)
    secret = key.split("_", 2)[2]  # sk_<key id>_<secret>; the secret may hold "_" too
    assert secret[:-4] not in logged


def test_usage_plans_come_from_the_environment_the_stack_sets(monkeypatch: pytest.MonkeyPatch) -> None:
    from sluice.settings import AuthSettings

    monkeypatch.setenv("SLUICE_USAGE_KEY_PREFIX", "p-")
    monkeypatch.setenv("SLUICE_USAGE_TENANTS", "acme, initech ,")  # as a person writes a comma-separated list
    plans = UsagePlans.from_settings(AuthSettings())
    assert plans.key_for("initech") == "p-initech" and plans.key_for("acme") == "p-acme"
    assert plans.key_for("globex") == "p-_default"
    monkeypatch.delenv("SLUICE_USAGE_KEY_PREFIX")
    assert UsagePlans.from_settings(AuthSettings()).key_for("acme") is None
