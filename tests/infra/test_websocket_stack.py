"""The WebSocket API (`websocket: enabled`): $connect behind the key authorizer, every route to
the websocket function, a throttled and logged stage, and a function that may only post to and
close connections of its own API's stage."""

from __future__ import annotations

import json

import pytest
from infra.config import SluiceConfig, load_config

from tests.infra.synth import (
    Synthesized,
    function_by_handler,
    policy_statements_of_role,
    properties,
    role_of,
)

WEBSOCKET = "sluice.handlers.websocket.handler"
AUTHORIZER = "sluice.handlers.authorizer.handler"


def test_off_by_default(default_app: Synthesized) -> None:
    assert not load_config().websocket.enabled
    assert properties(default_app.template("api"), "AWS::ApiGatewayV2::Api") == []


def test_connect_is_authorized_by_the_key_authorizer_and_every_route_reaches_the_function(full_app: Synthesized) -> None:
    template = full_app.template("api")
    (api,) = properties(template, "AWS::ApiGatewayV2::Api")
    assert api["ProtocolType"] == "WEBSOCKET"
    (authorizer,) = properties(template, "AWS::ApiGatewayV2::Authorizer")
    authorizer_id, _ = function_by_handler(template, AUTHORIZER)
    assert authorizer["AuthorizerType"] == "REQUEST" and authorizer["IdentitySource"] == []
    assert authorizer_id in json.dumps(authorizer["AuthorizerUri"])
    routes = {r["RouteKey"]: r for r in properties(template, "AWS::ApiGatewayV2::Route")}
    assert set(routes) == {"$connect", "$default", "$disconnect"}
    assert routes["$connect"]["AuthorizationType"] == "CUSTOM"
    function_id, _ = function_by_handler(template, WEBSOCKET)
    (integration,) = properties(template, "AWS::ApiGatewayV2::Integration")
    assert function_id in json.dumps(integration["IntegrationUri"]) and integration["TimeoutInMillis"] == 29000


def test_the_stage_is_throttled_and_logs_each_message_with_its_tenant(full_app: Synthesized) -> None:
    (stage,) = properties(full_app.template("api"), "AWS::ApiGatewayV2::Stage")
    assert stage["StageName"] == "v1" and stage["AutoDeploy"] is True
    assert stage["DefaultRouteSettings"]["ThrottlingRateLimit"] == 40
    assert stage["DefaultRouteSettings"]["ThrottlingBurstLimit"] == 80
    fields = json.loads(stage["AccessLogSettings"]["Format"])
    assert fields["tenant"] == "$context.authorizer.tenant" and "connectionId" in fields


def test_the_function_manages_only_its_own_stage_connections_and_reads_tenants_through_the_tenant_role(full_app: Synthesized) -> None:
    template = full_app.template("api")
    _, function = function_by_handler(template, WEBSOCKET)
    assert function["ReservedConcurrentExecutions"] == 50
    statements = policy_statements_of_role(template, role_of(function))
    manage = [s for s in statements if s["Action"] == "execute-api:ManageConnections"]
    (grant,) = manage
    resources = json.dumps(grant["Resource"])
    assert "/v1/POST/@connections/*" in resources and "/v1/DELETE/@connections/*" in resources
    assert "WebSocketApi" in resources  # this API's id, never every API of the account
    dynamo = [
        s for s in statements
        if any(str(a).startswith("dynamodb:") for a in (s["Action"] if isinstance(s["Action"], list) else [s["Action"]]))
        and not str(s.get("Sid", "")).startswith("LookupSource")  # the tenants' own feature tables (tests/infra/test_lookup_grants.py)
    ]
    (keys,) = dynamo  # the registry through its own credentials: API key items, GetItem only
    assert keys["Action"] == "dynamodb:GetItem"
    assert keys["Condition"]["ForAllValues:StringLike"]["dynamodb:LeadingKeys"] == ["K#*"]
    assert "SLUICE_TENANT_ROLE_ARN" in function["Environment"]["Variables"]
    # a connection's own rate, counted through the tenant role (UpdateItem on its partition)
    assert function["Environment"]["Variables"]["SLUICE_WEBSOCKET_RATE_LIMIT"] == "5/second;120 per minute"


def test_a_connection_rate_that_is_not_one_is_refused_by_the_config() -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="connection_rate_limit"):
        SluiceConfig.model_validate({"websocket": {"enabled": True, "connection_rate_limit": "lots"}})


def test_reserved_concurrency_of_the_websocket_function_counts_against_the_account() -> None:
    with pytest.raises(ValueError, match=r"websocket\.reserved_concurrency"):
        SluiceConfig.model_validate({"websocket": {"enabled": True, "reserved_concurrency": 500}})
    assert SluiceConfig.model_validate({"websocket": {"enabled": False, "reserved_concurrency": 500}})
