"""`ws://…/api/v1/stream` of a real `sluice serve --demo` (two workers), with the `websockets`
client: refused without a key, answers carry their ids (many in flight at once), a bad message
leaves the connection open, and a key revoked through the HTTP API (whichever worker takes the
call) stops an open connection."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pytest
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import connect

from tests.support import http

if TYPE_CHECKING:
    from pathlib import Path

    from websockets.sync.client import ClientConnection

SETOSA = {"deployment": "iris", "features": {"sepal_length": 5.1, "sepal_width": 3.5, "petal_length": 1.4, "petal_width": 0.2}}


@pytest.fixture
def service(demo_serve: tuple[int, str, Path]) -> tuple[int, str]:
    port, key, _ = demo_serve
    return port, key


def ask(ws: ClientConnection, message: dict[str, Any] | str) -> dict[str, Any]:
    ws.send(message if isinstance(message, str) else json.dumps(message))
    return json.loads(ws.recv(timeout=30))


def test_refused_without_a_valid_key(service: tuple[int, str]) -> None:
    port, _ = service
    with pytest.raises(InvalidStatus) as refused:
        connect(f"ws://127.0.0.1:{port}/api/v1/stream", additional_headers={"Authorization": "Bearer sk_no_such"})
    assert refused.value.response.status_code == 401
    assert json.loads(refused.value.response.body)["code"] == "unauthenticated"


def test_a_browser_style_connection_predicts_with_many_messages_in_flight(service: tuple[int, str]) -> None:
    port, key = service
    with connect(f"ws://127.0.0.1:{port}/api/v1/stream", subprotocols=["sluice.v1", f"bearer.{key}"]) as ws:  # type: ignore[list-item]
        assert ws.subprotocol == "sluice.v1"
        assert ask(ws, '{"deployment": ')["code"] == "invalid_request"  # and the connection stays
        for i in range(50):
            ws.send(json.dumps({**SETOSA, "request_id": f"r{i}"}))
        answers = [json.loads(ws.recv(timeout=30)) for _ in range(50)]
    assert sorted(a["request_id"] for a in answers) == sorted(f"r{i}" for i in range(50))
    assert {a["prediction"] for a in answers} == {"setosa"}


def test_a_key_revoked_through_the_api_stops_an_open_connection(service: tuple[int, str]) -> None:
    port, admin = service
    base, auth = f"http://127.0.0.1:{port}", {"Authorization": f"Bearer {admin}"}
    created = http("POST", f"{base}/api/v1/keys", json={"scopes": ["predict"], "name": "ws"}, headers=auth).json()
    with connect(f"ws://127.0.0.1:{port}/api/v1/stream", additional_headers={"x-api-key": created["key"]}) as ws:
        assert ask(ws, SETOSA)["prediction"] == "setosa"
        assert http("DELETE", f"{base}/api/v1/keys/{created['key_id']}", headers=auth).status_code == 200
        stopped = ask(ws, {**SETOSA, "request_id": "after"})
        assert (stopped["request_id"], stopped["code"]) == ("after", "unauthenticated")
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv(timeout=10)
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1008
