"""The WebSocket Lambda fed events with a field missing or a body it cannot decode refuses or
answers them, before any model runs (it raised: an invocation error, some after the model had
run and its prediction was counted)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from sluice.clients import AwsClients
from sluice.handlers.websocket import route
from tests.integration.aws.conftest import REGION
from tests.integration.aws.test_websocket_lambda import load, posted

if TYPE_CHECKING:
    from sluice.wiring import Container


def _message(demo: Container) -> dict:
    record, _ = demo.keys.create("acme", ["predict"])
    event = load("websocket_message.json")
    event["requestContext"]["authorizer"].update(subject=record.key_id, principalId=record.key_id)
    return event


@pytest.mark.parametrize("field", ["connectionId", "domainName", "stage"])
def test_a_default_event_missing_a_context_field_is_refused_not_raised(aws: None, demo: Container, field: str) -> None:
    event = _message(demo)
    del event["requestContext"][field]
    answer = route(event, container=demo, clients=AwsClients(region=REGION))
    assert 400 <= answer["statusCode"] < 500


def test_an_event_without_request_context_is_refused_not_raised(aws: None, demo: Container) -> None:
    event = _message(demo)
    del event["requestContext"]
    assert route(event, container=demo, clients=AwsClients(region=REGION))["statusCode"] == 401


def test_a_base64_body_that_does_not_decode_is_answered_422(aws: None, demo: Container) -> None:
    event = _message(demo)
    event["isBase64Encoded"], event["body"] = True, "not base64!!"
    assert route(event, container=demo, clients=AwsClients(region=REGION)) == {"statusCode": 200}
    (answer,) = posted(event["requestContext"]["connectionId"])
    assert (answer["status"], answer["code"], answer["request_id"]) == (422, "invalid_request", None)
