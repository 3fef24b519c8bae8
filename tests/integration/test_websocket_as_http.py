"""A prediction sent as a WebSocket message against the same prediction POSTed: for any body,
right or wrong (the simple JSON a caller might send, or text that is not JSON), and any key,
the message's answer says what the HTTP answer says: the same status and error code and field
for a refusal, the same prediction for an answer (but its latency and request id)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tests.integration.conftest import auth
from tests.integration.test_lambda_api import _PLAIN

if TYPE_CHECKING:
    from fastapi.testclient import TestClient

URL = "/api/v1/stream"
SETOSA = [5.1, 3.5, 1.4, 0.2]
VOLATILE = ("latency_ms", "request_id")
_RIGHT = st.sampled_from([
    {"deployment": "iris", "inputs": [SETOSA]},
    {"deployment": "iris", "inputs": [SETOSA, [6.7, 3.0, 5.2, 2.3]]},
    {"deployment": "iris", "features": {"sepal_length": 5.1, "sepal_width": 3.5, "petal_length": 1.4, "petal_width": 0.2}},
])  # fmt: skip
_BODIES = st.one_of(_RIGHT, _RIGHT, _PLAIN, st.text(max_size=8))


def _steady(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _steady(v) for k, v in value.items() if k not in VOLATILE}
    return [_steady(v) for v in value] if isinstance(value, list) else value


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=_BODIES, who=st.sampled_from(["acme", "acme_predict", "globex"]))
def test_a_message_is_answered_as_the_request(client: TestClient, keys: dict[str, str], body: Any, who: str) -> None:
    text = body if isinstance(body, str) else json.dumps(body)
    http = client.post("/api/v1/predictions", content=text, headers={**auth(keys[who]), "content-type": "application/json"})
    with client.websocket_connect(URL, headers=auth(keys[who])) as ws:
        ws.send_text(text)
        answer = ws.receive_json()
    expected = http.json()
    event(str(http.status_code))
    if http.status_code == 200:
        assert "status" not in answer, answer
        assert _steady(answer) == _steady(expected)
    else:
        assert (answer.get("status"), answer.get("code"), answer.get("field")) == (http.status_code, expected["code"], expected.get("field")), (answer, expected)
