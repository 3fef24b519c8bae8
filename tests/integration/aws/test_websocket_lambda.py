"""The WebSocket Lambda and the `$connect` authorizer fed with the API Gateway WebSocket events
in `events/`; answers go through the API Gateway Management API (moto; botocore's Stubber for
GoneException, which moto does not model)."""

from __future__ import annotations

import base64
import copy
import json
from typing import TYPE_CHECKING, Any

import boto3
import pytest
from aws_lambda_powertools.utilities.data_classes.api_gateway_authorizer_event import (
    APIGatewayAuthorizerRequestEvent,
)
from botocore.stub import Stubber
from hypothesis import given
from hypothesis import strategies as st

from sluice.clients import AwsClients
from sluice.handlers.authorizer import authorize_connect
from sluice.handlers.websocket import route
from tests.conftest import EVENTS
from tests.integration.aws.conftest import REGION

if TYPE_CHECKING:
    from sluice.domain import Principal
    from sluice.wiring import Container

ACCOUNT = "123456789012"  # moto's default account


def load(name: str) -> dict[str, Any]:
    return json.loads((EVENTS / name).read_text())


def with_key(event: dict[str, Any], key: str) -> dict[str, Any]:
    event = copy.deepcopy(event)
    for headers in (event["headers"], event["multiValueHeaders"]):
        value = headers["Sec-WebSocket-Protocol"]
        headers["Sec-WebSocket-Protocol"] = [v.replace("REPLACED_BY_TESTS", key) for v in value] if isinstance(value, list) else value.replace("REPLACED_BY_TESTS", key)
    return event


def message(body: str | bytes, *, tenant: str = "acme", key_id: str, connection: str = "c1", b64: bool = False) -> dict[str, Any]:
    event = load("websocket_message.json")
    event["requestContext"]["authorizer"].update(tenant=tenant, subject=key_id, principalId=key_id)
    event["requestContext"]["connectionId"] = connection
    raw = body.encode() if isinstance(body, str) else body
    event["body"] = base64.b64encode(raw).decode() if b64 else raw.decode()
    event["isBase64Encoded"] = b64
    return event


@pytest.fixture
def key(demo: Container) -> tuple[str, str]:
    record, plain = demo.keys.create("acme", ["predict"])
    return record.key_id, plain


def connections() -> dict[str, Any]:
    """moto's connections of every region (the region is the one the API's domain names),
    by connection id (moto keeps them URL-quoted)."""
    from urllib.parse import unquote

    from moto.apigatewaymanagementapi.models import apigatewaymanagementapi_backends

    return {unquote(c): v for b in apigatewaymanagementapi_backends[ACCOUNT].values() for c, v in b.connections.items()}


def posted(connection: str) -> list[dict[str, Any]]:
    """What the Management API received for a connection, one answer per JSON object."""
    found = connections().get(connection)
    data = found.data.decode() if found is not None else ""
    decoder, out, at = json.JSONDecoder(), [], 0
    while at < len(data):
        obj, at = decoder.raw_decode(data, at)
        out.append(obj)
    return out


def test_the_connect_authorizer_allows_a_key_on_connect_alone_and_puts_the_tenant_in_context(demo: Container, key: tuple[str, str]) -> None:
    key_id, plain = key
    event = with_key(load("websocket_authorizer_connect.json"), plain)
    allowed = authorize_connect(APIGatewayAuthorizerRequestEvent(event), keys=demo.keys)
    (statement,) = allowed["policyDocument"]["Statement"]
    assert statement["Effect"] == "Allow" and statement["Resource"] == event["methodArn"]
    kept = json.loads(allowed["context"].pop("headers"))
    assert allowed["context"] == {"tenant": "acme", "scopes": "predict", "subject": key_id}
    assert kept["x-forwarded-for"] == "203.0.113.10" and "sec-websocket-protocol" not in kept  # never the key
    denied = authorize_connect(APIGatewayAuthorizerRequestEvent(with_key(load("websocket_authorizer_connect.json"), "sk_x_wrong")), keys=demo.keys)
    assert denied["policyDocument"]["Statement"][0]["Effect"] == "Deny" and "context" not in denied


def test_connect_accepts_the_subprotocol_and_never_echoes_the_key(demo: Container) -> None:
    answer = route(with_key(load("websocket_connect.json"), "sk_a_secret"), container=demo)
    assert answer == {"statusCode": 200, "headers": {"Sec-WebSocket-Protocol": "sluice.v1"}}
    unauthorized = load("websocket_connect.json")
    del unauthorized["requestContext"]["authorizer"]
    assert route(unauthorized, container=demo)["statusCode"] == 401
    assert route(load("websocket_disconnect.json"), container=demo) == {"statusCode": 200}


def test_a_message_is_answered_on_its_connection(aws: None, demo: Container, key: tuple[str, str]) -> None:
    key_id, _ = key
    clients = AwsClients(region=REGION)
    event = load("websocket_message.json")
    event["requestContext"]["authorizer"].update(subject=key_id, principalId=key_id)
    assert route(event, container=demo, clients=clients) == {"statusCode": 200}
    (answer,) = posted(event["requestContext"]["connectionId"])
    assert answer["request_id"] == "r-1" and answer["prediction"] == "setosa" and answer["deployment"] == "iris"
    # base64-encoded (a binary frame) reads the same
    body = json.dumps({"request_id": "b", "deployment": "iris", "inputs": [[5.1, 3.5, 1.4, 0.2]]})
    route(message(body, key_id=key_id, connection="c2", b64=True), container=demo, clients=clients)
    assert posted("c2")[0]["prediction"] == "setosa"


def test_bad_messages_and_other_tenants_get_error_answers(aws: None, demo: Container, key: tuple[str, str], globex: Principal) -> None:
    key_id, _ = key
    clients = AwsClients(region=REGION)
    route(message('{"request_id": "j", "deployment": ', key_id=key_id, connection="bad"), container=demo, clients=clients)
    route(message('{"request_id": "n", "deployment": "nope", "features": {}}', key_id=key_id, connection="bad"), container=demo, clients=clients)
    _, globex_key = demo.keys.create("globex", ["predict"])
    globex_id = globex_key.split("_")[1]
    route(message('{"request_id": "g", "deployment": "iris", "features": {}}', tenant="globex", key_id=globex_id, connection="bad"), container=demo, clients=clients)
    bad_json, unknown, other_tenant = posted("bad")
    assert (bad_json["request_id"], bad_json["status"], bad_json["code"]) == (None, 422, "invalid_request")
    assert (unknown["request_id"], unknown["status"], unknown["code"]) == ("n", 404, "not_found")
    assert (other_tenant["request_id"], other_tenant["status"]) == ("g", 404)


def test_a_revoked_key_is_answered_401_and_its_connection_closed(aws: None, demo: Container, key: tuple[str, str], acme: Principal) -> None:
    key_id, _ = key
    clients = AwsClients(region=REGION)
    body = '{"request_id": "r", "deployment": "iris", "inputs": [[5.1, 3.5, 1.4, 0.2]]}'
    route(message(body, key_id=key_id, connection="live"), container=demo, clients=clients)
    assert posted("live")[0]["prediction"] == "setosa"
    demo.keys.revoke(acme, key_id)
    route(message(body, key_id=key_id, connection="revoked"), container=demo, clients=clients)
    assert "revoked" not in connections()  # answered, then closed
    # the answer went out before the close: seen by a management client spying on the calls
    calls: list[str] = []
    management = clients.client("apigatewaymanagementapi", endpoint_url="https://abcdef123.execute-api.us-east-1.amazonaws.com/v1", connect_timeout=2, read_timeout=5)
    management.meta.events.register("before-call.apigatewaymanagementapi.*", lambda model, **_: calls.append(model.name))
    route(message(body.replace('"r"', '"again"'), key_id=key_id, connection="revoked2"), container=demo, clients=clients)
    assert calls == ["PostToConnection", "DeleteConnection"]


def test_a_revoked_keys_message_that_is_not_base64_is_refused_401_and_closed(aws: None, demo: Container, key: tuple[str, str], acme: Principal) -> None:
    """Whatever the message holds, even a body its event says is base64 and is not: answered
    422 before the key was looked at, the connection kept open, the message never counted."""
    key_id, _ = key
    demo.keys.revoke(acme, key_id)
    clients = AwsClients(region=REGION)
    sent: list[tuple[str, Any]] = []  # the calls the handler makes, as made
    management = clients.client("apigatewaymanagementapi", endpoint_url="https://abcdef123.execute-api.us-east-1.amazonaws.com/v1", connect_timeout=2, read_timeout=5)
    management.meta.events.register("provide-client-params.apigatewaymanagementapi.*", lambda params, model, **_: sent.append((model.name, params.get("Data"))))
    event = message("x", key_id=key_id, connection="undecodable")
    event["isBase64Encoded"], event["body"] = True, "not base64!!"
    route(event, container=demo, clients=clients)
    assert [name for name, _ in sent] == ["PostToConnection", "DeleteConnection"]
    assert json.loads(sent[0][1])["status"] == 401 and "undecodable" not in connections()


IRIS_MESSAGE = '{"request_id": "x", "deployment": "iris", "inputs": [[5.1, 3.5, 1.4, 0.2]]}'


def _management_client() -> Any:
    """A Management API client for botocore's Stubber (no request leaves it)."""
    return boto3.client(
        "apigatewaymanagementapi", region_name=REGION, endpoint_url="https://abcdef123.execute-api.eu-west-1.amazonaws.com/v1",
        aws_access_key_id="testing", aws_secret_access_key="testing",
    )  # fmt: skip


class _Stubbed:
    def __init__(self, client: Any) -> None:
        self._client = client

    def client(self, service: str, **_: Any) -> Any:
        assert service == "apigatewaymanagementapi"
        return self._client


def test_a_client_gone_before_its_answer_is_no_error(demo: Container, key: tuple[str, str]) -> None:
    key_id, _ = key
    client = _management_client()
    with Stubber(client) as stub:
        stub.add_client_error("post_to_connection", service_error_code="GoneException", http_status_code=410)
        event = message(IRIS_MESSAGE, key_id=key_id)
        assert route(event, container=demo, clients=_Stubbed(client)) == {"statusCode": 200}  # type: ignore[arg-type]
        stub.assert_no_pending_responses()


@pytest.mark.parametrize(("codes", "sent"), [
    (["LimitExceededException", "LimitExceededException"], True),  # throttled twice, then sent
    (["LimitExceededException"] * 3, False),  # throttled every time: logged, not a failed invocation
    (["ForbiddenException"], False),
    (["PayloadTooLargeException"], False),
])  # fmt: skip
def test_an_answer_the_management_api_refuses_is_tried_again_when_throttled_and_logged_otherwise(
    demo: Container, key: tuple[str, str], caplog: pytest.LogCaptureFixture, codes: list[str], sent: bool
) -> None:
    """A post refused for another reason than a client gone (throttling, Forbidden, too large)
    failed the invocation with botocore's traceback after the prediction had run: the
    throttled one is tried again (three posts in all), and what is still refused is a warning
    naming its code; the invocation ends well either way."""
    key_id, _ = key
    client = _management_client()
    with Stubber(client) as stub:
        for code in codes:
            stub.add_client_error("post_to_connection", service_error_code=code, http_status_code=400 if code != "LimitExceededException" else 429)
        if sent:
            stub.add_response("post_to_connection", {})
        event = message(IRIS_MESSAGE, key_id=key_id)
        assert route(event, container=demo, clients=_Stubbed(client)) == {"statusCode": 200}  # type: ignore[arg-type]
        stub.assert_no_pending_responses()
    warned = [r for r in caplog.records if r.getMessage() == "websocket answer not sent"]
    assert [r.error_code for r in warned] == ([] if sent else [codes[-1]])  # type: ignore[attr-defined]


def test_the_authorizer_function_tells_a_websocket_connect_from_a_rest_request(demo: Container, key: tuple[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    import sluice.wiring
    from sluice.handlers import authorizer

    monkeypatch.setattr(sluice.wiring, "get_container", lambda: demo)
    key_id, plain = key
    event = with_key(load("websocket_authorizer_connect.json"), plain)
    answer = authorizer.handler(event, None)
    assert answer["policyDocument"]["Statement"][0]["Resource"] == event["methodArn"]  # not REST's stage/*/*
    assert answer["context"]["subject"] == key_id


def test_a_connections_message_rate_holds_across_containers(aws: None, demo: Container, key: tuple[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Each message may reach another Lambda container: the count is the registry's, so two
    containers over one registry refuse the fourth message of a 3/minute connection."""
    from types import SimpleNamespace

    from sluice.services import connection_rate
    from sluice.wiring import Container

    monkeypatch.setattr(connection_rate, "time", SimpleNamespace(time=lambda: 1_800_000_010.0))  # 50 s left in its minute
    settings = demo.settings.replace(websocket_rate_limit="3/minute")
    first, second = Container.from_settings(settings), Container.from_settings(settings)
    key_id, _ = key
    clients = AwsClients(region=REGION)
    body = '{"request_id": "m%d", "deployment": "iris", "inputs": [[5.1, 3.5, 1.4, 0.2]]}'
    for n, container in enumerate((first, second, first, second)):
        route(message(body % n, key_id=key_id, connection="busy"), container=container, clients=clients)
    route(message(body % 9, key_id=key_id, connection="calm"), container=second, clients=clients)
    answers = posted("busy")
    assert [a.get("prediction") for a in answers[:3]] == ["setosa"] * 3
    refused = answers[3]
    assert (refused["request_id"], refused["status"], refused["code"]) == ("m3", 429, "rate_limited")
    assert refused["details"]["retry_after_s"] == 50 and "3/minute" in refused["error"]
    assert posted("calm")[0]["prediction"] == "setosa"  # another connection has its own count


def test_a_rate_that_is_not_one_is_refused_by_name() -> None:
    from sluice.services.connection_rate import parse_rates

    assert [(r.count, r.seconds) for r in parse_rates("100/second; 600 per 10 minutes")] == [(100, 1), (600, 600)]
    with pytest.raises(ValueError, match="'lots/second' is not a rate"):
        parse_rates("10/minute;lots/second")


_PART = st.tuples(st.integers(1, 10**6), st.sampled_from(["", "1 ", "2 ", "60 "]), st.sampled_from(["second", "seconds", "minute", "hour"]))


@given(parts=st.lists(_PART, min_size=1, max_size=6))
def test_each_window_length_is_one_rate_at_its_lowest_count(parts: list[tuple[int, str, str]]) -> None:
    """A window is counted once a message, whatever rates share its length: the lowest binds."""
    from sluice.services.connection_rate import SECONDS, parse_rates

    spec = ";".join(f"{count} per {every}{unit}" for count, every, unit in parts)
    lowest: dict[int, int] = {}
    for count, every, unit in parts:
        seconds = int(every or 1) * SECONDS[unit.rstrip("s")]
        lowest[seconds] = min(count, lowest.get(seconds, count))
    assert {r.seconds: r.count for r in parse_rates(spec)} == lowest
    assert len(parse_rates(spec)) == len(lowest)


REGION_POLICY = {
    "kind": "switch",
    "cases": [{"name": "eu", "when": {"field": "headers.x-region", "op": "in", "value": ["eu", "uk"]}, "target": {"kind": "single", "model": "iris", "version": 1}}],
    "default": {"kind": "single", "model": "iris", "version": 2},
}


def test_a_message_is_routed_by_its_handshake_headers_as_on_sluice_serve(aws: None, demo: Container, key: tuple[str, str], acme: Principal) -> None:
    """API Gateway gives a message no headers: the `$connect` authorizer keeps the handshake's,
    so `headers.<name>` reads as it does on the local route."""
    from tests.conftest import MODELS

    demo.models.push(acme, "iris", (MODELS / "iris_forest.onnx").read_bytes())  # iris:2 beside iris:1
    demo.deployments.create(acme, "region", REGION_POLICY)
    key_id, plain = key
    body = json.dumps({"request_id": "r", "deployment": "region", "inputs": [[6.7, 3.0, 5.2, 2.3]]})
    for connection, region in (("uk", "uk"), ("us", "us")):
        handshake = with_key(load("websocket_authorizer_connect.json"), plain)
        handshake["headers"]["X-Region"] = region
        context = authorize_connect(APIGatewayAuthorizerRequestEvent(handshake), keys=demo.keys)["context"]
        event = message(body, key_id=key_id, connection=connection)
        event["requestContext"]["authorizer"].update(context)
        route(event, container=demo, clients=AwsClients(region=REGION))
    (uk,), (us,) = posted("uk"), posted("us")
    assert (uk["case"], uk["version"]) == ("eu", 1)
    assert (us["case"], us["version"]) == ("default", 2)


def test_a_message_refused_by_one_rate_is_counted_in_no_other(aws: None, demo: Container, key: tuple[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    """5/minute;2/second, a burst of six in one second: two answers, and the four refused by
    the second's rate leave the minute's with three more to answer, as on `sluice serve`."""
    from types import SimpleNamespace

    from sluice.services import connection_rate
    from sluice.wiring import Container

    now = [1_800_000_010.0]  # 50 s left in its minute
    monkeypatch.setattr(connection_rate, "time", SimpleNamespace(time=lambda: now[0]))
    container = Container.from_settings(demo.settings.replace(websocket_rate_limit="5/minute;2/second"))
    key_id, _ = key
    clients = AwsClients(region=REGION)
    body = '{"request_id": "m%d", "deployment": "iris", "inputs": [[5.1, 3.5, 1.4, 0.2]]}'
    for n in range(6):
        route(message(body % n, key_id=key_id, connection="burst"), container=container, clients=clients)
    now[0] += 2.0
    route(message(body % 9, key_id=key_id, connection="burst"), container=container, clients=clients)
    answers = posted("burst")
    assert [a.get("prediction") for a in answers[:2]] == ["setosa"] * 2
    assert all(a["code"] == "rate_limited" and "2/second" in a["error"] and a["details"]["retry_after_s"] == 1 for a in answers[2:6])
    assert answers[6]["request_id"] == "m9" and answers[6]["prediction"] == "setosa"


def test_an_answer_too_large_to_post_names_the_field_of_the_rows_as_http_does(aws: None, demo: Container, key: tuple[str, str]) -> None:
    key_id, _ = key
    rows = [[5.1, 3.5, 1.4, 0.2]] * 1200  # some 26 KB, whose answer is over 128 KB
    route(message(json.dumps({"request_id": "big", "deployment": "iris", "inputs": rows}), key_id=key_id, connection="big"), container=demo, clients=AwsClients(region=REGION))
    (answer,) = posted("big")
    assert (answer["request_id"], answer["status"], answer["code"], answer["field"]) == ("big", 413, "payload_too_large", "inputs")
